// JobManager's client-facing half: create (with request_id idempotency), reads with page tokens,
// and the user transitions cancel/pause/resume/delete. The supervision half (scheduler, ranks,
// faults, shutdown) is job_supervisor.cc.
#include "daemon/jobs/job_manager.h"

#include <google/protobuf/util/message_differencer.h>
#include <optional>

#include <algorithm>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/config/job_yaml.h"
#include "daemon/jobs/job_manager_impl.h"
#include "daemon/jobs/output_claim.h"
#include "daemon/random_hex.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

using v1::Job;
using v1::JobEvent;

// Page tokens are "<last create_seq or sequence>.<hash of the filter>": a token replayed with a
// different filter is refused (AIP-158), and a token never grants access to anything by itself.
uint64_t fnv1a(std::string_view s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

absl::StatusOr<int64_t> parse_page_token(const std::string& token, uint64_t filter_hash) {
    if (token.empty()) return 0;
    std::vector<std::string> parts = absl::StrSplit(token, '.');
    int64_t after = 0;
    uint64_t hash = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &after) || after < 0 ||
        !absl::SimpleHexAtoi(parts[1], &hash) || hash != filter_hash) {
        return absl::InvalidArgumentError(
            "page_token is malformed or was issued for another filter");
    }
    return after;
}

std::string page_token(int64_t after, uint64_t filter_hash) {
    return absl::StrCat(after, ".", absl::Hex(filter_hash));
}

// A page of jobs stays well under the 4 MiB a gRPC client accepts by default.
constexpr size_t kMaxPageBytes = 1 << 20;

absl::StatusOr<int> page_size(int requested, int fallback) {
    if (requested < 0) {
        return absl::InvalidArgumentError(absl::StrCat("page_size (", requested, ") must be >= 0"));
    }
    return requested == 0 ? fallback : std::min(requested, 1000);
}

bool labels_match(const Job& job, const std::map<std::string, std::string>& want) {
    for (const auto& [k, v] : want) {
        auto it = job.spec().labels().find(k);
        if (it == job.spec().labels().end() || it->second != v) return false;
    }
    return true;
}

// The output_dir's owner (its marker) must be this job, nobody, or the job resume_from names
// once that job has stopped; resume_from naming a job must name the owner.
absl::Status check_output_owner(const JobManager::Impl& m, const v1::JobSpec& spec,
                                const std::string& job_name) {
    DT_ASSIGN_OR_RETURN(const OutputDirOwner owner,
                        output_dir_owner(*m.outputs, spec.output_dir()));
    const bool owned_by_job = owner.kind == OutputDirOwner::Kind::kJob;
    const std::string& from = spec.resume_from();
    if (absl::StartsWith(from, "jobs/") && !(owned_by_job && from == owner.job)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "INVALID_CONFIG: resume_from names ", from, ", but output_dir '", spec.output_dir(),
            "' ", owned_by_job ? absl::StrCat("belongs to ", owner.job) : "belongs to no job",
            "; to start from another folder's checkpoint, name the checkpoint folder"));
    }
    bool owner_running = false;
    if (owned_by_job && absl::StartsWith(owner.job, "jobs/")) {
        auto it = m.jobs.find(owner.job.substr(5));
        owner_running = it != m.jobs.end() && !is_terminal(it->second.stored.job.state()) &&
                        it->second.stored.job.state() != Job::PAUSED;
    }
    return check_output_dir(spec, job_name, owner, owner_running);
}

