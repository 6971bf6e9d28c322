// PathSandbox: every path resolved beneath its root by the kernel, at the time of use.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;

void put(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
}

std::string read_all(const PathSandbox& box, const std::string& path) {
    absl::StatusOr<UniqueFd> fd = box.open(path, O_RDONLY);
    REQUIRE(fd.ok());
    absl::StatusOr<std::string> text = read_fd(fd->get(), path);
    REQUIRE(text.ok());
    return *text;
}

bool not_allowed(const absl::Status& s) {
    return absl::IsPermissionDenied(s) && absl::StrContains(s.message(), "PATH_NOT_ALLOWED");
}

// <tmp>/data (read), <tmp>/out (write), <tmp>/secret outside both.
struct Roots {
    testing::TempDir tmp;
    std::string data = tmp.file("data"), out = tmp.file("out"), secret = tmp.file("secret");
    Roots() {
        put(data + "/train.jsonl", "line\n");
        put(secret + "/shadow", "root:x\n");
        fs::create_directories(out);
    }
    PathSandbox box() const {
        absl::StatusOr<PathSandbox> b =
            PathSandbox::confined({{fs::canonical(data).string()}, {fs::canonical(out).string()}});
        REQUIRE(b.ok());
        return *std::move(b);
    }
};

TEST_CASE("sandbox opens files beneath its roots and refuses the rest", "[sandbox]") {
    Roots r;
    const PathSandbox box = r.box();
    const std::string data = fs::canonical(r.data).string();
    CHECK(read_all(box, data + "/train.jsonl") == "line\n");
    CHECK(not_allowed(box.open(fs::canonical(r.secret).string() + "/shadow", O_RDONLY).status()));
    CHECK(not_allowed(box.open(data + "/../secret/shadow", O_RDONLY).status()));
    CHECK(not_allowed(box.open("relative/path", O_RDONLY).status()));
    CHECK(absl::IsNotFound(box.open(data + "/missing.jsonl", O_RDONLY).status()));
    // Read-only roots refuse anything that writes.
    CHECK(not_allowed(box.open(data + "/new", O_WRONLY | O_CREAT).status()));
    CHECK(not_allowed(box.make_dirs(data + "/cache")));
    CHECK(not_allowed(box.remove_tree(data + "/train.jsonl")));
    CHECK(fs::exists(r.data + "/train.jsonl"));
}

TEST_CASE("sandbox refuses a symlink swapped in to lead outside, follows one inside", "[sandbox]") {
    Roots r;
    const PathSandbox box = r.box();
    const std::string data = fs::canonical(r.data).string();
    // The attack: the file validated at submit replaced by a link to a secret before it is read.
    fs::remove(r.data + "/train.jsonl");
    fs::create_symlink(r.secret + "/shadow", r.data + "/train.jsonl");
    CHECK(not_allowed(box.open(data + "/train.jsonl", O_RDONLY).status()));
    // A relative link that climbs out with "..", and one to "/", fail the same way.
    fs::create_symlink("../secret", r.data + "/up");
    CHECK(not_allowed(box.open(data + "/up/shadow", O_RDONLY).status()));
    fs::create_symlink("/", r.data + "/rootlink");
    CHECK(not_allowed(box.open(data + "/rootlink/etc/passwd", O_RDONLY).status()));
    CHECK(not_allowed(
        box.open(data + "/rootlink/" + std::string(300, 'x') + "/../etc/passwd", O_RDONLY)
            .status()));
    // Links that stay beneath the root (a model cache's snapshots -> blobs) still work.
    put(r.data + "/blobs/abc", "weights");
    fs::create_directories(r.data + "/snapshots");
    fs::create_symlink("../blobs/abc", r.data + "/snapshots/model.safetensors");
    CHECK(read_all(box, data + "/snapshots/model.safetensors") == "weights");
}

