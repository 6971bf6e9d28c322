// BlockingWorkers: work runs off the caller's thread, at most `queue` items wait, and what was
// accepted runs before the workers are gone.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "daemon/service/blocking_workers.h"

namespace deltatune::daemon {
namespace {

TEST_CASE("blocking workers are bounded and finish what they accepted", "[daemon]") {
    std::atomic<int> done{0}, started{0};
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    {
        BlockingWorkers workers(2, 3);
        // Two stuck at work, three waiting: the sixth is refused, the caller never blocks.
        for (int i = 0; i < 2; ++i) {
            REQUIRE(workers.run([gate, &done, &started] {
                ++started;
                gate.wait();
                ++done;
            }));
        }
        while (started < 2) std::this_thread::yield();
        for (int i = 0; i < 3; ++i) REQUIRE(workers.run([&done] { ++done; }));
        CHECK_FALSE(workers.run([&done] { ++done; }));
        CHECK(done == 0);
        release.set_value();
    }
    CHECK(done == 5);
}

}  // namespace
}  // namespace deltatune::daemon
