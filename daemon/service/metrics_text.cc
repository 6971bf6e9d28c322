#include "daemon/service/metrics_text.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace deltatune::daemon {

std::string metric_label(std::string_view v) {
    std::string out;
    for (char c : v) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '"') {
            out += "\\\"";
        } else if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    return out;
}

std::string metric_number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);
    return std::string(buf, r.ptr);
}

namespace {

// /proc/self/stat's fields after the command name (which may hold spaces): fields[0] is the
// state (field 3 of proc(5)), so field n is fields[n - 3].
std::vector<std::string> self_stat_fields() {
    std::ifstream f("/proc/self/stat");
    std::string line;
    std::getline(f, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) return {};
    return absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
}

double boot_time_seconds() {
    std::ifstream f("/proc/stat");
    std::string key;
    double value = 0;
    while (f >> key) {
        if (key == "btime" && (f >> value)) return value;
        f.ignore(1 << 20, '\n');
    }
    return 0;
}

}  // namespace

std::string process_metrics() {
    const std::vector<std::string> s = self_stat_fields();
    if (s.size() < 22) return "";
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    const double cpu = (std::stod(s[14 - 3]) + std::stod(s[15 - 3])) / ticks;
    const double start = boot_time_seconds() + std::stod(s[22 - 3]) / ticks;
    const double vsize = std::stod(s[23 - 3]), rss = std::stod(s[24 - 3]) * page;
    std::error_code ec;
    int64_t fds = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
        ++fds;
    }
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    std::string out;
    auto gauge = [&](const char* name, const char* type, const char* help, double v) {
        absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name,
                        " ", metric_number(v), "\n");
    };
    gauge("process_cpu_seconds_total", "counter", "User and system CPU time spent in seconds.",
          cpu);
    gauge("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss);
    gauge("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vsize);
    gauge("process_start_time_seconds", "gauge",
          "Start time of the process since unix epoch in seconds.", start);
    gauge("process_open_fds", "gauge", "Number of open file descriptors.",
          static_cast<double>(fds));
    gauge("process_max_fds", "gauge", "Maximum number of open file descriptors.",
          static_cast<double>(lim.rlim_cur));
    return out;
}

}  // namespace deltatune::daemon