absl::StatusOr<Job> create_locked(JobManager::Impl& m, v1::JobSpec spec,
                                  const std::string& request_id, bool validate_only) {
    if (m.shutting_down) return absl::UnavailableError("deltatuned is shutting down");
    if (!request_id.empty()) {
        auto it = m.by_request_id.find(request_id);
        if (it != m.by_request_id.end()) {
            const Record& r = m.jobs.at(it->second);
            if (google::protobuf::util::MessageDifferencer::Equals(r.stored.job.spec(), spec)) {
                return m.view(r);
            }
            return absl::AlreadyExistsError(absl::StrCat("request_id '", request_id,
                                                         "' was used for ", r.stored.job.name(),
                                                         " with a different spec"));
        }
    }
    Record r;
    r.stored.id = random_hex(12);
    DT_RETURN_IF_ERROR(check_output_owner(m, spec, "jobs/" + r.stored.id));
    r.stored.create_seq = m.last_create_seq + 1;
    Job& job = r.stored.job;
    job.set_name("jobs/" + r.stored.id);
    job.set_uid(random_hex(32));
    *job.mutable_spec() = std::move(spec);
    job.set_state(Job::QUEUED);
    job.set_request_id(request_id);
    *job.mutable_create_time() = now_timestamp();
    if (validate_only) {
        job.clear_name();
        job.clear_uid();
        return job;
    }
    DT_RETURN_IF_ERROR(claim_output_dir(*m.outputs, job.spec().output_dir(), job.name()));
    Change c(r.stored);
    c.add("JOB_CREATED", JobEvent::INFO, "job created");
    c.add("VALIDATION_PASSED", JobEvent::INFO, "spec and paths are valid");
    c.add("QUEUED", JobEvent::INFO, "waiting for a slot");
    const std::string id = r.stored.id;
    Record& stored = m.jobs.emplace(id, std::move(r)).first->second;
    if (absl::Status s = m.commit(stored, std::move(c)); !s.ok()) {
        m.jobs.erase(id);
        return s;
    }
    m.last_create_seq = stored.stored.create_seq;
    m.by_seq[stored.stored.create_seq] = id;
    if (!request_id.empty()) m.by_request_id[request_id] = id;
    m.reorder_queue();
    m.wake = true;
    m.wake_cv.notify_all();
    return m.view(stored);
}

}  // namespace

bool is_terminal(Job::State s) {
    return s == Job::SUCCEEDED || s == Job::FAILED || s == Job::CANCELLED;
}

bool holds_resources(Job::State s) {
    return s == Job::PENDING || s == Job::RUNNING || s == Job::RECOVERING || s == Job::PAUSING ||
           s == Job::CANCELLING;
}

std::string job_dir(const JobManagerOptions& opt, const std::string& id) {
    return absl::StrCat(opt.state_dir, "/jobs/", id);
}

JobEvent& Change::add(const std::string& type, JobEvent::Level level, const std::string& message,
                      const std::map<std::string, std::string>& details) {
    JobEvent& e = events.emplace_back();
    e.set_type(type);
    e.set_level(level);
    e.set_message(message);
    e.set_attempt(next.job.attempt());
    for (const auto& [k, v] : details) (*e.mutable_details())[k] = v;
    return e;
}

void Change::set_state(Job::State state, const std::string& reason, const std::string& message) {
    Job& j = next.job;
    j.set_state(state);
    j.set_state_reason(reason);
    j.set_error_message(message);
    if (is_terminal(state)) {
        *j.mutable_end_time() = now_timestamp();
    } else {
        j.clear_end_time();
    }
}

absl::StatusOr<Record*> JobManager::Impl::lookup(const std::string& name) {
    static const std::regex kId("[a-z0-9][a-z0-9-]{0,62}");
    const std::string id = absl::StartsWith(name, "jobs/") ? name.substr(5) : name;
    if (!std::regex_match(id, kId)) {
        return absl::InvalidArgumentError(
            absl::StrCat("name '", name.substr(0, 80), "' is not of the form jobs/{id}"));
    }
    auto it = jobs.find(id);
    if (it == jobs.end()) return absl::NotFoundError(absl::StrCat("jobs/", id, " not found"));
    return &it->second;
}

Job JobManager::Impl::view(const Record& r) const {
    Job j = r.stored.job;
    j.set_queue_position(j.state() == Job::QUEUED ? r.queue_position : 0);
    return j;
}

