// The live progress line `deltatune watch` (and submit --watch) draws on a terminal, and the
// one-line summary it prints when the job ends. Pure functions of the job and the time, so they
// are tested without a terminal.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>

#include "deltatune/v1/job.pb.h"

namespace deltatune::cli {

// Tokens per second over the updates of the last `window_seconds`, as the client saw them (the
// server's figure averages over the whole attempt).
class TokenRate {
  public:
    explicit TokenRate(double window_seconds = 60) : window_(window_seconds) {}
    void add(double now_seconds, int64_t tokens);
    double per_second() const;  // 0 until two updates are in the window

  private:
    double window_;
    std::deque<std::pair<double, int64_t>> samples_;
};

// "[#####.....]  42%  step 420/1000  loss 2.5710  ETA 1:54:37  18,729 tok/s  eval 2.6012
//  lr 3.2e-05  elapsed 0:12:03  RUNNING", cut to `width` columns (the most wanted figures
// first); before the first step only the state and the elapsed time.
std::string progress_line(const v1::Job& job, double tokens_per_second, int64_t now_seconds,
                          int width);

// The job's failure reason and message (" REASON: message"), the reason said once when the
// message starts with it; "" when there is neither. `lead` goes first.
std::string reason_and_message(const v1::Job& job, const std::string& lead);
// "SUCCEEDED in 0:28:43: loss 2.5710, eval loss 2.6012, exported to /outputs/run/export" (or the
// failure's reason and message; with early stopping, the best step the export holds).
std::string job_summary(const v1::Job& job);

// "data: 400 documents, 38,203 tokens and 200 steps per epoch; 3 documents longer than
// tokens_per_batch truncated (1,234 tokens left out)"; "" until the ranks have loaded the data.
std::string data_line(const v1::Job& job);

// "    42 CHECKPOINT_COMMITTED   /out/step-42 bytes=112.4 MiB seconds=1.23 step=42 path=..."
// (`events`): metrics then details, each by key, whole numbers whole and byte counts in units.
std::string event_line(const v1::JobEvent& e);

// H:MM:SS.
std::string format_duration(int64_t seconds);

}  // namespace deltatune::cli
