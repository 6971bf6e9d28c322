// check_data_file: the file's first bytes name formats deltatune does not read; its first line
// must be what the spec says the file holds.
#include "daemon/config/data_check.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"
#include "runtime/data/chat_json.h"
#include "runtime/data/jsonl_reader.h"

namespace deltatune::daemon {
namespace {

absl::Status invalid(const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat("INVALID_CONFIG: ", msg));
}

// Leading bytes of the formats people export datasets in.
const char* binary_format(std::string_view head) {
    static constexpr std::array<std::pair<std::string_view, const char*>, 6> kMagic = {{
        {"PAR1", "a Parquet file"},
        {"ARROW1", "an Arrow file"},
        {"\x1f\x8b", "gzip-compressed"},
        {"\x28\xb5\x2f\xfd", "zstd-compressed"},
        {"BZh", "bzip2-compressed"},
        {"PK\x03\x04", "a zip archive"},
    }};
    for (const auto& [magic, name] : kMagic) {
        if (head.starts_with(magic)) return name;
    }
    // An Arrow IPC stream starts with a continuation marker.
    if (head.starts_with(std::string_view("\xff\xff\xff\xff", 4))) return "an Arrow stream";
    return nullptr;
}

// The kind a spec's format implies when the first line cannot tell (skipped as bad).
DataKind kind_of_format(const v1::DataSpec& data) {
    return data.format() == v1::DATA_FORMAT_CHAT ? DataKind::kConversation : DataKind::kTokenized;
}

// The keys a first line of each format needs, and a word on the others people bring.
absl::StatusOr<DataKind> check_first_line(const std::string& where, std::string_view text,
                                          const v1::DataSpec& data) {
    const bool skip = data.bad_lines() == v1::BAD_LINE_POLICY_SKIP;
    nlohmann::ordered_json j;  // keys in file order
    if (auto why = parse_json_line(text, j)) {
        if (skip) return kind_of_format(data);
        return invalid(absl::StrCat(where, ": not valid JSON: ", *why));
    }
    if (!j.is_object()) {
        if (skip) return kind_of_format(data);
        return invalid(absl::StrCat(where, ": not a JSON object"));
    }
    const DataLineKind kind = classify_data_line(j);
    const bool chat = std::any_of(kChatLineKeys.begin(), kChatLineKeys.end(),
                                  [&](std::string_view key) { return j.contains(key); });
    const bool tokenized = kind == DataLineKind::kTokenized;
    const v1::DataFormat f = data.format();
    if ((f == v1::DATA_FORMAT_CHAT && chat) || (f == v1::DATA_FORMAT_TOKENIZED && tokenized) ||
        (f == v1::DATA_FORMAT_UNSPECIFIED && (chat || tokenized))) {
        if (f == v1::DATA_FORMAT_TOKENIZED || (f == v1::DATA_FORMAT_UNSPECIFIED && tokenized)) {
            return DataKind::kTokenized;
        }
        if (kind != DataLineKind::kTokenized) return kind;
        // Read as chat (format: chat) though it holds input_ids too: the other keys say which.
        nlohmann::ordered_json rest = j;
        rest.erase("input_ids");
        return classify_data_line(rest);
    }
    std::vector<std::string> keys;
    for (const auto& [key, value] : j.items()) keys.push_back("\"" + key + "\"");
    std::string chat_keys;  // "messages", "conversations", "prompt" or "text"
    for (size_t i = 0; i < kChatLineKeys.size(); ++i) {
        const char* sep = i == 0 ? "" : i + 1 < kChatLineKeys.size() ? ", " : " or ";
        chat_keys += sep + ("\"" + std::string(kChatLineKeys[i]) + "\"");
    }
    const std::string want = f == v1::DATA_FORMAT_CHAT ? absl::StrCat(chat_keys, " (format: chat)")
                             : f == v1::DATA_FORMAT_TOKENIZED
                                 ? std::string("\"input_ids\" (format: tokenized)")
                                 : absl::StrCat(chat_keys,
                                                " (chat) or \"input_ids\" "
                                                "(tokenized)");
    return invalid(absl::StrCat(where, ": the first line has ", absl::StrJoin(keys, ", "),
                                "; expected ", want));
}

}  // namespace

absl::StatusOr<DataKind> check_data_file(const std::string& field, const std::string& path,
                                         const v1::DataSpec& data) {
    const std::string where = absl::StrCat(field, " (", path, ")");
    {
        // Through the sandbox's open: a FIFO swapped in after confine() is refused, never read.
        absl::StatusOr<UniqueFd> fd = process_sandbox().open(path, O_RDONLY);
        if (!fd.ok()) return invalid(absl::StrCat(where, ": ", fd.status().message()));
        std::array<char, 8> head{};
        const ssize_t n = ::pread(fd->get(), head.data(), head.size(), 0);
        const std::string_view got(head.data(), n > 0 ? static_cast<size_t>(n) : 0);
        if (const char* format = binary_format(got)) {
            return invalid(absl::StrCat(
                where, " is ", format,
                "; deltatune reads JSON Lines (one JSON object per line). Convert it on your "
                "side, e.g. `python3 scripts/tools/hf_to_jsonl.py ",
                path, " OUT.jsonl` (needs the `datasets` package)"));
        }
    }
    const size_t max_line = data.max_document_bytes() > 0
                                ? static_cast<size_t>(data.max_document_bytes())
                                : JsonlReader::kDefaultMaxLineBytes;
    absl::StatusOr<JsonlReader> opened =
        JsonlReader::open(path, JsonlReader::kDefaultBufferBytes, max_line);
    // Swapped for a FIFO (or removed) since the check above: the client's file, its error.
    if (!opened.ok()) return invalid(absl::StrCat(where, ": ", opened.status().message()));
    JsonlReader& reader = *opened;
    JsonlReader::Line line;
    // Past the first line's longest allowance in blank lines, the check stops: submission reads
    // a bounded prefix (the ranks read the rest, and say what they skip).
    const size_t scan_limit = max_line + kBlankPrefixBytes;
    size_t scanned = 0;
    while (scanned <= scan_limit) {
        DT_ASSIGN_OR_RETURN(const bool more, reader.next(line));
        if (!more) return invalid(absl::StrCat(where, " holds no JSON line"));
        scanned += line.text.size() + 1;
        if (line.too_long) {
            if (data.bad_lines() == v1::BAD_LINE_POLICY_SKIP) return kind_of_format(data);
            return invalid(absl::StrCat(where, ":", line.number, ": longer than ",
                                        "data.max_document_bytes (", data.max_document_bytes(),
                                        ")"));
        }
        if (line.text.find_first_not_of(" \t") == std::string_view::npos) continue;
        return check_first_line(absl::StrCat(where, ":", line.number), line.text, data);
    }
    return kind_of_format(data);
}

v1::OverlongPolicy default_overlong(const std::vector<DataKind>& train_kinds) {
    const bool conversations = std::find(train_kinds.begin(), train_kinds.end(),
                                         DataKind::kConversation) != train_kinds.end();
    return conversations ? v1::OVERLONG_POLICY_TRUNCATE : v1::OVERLONG_POLICY_SPLIT;
}

absl::StatusOr<v1::OverlongPolicy> default_overlong_of(const v1::DataSpec& data) {
    std::vector<DataKind> kinds;
    for (int i = 0; i < data.train_files_size(); ++i) {
        DT_ASSIGN_OR_RETURN(
            kinds.emplace_back(),
            check_data_file(absl::StrCat("data.train_files[", i, "]"), data.train_files(i), data));
    }
    return default_overlong(kinds);
}

}  // namespace deltatune::daemon
