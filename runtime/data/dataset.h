// Datasets: a JSONL file of chat conversations ({"messages": [...], "tools": [...]}, read as
// chat_json.h says: tool calls, content parts, per-turn weights, reasoning_content) or of
// pre-tokenized documents ({"input_ids": [...], "labels": [...]}, labels default to input_ids),
// tokenized on every core in chunks of lines (results kept in input order) into a
// TokenizedDataset, and cached on disk keyed by (tokenizer fingerprint, template kind, the data
// file's content hash, format, vocabulary size, bad-line policy), so a second run maps the cache
// instead of tokenizing again. A corrupt cache is rebuilt, never trusted.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/chat_json.h"
#include "runtime/data/chat_template.h"
#include "runtime/data/jsonl_reader.h"
#include "runtime/data/token_cache.h"

namespace deltatune {

enum class DatasetFormat { kAuto, kChat, kPretokenized };

// What one JSONL line holds, told by its keys: the one rule for a file's format, whether the
// reader detects it (format auto) or a job's data files are looked at on submission.
enum class DataLineKind {
    kOther,         // none of the keys below
    kTokenized,     // {"input_ids": ...} (whatever else it has)
    kConversation,  // {"messages"}, {"conversations"} or {"prompt", "completion"}
    kText,          // {"text": ...}
};
// `line`: a parsed JSON object (any type with contains(key), e.g. nlohmann::json).
template <typename JsonObject>
DataLineKind classify_data_line(const JsonObject& line) {
    if (line.contains("input_ids")) return DataLineKind::kTokenized;
    if (line.contains("messages") || line.contains("conversations") || line.contains("prompt")) {
        return DataLineKind::kConversation;
    }
    return line.contains("text") ? DataLineKind::kText : DataLineKind::kOther;
}
// "auto", "chat" or "pretokenized".
absl::StatusOr<DatasetFormat> parse_dataset_format(std::string_view name);
const char* dataset_format_name(DatasetFormat format);

// Turns one conversation into a Document. Called from many threads at once, so it must be
// thread-safe (a loaded Tokenizer is).
using ChatTokenizeFn = std::function<absl::StatusOr<Document>(const ChatConversation&)>;

struct ChatTokenizer {
    ChatTokenizeFn tokenize;
    // Identifies everything that changes the output (tokenizer content and template kind): part
    // of the cache key. Tests inject their own function and fingerprint.
    std::string fingerprint;
};

// The real thing: tokenize_chat(tokenizer, messages, kind). Defined in its own file so programs
// that only read pre-tokenized data do not link the tokenizer. `tokenizer` must outlive the result.
ChatTokenizer make_chat_tokenizer(const Tokenizer& tokenizer, ChatTemplateKind kind);
absl::StatusOr<ChatTemplateKind> parse_chat_template_kind(std::string_view name);  // qwen3|qwen3_5

struct DatasetOptions {
    DatasetFormat format = DatasetFormat::kAuto;
    BadLinePolicy bad_lines = BadLinePolicy::kFail;
    int64_t vocab_size = 0;  // > 0: every id and label is checked against it (a bad line if not)
    ChatTokenizer chat;      // required for chat data
    int num_threads = 0;     // 0 = std::thread::hardware_concurrency()
    int64_t lines_per_chunk = 256;
    std::string cache_dir;  // empty: no on-disk cache
    // Bytes of JSONL text buffered while reading; memory stays bounded by this, the chunks in
    // flight and the longest line, whatever the file size.
    size_t read_buffer_bytes = JsonlReader::kDefaultBufferBytes;
    // One document's bounds: a longer line, or a document of more tokens, is a bad line (refused
    // or, under bad_lines: skip, counted). Tokenizing holds a few times a line's bytes, so this
    // bounds memory per document; a line the allocator still cannot take is a bad line too.
    size_t max_line_bytes = kDefaultMaxDocumentBytes;
    int64_t max_document_tokens = kDefaultMaxDocumentTokens;

    static constexpr size_t kDefaultMaxDocumentBytes = 16 << 20;
    static constexpr int64_t kDefaultMaxDocumentTokens = 1 << 20;
};

// Loads `path`: from the cache when it holds this key, else by tokenizing (and then writing the
// cache when cache_dir is set). Under kFail the first bad line (in file order) is InvalidArgument
// "FILE:LINE: reason: detail"; under kSkipAndCount the result's counts() say what was dropped.
absl::StatusOr<TokenizedDataset> load_dataset(const std::string& path,
                                              const DatasetOptions& options);

// Detects the format from the first line that is an object with "messages" or "input_ids"
// (kChat when none is found within the first 1000 lines, so errors speak of "messages"). A line
// longer than `max_line_bytes` (the job's document bound) is passed over unread, never buffered.
absl::StatusOr<DatasetFormat> detect_dataset_format(
    const std::string& path, size_t max_line_bytes = DatasetOptions::kDefaultMaxDocumentBytes);

// The cache key and file the options map `path` to (the key streams a hash over the file).
absl::StatusOr<uint64_t> dataset_cache_key(const std::string& path, DatasetFormat format,
                                           const DatasetOptions& options);
std::string dataset_cache_path(const std::string& path, const std::string& cache_dir, uint64_t key);

// One line of each format (chat lines: chat_json.h); nullopt when the line is good. Exposed for
// tests and tools.
std::optional<LineError> parse_pretokenized_line(std::string_view text, int64_t vocab_size,
                                                 Document& out);
// Ids in [0, vocab_size), labels -100 or in range, lengths equal, not empty.
std::optional<LineError> validate_document(const Document& doc, int64_t vocab_size);

}  // namespace deltatune
