#include "daemon/rank/job_profiler.h"

#include "absl/strings/str_cat.h"
#include "deltatune/v1/service.pb.h"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"

namespace deltatune {
namespace {

TrainerEvent failed(const std::string& id, const std::string& why) {
    return {"PROFILE_FAILED",
            "WARNING",
            absl::StrCat("profile ", id, ": ", why),
            {},
            {{"profile_id", id}}};
}

}  // namespace

void JobProfiler::order(const std::string& id, int steps) {
    std::lock_guard<std::mutex> lock(mu_);
    ordered_id_ = id;
    ordered_steps_ = steps;
}

std::optional<TrainerEvent> JobProfiler::after_step(int64_t step) {
    if (trace_) {
        if (++done_ < steps_) return std::nullopt;
        return finish();
    }
    return start(step);
}

std::optional<TrainerEvent> JobProfiler::end() {
    std::string id;
    {
        std::lock_guard<std::mutex> lock(mu_);
        id = ordered_steps_ > 0 ? ordered_id_ : "";
        ordered_steps_ = 0;
    }
    if (trace_) {
        daemon::stop_trace();
        trace_.reset();
        id = id_;
    }
    if (id.empty()) return std::nullopt;
    return failed(id, "training ended before the profiled steps ran");
}

JobProfiler::~JobProfiler() {
    if (trace_) daemon::stop_trace();
}

std::optional<TrainerEvent> JobProfiler::start(int64_t step) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (ordered_steps_ <= 0) return std::nullopt;
        id_ = ordered_id_, steps_ = ordered_steps_;
        ordered_id_.clear(), ordered_steps_ = 0;
    }
    trace_ = std::make_unique<daemon::StepTrace>();
    trace_->keep_events = true;
    if (absl::Status s = daemon::start_trace(trace_.get()); !s.ok()) {
        trace_.reset();
        return failed(id_, std::string(s.message()));
    }
    done_ = 0;
    first_step_ = step + 1;
    started_ = std::chrono::steady_clock::now();
    return TrainerEvent{"PROFILE_STARTED",
                        "INFO",
                        absl::StrCat("tracing steps ", first_step_, "..", step + steps_),
                        {{"step", double(first_step_)}, {"steps", double(steps_)}},
                        {{"profile_id", id_}}};
}

std::optional<TrainerEvent> JobProfiler::finish() {
    daemon::stop_trace();
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_)
            .count();
    std::unique_ptr<daemon::StepTrace> t = std::move(trace_);
    v1::Profile p;
    p.set_profile_id(id_);
    p.set_steps(steps_);
    p.set_first_step(first_step_);
    p.set_wall_ms(wall_ms);
    std::vector<std::pair<uint64_t, uint64_t>> all = t->compute;
    all.insert(all.end(), t->comm.begin(), t->comm.end());
    p.set_gpu_busy_ms(daemon::union_ms(all));
    p.set_nccl_exposed_ms(daemon::uncovered_ms(t->comm, t->compute));
    int64_t launches = 0;
    for (const auto& [name, n, ms] : daemon::top_kernels(*t, t->by_kernel.size())) {
        v1::Profile::Kernel* k = p.add_kernels();
        k->set_name(name), k->set_launches(n), k->set_total_ms(ms);
        launches += n;
    }
    const std::string trace = daemon::chrome_trace_json(*t, label_);
    p.set_trace_json(trace);
    const std::string base = absl::StrCat(dir_, "/", id_);
    absl::Status s = process_sandbox().make_dirs(dir_);
    if (s.ok()) s = write_file_atomic(base + ".binpb", p.SerializeAsString());
    if (s.ok()) s = write_file_atomic(base + ".trace.json", trace);
    if (!s.ok()) return failed(id_, std::string(s.message()));
    return TrainerEvent{"PROFILE_COMPLETED",
                        "INFO",
                        absl::StrCat(base, ".trace.json"),
                        {{"step", double(first_step_ + steps_ - 1)},
                         {"steps", double(steps_)},
                         {"wall_ms", wall_ms},
                         {"gpu_busy_ms", p.gpu_busy_ms()},
                         {"kernel_launches", double(launches)}},
                        {{"profile_id", id_}, {"path", base + ".trace.json"}}};
}

}  // namespace deltatune
