// An agent's state folder is its user's alone: created 0700, tightened if it is ours and open,
// refused when it is a symbolic link or not a directory.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "daemon/agents/agent_state_dir.h"
#include "tests/common/test_util.h"

namespace deltatune::daemon {
namespace {

mode_t mode_of(const std::string& path) {
    struct stat st {};
    REQUIRE(stat(path.c_str(), &st) == 0);
    return st.st_mode & 0777;
}

TEST_CASE("an agent's state folder is private to its user", "[daemon][agents]") {
    testing::TempDir tmp;
    const std::string root = tmp.str();
    const std::string fresh = root + "/a/b/state";
    REQUIRE(prepare_private_dir(fresh).ok());
    CHECK(mode_of(fresh) == 0700);
    CHECK(prepare_private_dir(fresh).ok());  // again: nothing changes

    const std::string open_dir = root + "/open";
    std::filesystem::create_directory(open_dir);
    chmod(open_dir.c_str(), 0777);
    REQUIRE(prepare_private_dir(open_dir).ok());
    CHECK(mode_of(open_dir) == 0700);

    const std::string link = root + "/link";
    std::filesystem::create_directory_symlink(fresh, link);
    const absl::Status through_link = prepare_private_dir(link);
    CHECK(absl::IsFailedPrecondition(through_link));
    CHECK(through_link.message().find("symbolic link") != std::string::npos);

    const std::string file = root + "/file";
    std::fclose(std::fopen(file.c_str(), "w"));
    CHECK(absl::IsFailedPrecondition(prepare_private_dir(file)));
}

TEST_CASE("the default state folder is under the user's own state root", "[daemon][agents]") {
    testing::ScopedEnv xdg("XDG_STATE_HOME", "/home/someone/.state");
    auto dir = default_agent_state_dir("node-7");
    REQUIRE(dir.ok());
    if (geteuid() == 0) {
        CHECK(*dir == "/var/lib/deltatune-agent/node-7");
    } else {
        CHECK(*dir == "/home/someone/.state/deltatune/agent-node-7");
    }
}

}  // namespace
}  // namespace deltatune::daemon
