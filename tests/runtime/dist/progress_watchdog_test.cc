// The watchdog fires once when beats stop, never while they keep coming, and not after it is
// destroyed.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/dist/progress_watchdog.h"

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

}  // namespace
}  // namespace deltatune
