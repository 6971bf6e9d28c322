#include "runtime/distributed/progress_watchdog.h"

#include <cstdio>
#include <cstdlib>

namespace deltatune {

ProgressWatchdog::ProgressWatchdog(std::chrono::milliseconds limit,
                                   std::function<void(std::chrono::milliseconds)> on_expire)
    : limit_(limit), on_expire_(std::move(on_expire)), last_(Clock::now()) {
    thread_ = std::thread([this] { run(); });
}

ProgressWatchdog::~ProgressWatchdog() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void ProgressWatchdog::beat() {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = Clock::now();
}

bool ProgressWatchdog::expired() const {
    std::lock_guard<std::mutex> lock(mu_);
    return expired_;
}

void ProgressWatchdog::run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
        const Clock::time_point due = last_ + limit_;
        if (Clock::now() < due) {
            cv_.wait_until(lock, due);
            continue;
        }
        expired_ = true;
        const auto late =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_);
        lock.unlock();
        on_expire_(late);  // once: the policy usually ends the process
        return;
    }
}

std::function<void(std::chrono::milliseconds)> exit_on_expiry(std::string who, int exit_code) {
    return [who = std::move(who), exit_code](std::chrono::milliseconds late) {
        std::fprintf(stderr,
                     "%s: no progress for %lld ms (a peer died, or a collective or device call "
                     "hangs); exiting with %d\n",
                     who.c_str(), static_cast<long long>(late.count()), exit_code);
        std::fflush(stderr);
        std::_Exit(exit_code);
    };
}

}  // namespace deltatune
