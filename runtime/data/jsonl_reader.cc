// Streaming line reader with a fixed buffer, and the bad-line policy.
#include "runtime/data/jsonl_reader.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/base/path_sandbox.h"
#include "runtime/data/tokenizer.h"

namespace deltatune {

absl::StatusOr<BadLinePolicy> parse_bad_line_policy(std::string_view name) {
    if (name == "fail") return BadLinePolicy::kFail;
    if (name == "skip") return BadLinePolicy::kSkipAndCount;
    return absl::InvalidArgumentError(
        absl::StrCat("bad-line policy: expected fail or skip, got '", std::string(name), "'"));
}

const char* bad_line_policy_name(BadLinePolicy policy) {
    return policy == BadLinePolicy::kFail ? "fail" : "skip";
}

std::optional<std::string> json_line_nul(std::string_view text) {
    const size_t at = text.find('\0');
    if (at == std::string_view::npos) return std::nullopt;
    return absl::StrCat("NUL byte at column ", at + 1);
}

// Error text travels in protobuf strings, which must be UTF-8: a byte that is not becomes \xNN.
static std::string printable(const std::string& s) {
    std::string out;
    size_t pos = 0;
    while (auto bad = first_invalid_utf8(std::string_view(s).substr(pos))) {
        out.append(s, pos, *bad);
        absl::StrAppendFormat(&out, "\\x%02X", static_cast<unsigned char>(s[pos + *bad]));
        pos += *bad + 1;
    }
    return out.append(s, pos);
}

std::optional<std::string> json_line_error(std::string_view text) {
    if (auto nul = json_line_nul(text)) return nul;
    try {
        const nlohmann::json parsed = nlohmann::json::parse(text);
        (void)parsed;
    } catch (const nlohmann::json::exception& e) {
        // Without the "[json.exception.parse_error.101] " tag.
        const std::string what = e.what();
        const size_t tag = what.find("] ");
        return printable(tag == std::string::npos ? what : what.substr(tag + 2));
    }
    return std::nullopt;
}

void BadLineCounts::add(const BadLineCounts& other) {
    lines += other.lines;
    records += other.records;
    skipped += other.skipped;
    for (const auto& [reason, n] : other.by_reason) by_reason[reason] += n;
}

absl::Status report_bad_line(BadLinePolicy policy, const std::string& file, int64_t line,
                             const LineError& error, BadLineCounts& counts) {
    if (policy == BadLinePolicy::kFail) {
        return absl::InvalidArgumentError(absl::StrCat(
            file, ":", line, ": ", error.reason, error.detail.empty() ? "" : ": ", error.detail));
    }
    ++counts.skipped;
    ++counts.by_reason[error.reason];
    return absl::OkStatus();
}

absl::StatusOr<JsonlReader> JsonlReader::open(const std::string& path, size_t buffer_bytes,
                                              size_t max_line_bytes) {
    JsonlReader r;
    r.path_ = path;
    absl::StatusOr<UniqueFd> fd = process_sandbox().open(path, O_RDONLY);
    if (!fd.ok()) return fd.status();
    r.file_.reset(::fdopen(fd->get(), "rb"));
    if (!r.file_) return errno_status(path, "cannot open", errno);
    fd->release();  // the FILE owns it now
    // stdio's own buffer would double the memory we account for; we buffer ourselves.
    std::setvbuf(r.file_.get(), nullptr, _IONBF, 0);
    r.buffer_.resize(std::max<size_t>(buffer_bytes, 16));
    r.max_line_bytes_ = max_line_bytes;
    r.peak_bytes_ = r.buffer_.size();
    return r;
}

absl::Status JsonlReader::refill() {
    pos_ = 0;
    end_ = std::fread(buffer_.data(), 1, buffer_.size(), file_.get());
    if (end_ < buffer_.size()) {
        if (std::ferror(file_.get()))
            return absl::DataLossError(absl::StrCat(path_, ": read error"));
        eof_ = true;
    }
    return absl::OkStatus();
}

absl::StatusOr<bool> JsonlReader::next(Line& line) {
    line_.clear();
    line_too_long_ = false;
    bool started = false;  // any byte of this line seen (distinguishes "" at EOF from no line)
    // Appends a piece of the current line unless the line already overflowed the limit.
    auto append = [&](const char* p, size_t n) {
        if (line_too_long_) return;
        if (line_.size() + n > max_line_bytes_) {
            line_too_long_ = true;
            line_.clear();
            return;
        }
        line_.append(p, n);
        peak_bytes_ = std::max(peak_bytes_, buffer_.size() + line_.capacity());
    };
    for (;;) {
        if (pos_ == end_) {
            if (!eof_) {
                if (absl::Status s = refill(); !s.ok()) return s;
            }
            if (pos_ == end_) {
                if (!started) return false;
                break;  // the last line has no trailing newline
            }
        }
        started = true;
        const char* begin = buffer_.data() + pos_;
        const char* nl = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
        if (!nl) {
            append(begin, end_ - pos_);
            pos_ = end_;
            continue;
        }
        const size_t n = static_cast<size_t>(nl - begin);
        pos_ += n + 1;
        if (line_.empty() && !line_too_long_) {
            // The common case: the whole line is inside the buffer, so no copy is made.
            line.text = n > max_line_bytes_ ? std::string_view() : std::string_view(begin, n);
            line_too_long_ = n > max_line_bytes_;
        } else {
            append(begin, n);
            line.text = line_;
        }
        ++line_number_;
        line.number = line_number_;
        line.too_long = line_too_long_;
        if (!line.text.empty() && line.text.back() == '\r') line.text.remove_suffix(1);
        return true;
    }
    ++line_number_;
    line.number = line_number_;
    line.too_long = line_too_long_;
    line.text = line_too_long_ ? std::string_view() : std::string_view(line_);
    if (!line.text.empty() && line.text.back() == '\r') line.text.remove_suffix(1);
    return true;
}

}  // namespace deltatune
