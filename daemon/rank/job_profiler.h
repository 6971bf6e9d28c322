// A running job's profile (`deltatune profile`, ProfileJob): the supervisor's directive orders
// rank 0 to trace its next N steps with CUPTI (step_trace.h); this writes what GetProfile returns
// (OUTPUT_DIR/profiles/ID.binpb, a v1::Profile) and the Chrome trace beside it (ID.trace.json),
// and says so with a PROFILE_COMPLETED event (PROFILE_FAILED when CUPTI or the disk refuse).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "daemon/rank/step_trace.h"
#include "runtime/train/trainer.h"

namespace deltatune {

class JobProfiler {
  public:
    // `label` names the trace's GPU process, e.g. "jobs/abc rank 0".
    JobProfiler(std::string output_dir, std::string label)
        : dir_(std::move(output_dir) + "/profiles"), label_(std::move(label)) {}

    // From the directive (the reporter's thread): profile the next `steps` steps.
    void order(const std::string& id, int steps);
    // After each step, on the training thread: starts a pending profile (the next step is the
    // first traced), counts, and finishes; the event to report when one finished or failed.
    std::optional<TrainerEvent> after_step(int64_t step);
    // Training ended: a profile still waiting or tracing fails (the job ran out of steps).
    std::optional<TrainerEvent> end();
    ~JobProfiler();

  private:
    std::optional<TrainerEvent> start(int64_t step);
    std::optional<TrainerEvent> finish();

    std::string dir_, label_;
    std::mutex mu_;  // guards the order only
    std::string ordered_id_;
    int ordered_steps_ = 0;
    // The profile in progress (training thread only).
    std::string id_;
    int steps_ = 0, done_ = 0;
    int64_t first_step_ = 0;
    std::chrono::steady_clock::time_point started_;
    std::unique_ptr<daemon::StepTrace> trace_;
};

}  // namespace deltatune