absl::Status JobManager::Impl::commit(Record& r, Change c) {
    const auto now = now_timestamp();
    *c.next.job.mutable_update_time() = now;
    for (JobEvent& e : c.events) {
        e.set_job(c.next.job.name());
        e.set_sequence(++c.next.last_sequence);
        if (!e.has_time()) *e.mutable_time() = now;
        if (e.level() == JobEvent::LEVEL_UNSPECIFIED) e.set_level(JobEvent::INFO);
    }
    for (v1::Checkpoint& cp : c.checkpoints) {
        cp.set_job(c.next.job.name());
        if (!cp.has_create_time()) *cp.mutable_create_time() = now;
    }
    DT_RETURN_IF_ERROR(store->save(c.next, c.events, c.checkpoints));
    r.stored = std::move(c.next);
    ++r.version;
    return absl::OkStatus();
}

void JobManager::Impl::reorder_queue() {
    std::vector<Record*> queued;
    for (auto& [id, r] : jobs) {
        if (r.stored.job.state() == Job::QUEUED) {
            queued.push_back(&r);
        } else {
            r.queue_position = 0;
        }
    }
    std::sort(queued.begin(), queued.end(), [](const Record* a, const Record* b) {
        const int pa = a->stored.job.spec().priority(), pb = b->stored.job.spec().priority();
        return pa != pb ? pa > pb : a->stored.create_seq < b->stored.create_seq;
    });
    for (size_t i = 0; i < queued.size(); ++i) {
        if (queued[i]->queue_position != static_cast<int>(i) + 1) {
            queued[i]->queue_position = static_cast<int>(i) + 1;
            ++queued[i]->version;
        }
    }
}

void JobManager::Impl::notify() {
    std::lock_guard<std::mutex> lock(listeners_mu);
    for (auto& [id, fn] : listeners) fn();
}

JobManager::JobManager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

JobManager::~JobManager() {
    bool finished;
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        finished = impl_->finished;
    }
    if (!finished) shutdown(std::chrono::milliseconds(0));
}

absl::StatusOr<Job> JobManager::create_job(v1::JobSpec spec, const std::string& request_id,
                                           bool validate_only) {
    if (request_id.size() > 128) {
        return absl::InvalidArgumentError("request_id is longer than 128 bytes");
    }
    // Fields this daemon does not know are dropped, never stored or echoed back.
    spec.DiscardUnknownFields();
    DT_RETURN_IF_ERROR(prepare_job_spec(&spec, impl_->opt.roots, impl_->opt.limits));
    DT_RETURN_IF_ERROR(check_job_memory(spec, impl_->opt.gpu_memory_bytes, impl_->opt.gpus));
    DT_RETURN_IF_ERROR(check_cpu_admission(spec, impl_->opt.cpu));
    absl::StatusOr<Job> out;
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        out = create_locked(*impl_, std::move(spec), request_id, validate_only);
    }
    impl_->notify();
    return out;
}

absl::StatusOr<Job> JobManager::get_job(const std::string& name) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    DT_ASSIGN_OR_RETURN(Record * r, impl_->lookup(name));
    return impl_->view(*r);
}

absl::StatusOr<JobManager::ListResult> JobManager::list_jobs(const ListRequest& req) {
    DT_ASSIGN_OR_RETURN(const int size, page_size(req.page_size, 50));
    if (req.labels.size() > 64) return absl::InvalidArgumentError("more than 64 label filters");
    if (!Job::State_IsValid(req.state)) {
        return absl::InvalidArgumentError(
            absl::StrCat("state (", req.state, ") is not a Job.State value"));
    }
    std::string filter = absl::StrCat(req.state);
    for (const auto& [k, v] : req.labels) absl::StrAppend(&filter, "|", k, "=", v);
    const uint64_t hash = fnv1a(filter);
    DT_ASSIGN_OR_RETURN(const int64_t after, parse_page_token(req.page_token, hash));
    std::lock_guard<std::mutex> lock(impl_->mu);
    ListResult out;
    size_t bytes = 0;
    for (auto it = impl_->by_seq.upper_bound(after); it != impl_->by_seq.end(); ++it) {
        const Record& r = impl_->jobs.at(it->second);
        const Job& j = r.stored.job;
        if (req.state != Job::STATE_UNSPECIFIED && j.state() != req.state) continue;
        if (!labels_match(j, req.labels)) continue;
        // One more match than fits (by count, or by bytes after the first): a next page.
        const size_t job_bytes = j.ByteSizeLong();
        if (static_cast<int>(out.jobs.size()) == size ||
            (!out.jobs.empty() && bytes + job_bytes > kMaxPageBytes)) {
            out.next_page_token = page_token(std::prev(it)->first, hash);
            break;
        }
        bytes += job_bytes;
        out.jobs.push_back(impl_->view(r));
    }
    return out;
}

