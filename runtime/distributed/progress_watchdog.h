// A rank's last line of defence against hangs. Collectives poll their communicator and fail after
// its timeout, but a rank can still block where no poll runs: a synchronous CUDA call queued
// behind a collective whose peer died, or the teardown of an aborted communicator's streams. The
// watchdog is a thread that expects beat() at least every `limit`; when a beat is late it calls
// `on_expire` once (the caller's policy: the ranks' is to report and end the process, as
// PyTorch's NCCL watchdog does, so the supervisor can restart the job from its last checkpoint).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace deltatune {

class ProgressWatchdog {
  public:
    using Clock = std::chrono::steady_clock;
    // `on_expire` receives how long the rank has gone without a beat.
    ProgressWatchdog(std::chrono::milliseconds limit,
                     std::function<void(std::chrono::milliseconds)> on_expire);
    ~ProgressWatchdog();  // stops the thread (a pending expiry no longer fires)
    ProgressWatchdog(const ProgressWatchdog&) = delete;
    ProgressWatchdog& operator=(const ProgressWatchdog&) = delete;

    void beat();
    bool expired() const;

  private:
    void run();

    const std::chrono::milliseconds limit_;
    std::function<void(std::chrono::milliseconds)> on_expire_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    Clock::time_point last_;
    bool stop_ = false, expired_ = false;
    std::thread thread_;
};

// The ranks' expiry policy: prints "<who>: no progress for N ms (...)" to stderr and ends the
// process at once with `exit_code` (std::_Exit: no destructor may block on a dead collective).
std::function<void(std::chrono::milliseconds)> exit_on_expiry(std::string who, int exit_code);

}  // namespace deltatune
