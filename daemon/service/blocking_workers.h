// A few threads for handler work that may block on files (a submission's checks read and stat
// the client's paths): the gRPC handler hands it over and returns at once, so a slow or stuck
// file holds one of these threads, never the server's. Bounded both ways: `threads` at work
// and at most `queue` waiting; past that, run() refuses and the caller answers UNAVAILABLE.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deltatune::daemon {

class BlockingWorkers {
  public:
    BlockingWorkers(int threads, size_t queue);
    // Runs what was queued, then joins.
    ~BlockingWorkers();
    BlockingWorkers(const BlockingWorkers&) = delete;
    BlockingWorkers& operator=(const BlockingWorkers&) = delete;

    // False (and `work` dropped) when `queue` items already wait.
    bool run(std::function<void()> work);

  private:
    void loop();

    const size_t max_queued_;
    std::mutex mu_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> queued_;  // guarded by mu_
    bool stopping_ = false;                     // guarded by mu_
    std::vector<std::thread> threads_;
};

}  // namespace deltatune::daemon
