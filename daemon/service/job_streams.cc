// Stream reactors. gRPC calls are made without our mutex held: a reaction (OnWriteDone, OnDone)
// may run on another thread at once, and it takes the same mutex.
#include "daemon/service/job_streams.h"

#include <deque>
#include <vector>

#include <google/protobuf/util/time_util.h>

#include "daemon/grpc_status.h"

namespace deltatune::daemon {
namespace {

using Clock = std::chrono::steady_clock;

// The write/finish/cancel protocol shared by both streams; subclasses decide the next message.
template <typename T>
class PumpedWriter : public grpc::ServerWriteReactor<T>, public PumpedStream {
  public:
    PumpedWriter(JobManager* manager, StreamHub* hub, std::string name)
        : manager_(manager), hub_(hub), name_(std::move(name)) {}

    // Ownership: the stream holds itself until OnDone; the hub holds it while registered.
    static grpc::ServerWriteReactor<T>* attach(std::shared_ptr<PumpedWriter> s) {
        s->self_ = s;
        s->hub_->add(s);
        s->pump();
        return s.get();
    }

    void pump() final {
        std::unique_lock<std::mutex> lock(mu_);
        if (finished_ || writing_) return;
        grpc::Status status = grpc::Status::CANCELLED;
        const Step step = cancelled_ ? Step::kFinish : next(&msg_, &status);
        if (step == Step::kIdle) return;
        if (step == Step::kWrite) {
            writing_ = true;
            lock.unlock();
            this->StartWrite(&msg_);
            return;
        }
        finished_ = true;
        lock.unlock();
        this->Finish(status);
    }
    void OnWriteDone(bool ok) override {
        {
            std::lock_guard<std::mutex> lock(mu_);
            writing_ = false;
            cancelled_ = cancelled_ || !ok;
        }
        pump();
    }
    void OnCancel() override {
        {
            std::lock_guard<std::mutex> lock(mu_);
            cancelled_ = true;
        }
        pump();
    }
    void OnDone() override {
        hub_->remove(this);
        auto keep = std::move(self_);  // may destroy *this on return: touch nothing after
    }

  protected:
    enum class Step { kIdle, kWrite, kFinish };
    // With mu_ held and no write in flight: fill *msg (kWrite), or *status (kFinish), or kIdle.
    virtual Step next(T* msg, grpc::Status* status) = 0;

    JobManager* manager_;
    StreamHub* hub_;
    const std::string name_;

  private:
    std::mutex mu_;
    T msg_;
    bool writing_ = false;
    bool finished_ = false;
    bool cancelled_ = false;
    std::shared_ptr<PumpedWriter> self_;
};

class EventStream final : public PumpedWriter<v1::JobEvent> {
  public:
    EventStream(JobManager* m, StreamHub* hub, std::string name, int64_t since,
                std::chrono::milliseconds heartbeat)
        : PumpedWriter(m, hub, std::move(name)), cursor_(since), heartbeat_(heartbeat) {}

  private:
    Step next(v1::JobEvent* msg, grpc::Status* status) override {
        if (pending_.empty()) {
            absl::StatusOr<JobManager::Cursor> cur = manager_->cursor(name_);
            if (!cur.ok()) return fail(cur.status(), status);
            if (cur->last_sequence > cursor_) {
                auto events = manager_->events_after(name_, cursor_, 64);
                if (!events.ok()) return fail(events.status(), status);
                pending_.assign(events->begin(), events->end());
            } else if (cur->terminal) {
                *status = grpc::Status::OK;
                return Step::kFinish;
            }
        }
        const auto now = Clock::now();
        if (!pending_.empty()) {
            *msg = std::move(pending_.front());
            pending_.pop_front();
            cursor_ = msg->sequence();
        } else if (now - last_write_ >= heartbeat_) {
            msg->Clear();
            msg->set_job(name_.rfind("jobs/", 0) == 0 ? name_ : "jobs/" + name_);
            msg->set_sequence(cursor_);
            msg->set_type("HEARTBEAT");
            msg->set_level(v1::JobEvent::INFO);
            *msg->mutable_time() = now_timestamp();
        } else {
            return Step::kIdle;
        }
        last_write_ = now;
        return Step::kWrite;
    }
    Step fail(const absl::Status& s, grpc::Status* status) {
        *status = ToGrpcStatus(s);
        return Step::kFinish;
    }

    int64_t cursor_;
    const std::chrono::milliseconds heartbeat_;
    Clock::time_point last_write_ = Clock::now();
    std::deque<v1::JobEvent> pending_;
};

class JobWatch final : public PumpedWriter<v1::Job> {
  public:
    using PumpedWriter::PumpedWriter;

  private:
    Step next(v1::Job* msg, grpc::Status* status) override {
        absl::StatusOr<JobManager::Cursor> cur = manager_->cursor(name_);
        absl::StatusOr<v1::Job> job =
            cur.ok() ? manager_->get_job(name_) : absl::StatusOr<v1::Job>(cur.status());
        if (!job.ok()) {
            *status = ToGrpcStatus(job.status());
            return Step::kFinish;
        }
        if (sent_ && cur->version == sent_version_) {
            if (!sent_terminal_) return Step::kIdle;
            *status = grpc::Status::OK;
            return Step::kFinish;
        }
        sent_ = true;
        sent_version_ = cur->version;
        sent_terminal_ = is_terminal(job->state());
        *msg = std::move(*job);
        return Step::kWrite;
    }

    bool sent_ = false;
    bool sent_terminal_ = false;
    uint64_t sent_version_ = 0;
};

}  // namespace

StreamHub::StreamHub(JobManager* manager) : manager_(manager) {
    listener_ = manager_->add_listener([this] { wake(); });
    thread_ = std::thread([this] { loop(); });
}

StreamHub::~StreamHub() {
    manager_->remove_listener(listener_);
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void StreamHub::add(std::shared_ptr<PumpedStream> stream) {
    std::lock_guard<std::mutex> lock(mu_);
    PumpedStream* key = stream.get();
    streams_[key] = std::move(stream);
}

void StreamHub::remove(PumpedStream* stream) {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(stream);
}

size_t StreamHub::size() {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_.size();
}

void StreamHub::wake() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        dirty_ = true;
    }
    cv_.notify_all();
}

void StreamHub::loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
        // The timeout drives heartbeats; changes wake us at once.
        cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return dirty_ || stop_; });
        dirty_ = false;
        std::vector<std::shared_ptr<PumpedStream>> snapshot;
        for (auto& [key, s] : streams_) snapshot.push_back(s);
        lock.unlock();
        for (auto& s : snapshot) s->pump();
        snapshot.clear();  // may run a stream's destructor: outside our lock
        lock.lock();
    }
}

grpc::ServerWriteReactor<v1::JobEvent>* start_event_stream(JobManager* manager, StreamHub* hub,
                                                           const std::string& name,
                                                           int64_t since_sequence,
                                                           std::chrono::milliseconds heartbeat) {
    return PumpedWriter<v1::JobEvent>::attach(
        std::make_shared<EventStream>(manager, hub, name, since_sequence, heartbeat));
}

grpc::ServerWriteReactor<v1::Job>* start_job_watch(JobManager* manager, StreamHub* hub,
                                                   const std::string& name) {
    return PumpedWriter<v1::Job>::attach(std::make_shared<JobWatch>(manager, hub, name));
}

}  // namespace deltatune::daemon