TEST_CASE("sandbox creates, renames and removes only beneath a writable root", "[sandbox]") {
    Roots r;
    const PathSandbox box = r.box();
    const std::string out = fs::canonical(r.out).string();
    REQUIRE(box.make_dirs(out + "/job/checkpoints/.tmp-1").ok());
    {
        absl::StatusOr<UniqueFd> fd =
            box.open(out + "/job/checkpoints/.tmp-1/a", O_WRONLY | O_CREAT);
        REQUIRE(fd.ok());
        REQUIRE(write_fd(fd->get(), "abc", 3, "a").ok());
    }
    REQUIRE(box.rename(out + "/job/checkpoints/.tmp-1", out + "/job/checkpoints/step-1").ok());
    absl::StatusOr<std::vector<DirEntry>> listed = box.list(out + "/job/checkpoints/step-1");
    INFO(listed.status().ToString());
    REQUIRE(listed.ok());
    REQUIRE(listed->size() == 1);
    CHECK(listed->front().name == "a");
    CHECK(listed->front().type == EntryType::kFile);
    CHECK(listed->front().bytes == 3);
    // An output folder created as a symlink to outside after the job was checked.
    fs::create_symlink(r.secret, r.out + "/evil");
    CHECK(not_allowed(box.make_dirs(out + "/evil/export")));
    CHECK(not_allowed(box.open(out + "/evil/export.bin", O_WRONLY | O_CREAT).status()));
    CHECK(!fs::exists(r.secret + "/export"));
    CHECK(!fs::exists(r.secret + "/export.bin"));
    // Removing a tree removes a link inside it, never what the link points at.
    fs::create_symlink(r.secret, r.out + "/job/checkpoints/step-1/link");
    REQUIRE(box.remove_tree(out + "/job").ok());
    CHECK(!fs::exists(r.out + "/job"));
    CHECK(fs::exists(r.secret + "/shadow"));
    CHECK(box.remove_tree(out + "/job").ok());  // already gone: fine
    CHECK(not_allowed(box.remove_tree(out)));   // never a root itself
}

TEST_CASE("unconfined sandbox opens paths as given", "[sandbox]") {
    Roots r;
    const PathSandbox box = PathSandbox::unconfined();
    CHECK(!box.is_confined());
    CHECK(read_all(box, r.secret + "/shadow") == "root:x\n");
    REQUIRE(box.make_dirs(r.tmp.file("a/b/c")).ok());
    CHECK(fs::is_directory(r.tmp.file("a/b/c")));
    REQUIRE(box.remove_tree(r.tmp.file("a")).ok());
    CHECK(!fs::exists(r.tmp.file("a")));
}

TEST_CASE("sandbox errors name the disk being full", "[sandbox]") {
    const absl::Status s = errno_status("/out/x", "write failed", ENOSPC);
    CHECK(absl::IsResourceExhausted(s));
    CHECK(absl::StartsWith(s.message(), "DISK_FULL: /out/x"));
}

TEST_CASE("sandbox opens only regular files, without blocking on a FIFO", "[sandbox]") {
    testing::TempDir tmp;
    const std::string root = tmp.file("root");
    put(root + "/file", "text");
    REQUIRE(::mkfifo((root + "/fifo").c_str(), 0600) == 0);
    auto confined = PathSandbox::confined({{}, {root}});
    REQUIRE(confined.ok());
    for (const PathSandbox* box : std::vector<const PathSandbox*>{&*confined, &process_sandbox()}) {
        // No writer ever comes: a blocking open would never return.
        for (int flags : {O_RDONLY, O_RDWR, O_WRONLY | O_CREAT | O_TRUNC}) {
            const absl::Status s = box->open(root + "/fifo", flags).status();
            CHECK(absl::IsFailedPrecondition(s));
            CHECK(absl::StrContains(s.message(), "NOT_A_REGULAR_FILE"));
            CHECK(absl::StrContains(s.message(), "FIFO"));
        }
        CHECK(absl::IsFailedPrecondition(box->open(root, O_RDONLY).status()));  // a folder
        CHECK(box->open(root, O_RDONLY | O_DIRECTORY).ok());
        CHECK(box->stat(root + "/fifo").ok());  // O_PATH: looked at, never opened for I/O
        absl::StatusOr<UniqueFd> fd = box->open(root + "/file", O_RDONLY);
        REQUIRE(fd.ok());
        CHECK((::fcntl(fd->get(), F_GETFL) & O_NONBLOCK) == 0);  // as the caller asked
        CHECK(read_all(*box, root + "/file") == "text");
    }
    CHECK(absl::IsFailedPrecondition(read_file(root + "/fifo").status()));
    CHECK(absl::IsFailedPrecondition(map_file(root + "/fifo").status()));
}

}  // namespace
}  // namespace deltatune
