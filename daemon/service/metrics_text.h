// Pieces of the Prometheus text exposition format shared by the daemon's metric families.
#pragma once

#include <string>
#include <string_view>

namespace deltatune::daemon {

// A label value escaped (backslash, quote, newline).
std::string metric_label(std::string_view v);
// The shortest text that reads back as v, as Prometheus's own clients print (0.1, not
// 0.10000000000000001); NaN, +Inf, -Inf spelled as the format wants.
std::string metric_number(double v);

// The process_* family Prometheus client libraries export (Linux /proc): CPU seconds, resident
// and virtual memory, start time, open and maximum file descriptors.
std::string process_metrics();

}  // namespace deltatune::daemon
