// Streaming JSONL: reads files far larger than memory one line at a time through a fixed-size
// buffer, so memory is bounded by the buffer plus the longest accepted line (never the file).
// Malformed lines are reported as "FILE:LINE: reason" (1-based line numbers); a BadLinePolicy
// decides whether the first one fails the read or every one is skipped and counted by reason.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace deltatune {

enum class BadLinePolicy {
    kFail,          // the first malformed line is InvalidArgument "FILE:LINE: reason"
    kSkipAndCount,  // malformed lines are dropped and counted per reason
};

// "fail" or "skip" (the job-file spelling) to the enum, and back.
absl::StatusOr<BadLinePolicy> parse_bad_line_policy(std::string_view name);
const char* bad_line_policy_name(BadLinePolicy policy);

// Why one line was rejected. `reason` is a short fixed category ("not valid JSON", "labels length
// mismatch", ...) used as the counting key; `detail` adds the specifics of this line.
struct LineError {
    std::string reason;
    std::string detail;
};

// What a pass over a file saw. Blank lines are neither records nor errors (JSONL writers often end
// with an empty line).
struct BadLineCounts {
    int64_t lines = 0;    // physical lines read, blank ones included
    int64_t records = 0;  // lines accepted
    int64_t skipped = 0;  // lines rejected under kSkipAndCount
    std::map<std::string, int64_t> by_reason;

    void add(const BadLineCounts& other);
};

// Why a line is not one JSON value, with where: "NUL byte at column 9" (JSON allows none, and
// the parser would stop at it, reading the text before it as the whole line) or the parser's
// own message ("parse error at line 1, column 9: syntax error while parsing value - ...",
// "invalid string: ill-formed UTF-8 byte", columns in bytes). nullopt when it parses.
std::optional<std::string> json_line_error(std::string_view text);
// The NUL check alone (cheap: run it before a parse that would otherwise end at the byte).
std::optional<std::string> json_line_nul(std::string_view text);

// Parses a line into `out` (any nlohmann::basic_json; the caller includes nlohmann/json.hpp):
// nullopt, or why it is not JSON as json_line_error says. The one parse of the good path; the
// error's description parses again, on the failure path only.
template <typename Json>
std::optional<std::string> parse_json_line(std::string_view text, Json& out) {
    if (auto nul = json_line_nul(text)) return nul;
    out = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (out.is_discarded()) return json_line_error(text).value_or("");
    return std::nullopt;
}

// Applies the policy to one rejected line: under kFail returns InvalidArgument
// "FILE:LINE: reason: detail"; under kSkipAndCount counts it and returns OK.
absl::Status report_bad_line(BadLinePolicy policy, const std::string& file, int64_t line,
                             const LineError& error, BadLineCounts& counts);

// Reads lines of a file without ever holding more than `buffer_bytes + max_line_bytes`. A line
// longer than max_line_bytes is consumed without being stored and returned as too long, so a
// corrupt multi-gigabyte "line" cannot exhaust memory. Not thread-safe; move-only.
class JsonlReader {
  public:
    static constexpr size_t kDefaultBufferBytes = 1 << 20;
    static constexpr size_t kDefaultMaxLineBytes = 256 << 20;

    // NotFound / PermissionDenied name the file.
    static absl::StatusOr<JsonlReader> open(const std::string& path,
                                            size_t buffer_bytes = kDefaultBufferBytes,
                                            size_t max_line_bytes = kDefaultMaxLineBytes);

    struct Line {
        std::string_view text;  // without the newline (and a trailing '\r'); valid until next()
        int64_t number = 0;     // 1-based
        bool too_long = false;  // text is empty and the line exceeded max_line_bytes
    };
    // Fills `line` and returns true, or returns false at end of file. I/O errors are DataLoss.
    absl::StatusOr<bool> next(Line& line);

    const std::string& path() const { return path_; }
    // The most bytes the reader held at once (buffer plus line assembly): the memory bound tests.
    size_t peak_bytes() const { return peak_bytes_; }

  private:
    struct FileCloser {
        void operator()(std::FILE* f) const {
            if (f) std::fclose(f);
        }
    };
    JsonlReader() = default;
    absl::Status refill();

    std::string path_;
    std::unique_ptr<std::FILE, FileCloser> file_;
    std::string buffer_;  // fixed capacity, [pos_, end_) unread
    size_t pos_ = 0;
    size_t end_ = 0;
    bool eof_ = false;
    std::string line_;  // assembly for lines that cross a buffer boundary
    bool line_too_long_ = false;
    size_t max_line_bytes_ = kDefaultMaxLineBytes;
    int64_t line_number_ = 0;
    size_t peak_bytes_ = 0;
};

}  // namespace deltatune
