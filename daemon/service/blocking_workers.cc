#include "daemon/service/blocking_workers.h"

namespace deltatune::daemon {

BlockingWorkers::BlockingWorkers(int threads, size_t queue) : max_queued_(queue) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

BlockingWorkers::~BlockingWorkers() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
}

bool BlockingWorkers::run(std::function<void()> work) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_ || queued_.size() >= max_queued_) return false;
        queued_.push_back(std::move(work));
    }
    wake_.notify_one();
    return true;
}

void BlockingWorkers::loop() {
    while (true) {
        std::function<void()> work;
        {
            std::unique_lock<std::mutex> lock(mu_);
            wake_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
            if (queued_.empty()) return;  // stopping, nothing left
            work = std::move(queued_.front());
            queued_.pop_front();
        }
        work();
    }
}

}  // namespace deltatune::daemon
