// The watchdog fires once when beats stop, never while they keep coming, and not after it is
// destroyed; the ranks' policy (exit_on_expiry) ends a stuck process with its exit code and a
// message, even while the main thread is blocked.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "runtime/distributed/progress_watchdog.h"

namespace deltatune {
namespace {

using namespace std::chrono_literals;

TEST_CASE("watchdog fires once when beats stop", "[dist]") {
    std::atomic<int> fired{0};
    std::atomic<long long> late_ms{0};
    const auto t0 = std::chrono::steady_clock::now();
    ProgressWatchdog w(60ms, [&](std::chrono::milliseconds late) {
        late_ms = late.count();
        ++fired;
    });
    for (int i = 0; i < 10; ++i) {  // 200 ms of beats every 20 ms: no expiry
        std::this_thread::sleep_for(20ms);
        w.beat();
    }
    CHECK(fired == 0);
    CHECK_FALSE(w.expired());
    while (fired == 0 && std::chrono::steady_clock::now() - t0 < 5s) {
        std::this_thread::sleep_for(5ms);
    }
    std::this_thread::sleep_for(150ms);  // and only once
    CHECK(fired == 1);
    CHECK(w.expired());
    CHECK(late_ms >= 60);
}

TEST_CASE("watchdog destroyed before its limit never fires", "[dist]") {
    std::atomic<int> fired{0};
    {
        ProgressWatchdog w(10s, [&](std::chrono::milliseconds) { ++fired; });
        w.beat();
    }  // joins promptly rather than waiting out the 10 s
    CHECK(fired == 0);
}

// Forks: run it in a process of its own (as ctest does, one test case per process), not among
// tests that leave threads behind. Hence not tagged [dist].
TEST_CASE("exit_on_expiry ends a blocked process with its code and a message", "[fork]") {
    int pipe_fds[2];
    REQUIRE(pipe(pipe_fds) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // the "rank": stderr into the pipe, then blocked for good
        dup2(pipe_fds[1], 2);
        close(pipe_fds[0]);
        ProgressWatchdog w(100ms, exit_on_expiry("rank 7", 3));
        std::this_thread::sleep_for(std::chrono::hours(1));
        std::_Exit(0);
    }
    close(pipe_fds[1]);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    std::string err;
    char buf[256];
    for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) err.append(buf, size_t(n));
    close(pipe_fds[0]);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    CHECK(err.find("rank 7: no progress for ") != std::string::npos);
    CHECK(err.find("exiting with 3") != std::string::npos);
}

}  // namespace
}  // namespace deltatune
