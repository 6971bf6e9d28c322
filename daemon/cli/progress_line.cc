#include "daemon/cli/progress_line.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/cli/job_client.h"

namespace deltatune::cli {
namespace {

double metric(const v1::Job& job, const char* key) {
    auto it = job.latest_metrics().find(key);
    return it == job.latest_metrics().end() ? NAN : it->second;
}

// 18729.4 -> "18,729".
std::string thousands(double v) {
    const std::string digits = absl::StrCat(static_cast<int64_t>(std::llround(v)));
    std::string out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

// 117885000 -> "112.4 MiB".
std::string human_bytes(double v) {
    static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int unit = 0;
    while (std::fabs(v) >= 1024 && unit < 4) v /= 1024, ++unit;
    return unit == 0 ? absl::StrCat(static_cast<int64_t>(v), " B")
                     : absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

std::string event_value(const std::string& key, double v) {
    if (key == "bytes" || absl::EndsWith(key, "_bytes")) return human_bytes(v);
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
        return absl::StrCat(static_cast<int64_t>(v));
    }
    return absl::StrFormat("%.6g", v);
}

}  // namespace

void TokenRate::add(double now, int64_t tokens) {
    if (!samples_.empty() && tokens < samples_.back().second) samples_.clear();  // a new attempt
    samples_.emplace_back(now, tokens);
    while (samples_.size() > 2 && samples_.front().first < now - window_) samples_.pop_front();
}

double TokenRate::per_second() const {
    if (samples_.size() < 2) return 0;
    const double dt = samples_.back().first - samples_.front().first;
    return dt > 0 ? static_cast<double>(samples_.back().second - samples_.front().second) / dt : 0;
}

std::string format_duration(int64_t s) {
    s = std::max<int64_t>(0, s);
    return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
}

std::string progress_line(const v1::Job& job, double tokens_per_second, int64_t now, int width) {
    const auto& p = job.progress();
    const int64_t start = job.start_time().seconds();
    const std::string elapsed = start > 0 ? "elapsed " + format_duration(now - start) : "";
    std::string line;
    if (p.step() == 0) {
        line = absl::StrCat(state_name(job.state()), elapsed.empty() ? "" : "  ", elapsed);
    } else {
        const int bar = 20;
        const int64_t total = std::max<int64_t>(p.total_steps(), 1);
        const int filled = static_cast<int>(bar * std::min(p.step(), total) / total);
        line = absl::StrFormat("[%s%s] %3d%%  step %d/%d", std::string(filled, '#'),
                               std::string(bar - filled, '.'),
                               static_cast<int>(100 * p.step() / total), p.step(), total);
        const double loss = metric(job, "loss"), eval = metric(job, "eval_loss");
        const double lr = metric(job, "lr");
        // Most wanted first: a narrow terminal cuts from the right.
        if (!std::isnan(loss)) absl::StrAppendFormat(&line, "  loss %.4f", loss);
        const int64_t end = p.estimated_end_time().seconds();
        if (end > 0 && job.state() == v1::Job::RUNNING) {
            absl::StrAppend(&line, "  ETA ", format_duration(end - now));
        }
        if (tokens_per_second > 0)
            absl::StrAppend(&line, "  ", thousands(tokens_per_second), " tok/s");
        if (!std::isnan(eval)) absl::StrAppendFormat(&line, "  eval %.4f", eval);
        if (!std::isnan(lr)) absl::StrAppendFormat(&line, "  lr %.2g", lr);
        if (!elapsed.empty()) absl::StrAppend(&line, "  ", elapsed);
        absl::StrAppend(&line, "  ", state_name(job.state()));
    }
    if (width > 0 && static_cast<int>(line.size()) > width) line.resize(width);
    return line;
}

std::string reason_and_message(const v1::Job& job, const std::string& lead) {
    const std::string& reason = job.state_reason();
    const std::string& message = job.error_message();
    // Most messages start with their reason ("NO_TRAINED_TOKENS: ..."): say it once.
    if (!reason.empty() && !absl::StartsWith(message, absl::StrCat(reason, ":"))) {
        return message.empty() ? absl::StrCat(lead, reason)
                               : absl::StrCat(lead, reason, ": ", message);
    }
    return message.empty() ? "" : absl::StrCat(lead, message);
}

std::string job_summary(const v1::Job& job) {
    std::string out = state_name(job.state());
    if (job.start_time().seconds() > 0 && job.end_time().seconds() > 0) {
        absl::StrAppend(&out, " in ",
                        format_duration(job.end_time().seconds() - job.start_time().seconds()));
    }
    if (job.state() != v1::Job::SUCCEEDED) {
        absl::StrAppend(&out, reason_and_message(job, ": "));
        return out;
    }
    const double loss = metric(job, "loss"), eval = metric(job, "eval_loss");
    const char* sep = ": ";
    if (!std::isnan(loss)) absl::StrAppendFormat(&out, "%sloss %.4f", sep, loss), sep = ", ";
    if (!std::isnan(eval)) absl::StrAppendFormat(&out, "%seval loss %.4f", sep, eval), sep = ", ";
    if (job.best_step() > 0) {
        absl::StrAppend(&out, sep, "best eval loss ",
                        absl::StrFormat("%.4f", metric(job, "best_eval_loss")), " at step ",
                        job.best_step());
        sep = ", ";
    }
    if (!job.result_model().empty()) absl::StrAppend(&out, sep, "exported to ", job.result_model());
    return out;
}

std::string event_line(const v1::JobEvent& e) {
    std::string line = absl::StrFormat("%6lld %-22s %s", static_cast<long long>(e.sequence()),
                                       e.type(), e.message());
    // Sorted: the wire's maps have no order, and a log should read the same every time.
    for (const auto& [k, v] :
         std::map<std::string, double>(e.metrics().begin(), e.metrics().end())) {
        absl::StrAppend(&line, " ", k, "=", event_value(k, v));
    }
    for (const auto& [k, v] :
         std::map<std::string, std::string>(e.details().begin(), e.details().end())) {
        absl::StrAppend(&line, " ", k, "=", v);
    }
    absl::StripTrailingAsciiWhitespace(&line);
    return line;
}

std::string data_line(const v1::Job& job) {
    const v1::DataSummary& d = job.data_summary();
    if (d.documents() == 0) return "";
    std::string out = absl::StrCat("data: ", thousands(double(d.documents())), " documents");
    if (d.skipped_lines() > 0) {
        absl::StrAppend(&out, " (", thousands(double(d.skipped_lines())), " bad lines skipped)");
    }
    if (d.steps_per_epoch() > 0) {
        absl::StrAppend(&out, ", ", thousands(double(d.tokens_per_epoch())), " tokens and ",
                        thousands(double(d.steps_per_epoch())), " steps per epoch");
    }
    if (d.overlong_documents() > 0) {
        static const char* kDone[] = {"split", "split", "truncated", "dropped"};
        const int policy = std::clamp(static_cast<int>(d.overlong()), 0, 3);
        absl::StrAppend(&out, "; ", thousands(double(d.overlong_documents())),
                        " longer than tokens_per_batch ", kDone[policy]);
        if (d.overlong_tokens_left_out() > 0) {
            absl::StrAppend(&out, " (", thousands(double(d.overlong_tokens_left_out())),
                            " tokens left out)");
        }
    }
    return out;
}

}  // namespace deltatune::cli
