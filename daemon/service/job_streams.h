// Server-streaming reactors for StreamJobEvents and WatchJob, and the hub that drives them.
// Streams never block anything: JobManager listeners only poke the hub's condition variable, and
// the hub's thread "pumps" each stream, which reads from the store at its own cursor and keeps at
// most one write in flight. A slow client therefore costs a cursor, never a buffer or a stall.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/jobs/job_manager.h"
#include "deltatune/v1/job.pb.h"

namespace deltatune::daemon {

class PumpedStream {
  public:
    virtual ~PumpedStream() = default;
    virtual void pump() = 0;  // writes the next message if it can; never blocks
};

class StreamHub {
  public:
    explicit StreamHub(JobManager* manager);
    ~StreamHub();  // call once the server has shut down (no live streams)
    void add(std::shared_ptr<PumpedStream> stream);
    void remove(PumpedStream* stream);
    void wake();
    size_t size();  // live streams (the deltatune_event_stream_subscribers gauge)

  private:
    void loop();
    JobManager* manager_;
    int listener_ = 0;
    std::mutex mu_;
    std::condition_variable cv_;
    bool dirty_ = false;
    bool stop_ = false;
    std::map<PumpedStream*, std::shared_ptr<PumpedStream>> streams_;
    std::thread thread_;
};

// StreamJobEvents: events with sequence > since_sequence, then live ones; a HEARTBEAT (carrying
// the last delivered sequence) after `heartbeat` without a write; finishes OK once the job is
// terminal and every event has been sent, NOT_FOUND if the job is (or gets) deleted.
grpc::ServerWriteReactor<v1::JobEvent>* start_event_stream(JobManager* manager, StreamHub* hub,
                                                           const std::string& name,
                                                           int64_t since_sequence,
                                                           std::chrono::milliseconds heartbeat);

// WatchJob: the Job now, then again after every change (coalesced); finishes after a terminal one.
grpc::ServerWriteReactor<v1::Job>* start_job_watch(JobManager* manager, StreamHub* hub,
                                                   const std::string& name);

// A stream that fails at once (bad argument, unauthenticated).
template <typename T>
grpc::ServerWriteReactor<T>* failed_stream(const grpc::Status& status) {
    struct Failed : grpc::ServerWriteReactor<T> {
        explicit Failed(const grpc::Status& s) { this->Finish(s); }
        void OnDone() override { delete this; }
    };
    return new Failed(status);
}

}  // namespace deltatune::daemon