absl::StatusOr<JobManager::EventsResult> JobManager::list_events(const EventsRequest& req) {
    DT_ASSIGN_OR_RETURN(const int size, page_size(req.page_size, 100));
    const uint64_t hash = fnv1a(req.type);
    DT_ASSIGN_OR_RETURN(int64_t after, parse_page_token(req.page_token, hash));
    after = std::max(after, req.min_sequence - 1);
    std::string id;
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        DT_ASSIGN_OR_RETURN(Record * r, impl_->lookup(req.name));
        id = r->stored.id;
    }
    EventsResult out;
    DT_ASSIGN_OR_RETURN(out.events, impl_->store->events(id, after, size + 1, req.type));
    if (static_cast<int>(out.events.size()) > size) {
        out.events.resize(size);
        out.next_page_token = page_token(out.events.back().sequence(), hash);
    }
    return out;
}

absl::StatusOr<std::vector<JobEvent>> JobManager::events_after(const std::string& name,
                                                               int64_t after, int limit) {
    std::string id;
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        DT_ASSIGN_OR_RETURN(Record * r, impl_->lookup(name));
        id = r->stored.id;
    }
    return impl_->store->events(id, after, limit);
}

absl::StatusOr<JobManager::CheckpointsResult> JobManager::list_checkpoints(
    const std::string& name, int requested_size, const std::string& token) {
    DT_ASSIGN_OR_RETURN(const int size, page_size(requested_size, 100));
    const uint64_t hash = fnv1a(name);
    DT_ASSIGN_OR_RETURN(const int64_t after_step, parse_page_token(token, hash));
    std::string id;
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        DT_ASSIGN_OR_RETURN(Record * r, impl_->lookup(name));
        id = r->stored.id;
    }
    DT_ASSIGN_OR_RETURN(std::vector<v1::Checkpoint> all, impl_->store->checkpoints(id));
    // Only what can still be resumed from or exported: keep_last_n prunes older checkpoints
    // (their commits stay in the job's events), and an operator may remove any.
    std::sort(all.begin(), all.end(),
              [](const auto& a, const auto& b) { return a.step() < b.step(); });
    CheckpointsResult out;
    for (v1::Checkpoint& c : all) {
        if (c.step() <= after_step || !impl_->outputs->exists(c.path())) continue;
        if (static_cast<int>(out.checkpoints.size()) == size) {
            out.next_page_token = page_token(out.checkpoints.back().step(), hash);
            break;
        }
        out.checkpoints.push_back(std::move(c));
    }
    return out;
}

absl::StatusOr<JobManager::Cursor> JobManager::cursor(const std::string& name) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    DT_ASSIGN_OR_RETURN(Record * r, impl_->lookup(name));
    return Cursor{r->version, r->stored.last_sequence, is_terminal(r->stored.job.state())};
}

int JobManager::add_listener(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(impl_->listeners_mu);
    impl_->listeners[++impl_->next_listener] = std::move(fn);
    return impl_->next_listener;
}

void JobManager::remove_listener(int id) {
    std::lock_guard<std::mutex> lock(impl_->listeners_mu);
    impl_->listeners.erase(id);
}

v1::RankDirective JobManager::on_rank_report(const v1::RankReport& report) {
    v1::RankDirective directive;
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        directive = impl_->report(report);
    }
    impl_->notify();
    return directive;
}

void JobManager::shutdown(std::chrono::milliseconds grace) {
    impl_->shutdown(grace);
}

}  // namespace deltatune::daemon
