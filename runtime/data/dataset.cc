// Dataset loading: line parsing for both formats, the parallel tokenization pipeline, and the
// cache lookup around it.
#include "runtime/data/dataset.h"

#include <fcntl.h>
#include <sys/file.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/base/path_sandbox.h"
#include "runtime/base/status_macros.h"

namespace deltatune {
namespace {

using nlohmann::json;

constexpr int32_t kIgnore = -100;
constexpr int kDetectLines = 1000;

// A run of consecutive non-blank lines, copied out of the reader so workers can own them.
struct Chunk {
    std::string text;
    struct Line {
        size_t begin = 0;
        size_t size = 0;
        int64_t number = 0;
        bool too_long = false;
    };
    std::vector<Line> lines;
};

struct ChunkResult {
    TokenStore store;
    BadLineCounts counts;
    absl::Status error;  // kFail: the chunk's first bad line
};

std::optional<json> parse_object(std::string_view text, LineError& error) {
    json j;
    if (auto why = parse_json_line(text, j)) {
        error = {"not valid JSON", *why};
        return std::nullopt;
    }
    if (!j.is_object()) {
        error = {"not a JSON object", ""};
        return std::nullopt;
    }
    return j;
}

// Reads a JSON array of 32-bit integers; `what` names the field in the detail.
std::optional<LineError> read_ids(const json& j, const char* what, std::vector<int32_t>& out) {
    const std::string reason = absl::StrCat("bad ", what);
    if (!j.is_array()) return LineError{reason, absl::StrCat("\"", what, "\" is not an array")};
    out.reserve(j.size());
    for (size_t i = 0; i < j.size(); ++i) {
        const json& v = j[i];
        if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN ||
            v.get<int64_t>() > INT32_MAX) {
            return LineError{
                reason, absl::StrCat(what, "[", i, "] = ", v.dump(), " is not a 32-bit integer")};
        }
        out.push_back(v.get<int32_t>());
    }
    return std::nullopt;
}

std::optional<LineError> parse_and_tokenize(std::string_view text, DatasetFormat format,
                                            const DatasetOptions& options, Document& doc) {
    if (format == DatasetFormat::kPretokenized) {
        return parse_pretokenized_line(text, options.vocab_size, doc);
    }
    ChatConversation chat;
    if (auto e = parse_chat_line(text, chat)) return e;
    absl::StatusOr<Document> tokenized = options.chat.tokenize(chat);
    if (!tokenized.ok()) {
        return LineError{"conversation rejected", std::string(tokenized.status().message())};
    }
    doc = *std::move(tokenized);
    return validate_document(doc, options.vocab_size);
}

// One line to one document within the document bounds; never throws (a line the allocator
// cannot take is that line's error, not the process's end).
std::optional<LineError> process_line(std::string_view text, DatasetFormat format,
                                      const DatasetOptions& options, Document& doc) {
    std::optional<LineError> e;
    try {
        e = parse_and_tokenize(text, format, options, doc);
    } catch (const std::bad_alloc&) {
        return LineError{"out of memory",
                         absl::StrCat("a ", text.size(), "-byte line did not fit in memory")};
    }
    if (!e && static_cast<int64_t>(doc.input_ids.size()) > options.max_document_tokens) {
        e = LineError{"document too long",
                      absl::StrCat(doc.input_ids.size(), " tokens, more than max_document_tokens (",
                                   options.max_document_tokens, ")")};
    }
    return e;
}

ChunkResult process_chunk(const Chunk& chunk, const std::string& path, DatasetFormat format,
                          const DatasetOptions& options) {
    ChunkResult r;
    for (const Chunk::Line& line : chunk.lines) {
        Document doc;
        std::optional<LineError> e;
        if (line.too_long) {
            e = LineError{"line too long", absl::StrCat("longer than max_document_bytes (",
                                                        options.max_line_bytes, ")")};
        } else {
            e = process_line(std::string_view(chunk.text).substr(line.begin, line.size), format,
                             options, doc);
        }
        if (e) {
            r.error = report_bad_line(options.bad_lines, path, line.number, *e, r.counts);
            if (!r.error.ok()) return r;
            continue;
        }
        ++r.counts.records;
        r.store.append(doc);
    }
    return r;
}

// Fills a chunk with up to `max_lines` non-blank lines; returns false at end of file.
absl::StatusOr<bool> read_chunk(JsonlReader& reader, int64_t max_lines, Chunk& chunk,
                                int64_t& lines_seen) {
    JsonlReader::Line line;
    // Also bounded by bytes, so a chunk of long lines does not hold max_lines of them.
    constexpr size_t kChunkBytes = 32 << 20;
    while (static_cast<int64_t>(chunk.lines.size()) < max_lines &&
           chunk.text.size() < kChunkBytes) {
        DT_ASSIGN_OR_RETURN(const bool more, reader.next(line));
        if (!more) return false;
        lines_seen = line.number;
        if (!line.too_long && line.text.find_first_not_of(" \t\r") == std::string_view::npos)
            continue;
        chunk.lines.push_back({chunk.text.size(), line.text.size(), line.number, line.too_long});
        chunk.text.append(line.text);
    }
    return true;
}

absl::Status tokenize_file(const std::string& path, DatasetFormat format,
                           const DatasetOptions& options, TokenStore& store,
                           BadLineCounts& counts) {
    DT_ASSIGN_OR_RETURN(JsonlReader reader,
                        JsonlReader::open(path, options.read_buffer_bytes, options.max_line_bytes));
    const int threads = options.num_threads > 0
                            ? options.num_threads
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const size_t chunks_per_round = 2 * static_cast<size_t>(threads);
    const int64_t lines_per_chunk = std::max<int64_t>(1, options.lines_per_chunk);
    for (bool more = true; more;) {
        // A round reads a few chunks per thread, tokenizes them in parallel and appends the
        // results in file order; memory holds one round of text at a time.
        std::vector<Chunk> chunks;
        while (more && chunks.size() < chunks_per_round) {
            Chunk c;
            DT_ASSIGN_OR_RETURN(more, read_chunk(reader, lines_per_chunk, c, counts.lines));
            if (!c.lines.empty()) chunks.push_back(std::move(c));
        }
        std::vector<ChunkResult> results(chunks.size());
        std::atomic<size_t> next{0};
        auto work = [&] {
            for (size_t i; (i = next.fetch_add(1)) < chunks.size();)
                results[i] = process_chunk(chunks[i], path, format, options);
        };
        std::vector<std::thread> pool;
        const size_t workers = std::min(chunks.size(), static_cast<size_t>(threads));
        for (size_t t = 1; t < workers; ++t) pool.emplace_back(work);
        work();
        for (std::thread& t : pool) t.join();
        for (ChunkResult& r : results) {
            DT_RETURN_IF_ERROR(r.error);
            store.append(r.store);
            const int64_t lines = counts.lines;
            counts.add(r.counts);
            counts.lines = lines;  // the reader counts lines; chunks count records and skips
        }
    }
    return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DatasetFormat> parse_dataset_format(std::string_view name) {
    if (name == "auto") return DatasetFormat::kAuto;
    if (name == "chat") return DatasetFormat::kChat;
    if (name == "pretokenized") return DatasetFormat::kPretokenized;
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset format: expected auto, chat or pretokenized, got '", std::string(name), "'"));
}

const char* dataset_format_name(DatasetFormat format) {
    switch (format) {
        case DatasetFormat::kAuto:
            return "auto";
        case DatasetFormat::kChat:
            return "chat";
        case DatasetFormat::kPretokenized:
            return "pretokenized";
    }
    return "?";
}

absl::StatusOr<ChatTemplateKind> parse_chat_template_kind(std::string_view name) {
    if (name == "qwen3") return ChatTemplateKind::kQwen3;
    if (name == "qwen3_5") return ChatTemplateKind::kQwen35;
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: expected qwen3 or qwen3_5, got '", std::string(name), "'"));
}

std::optional<LineError> validate_document(const Document& doc, int64_t vocab_size) {
    if (doc.input_ids.empty()) return LineError{"empty input_ids", ""};
    if (doc.labels.size() != doc.input_ids.size()) {
        return LineError{
            "labels length mismatch",
            absl::StrCat(doc.labels.size(), " labels for ", doc.input_ids.size(), " input_ids")};
    }
    for (size_t i = 0; i < doc.input_ids.size(); ++i) {
        const int32_t id = doc.input_ids[i];
        if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
            return LineError{"bad input_ids", absl::StrCat("input_ids[", i, "] = ", id,
                                                           " is outside [0, ", vocab_size, ")")};
        }
        const int32_t label = doc.labels[i];
        if (label != kIgnore && (label < 0 || (vocab_size > 0 && label >= vocab_size))) {
            return LineError{"bad labels", absl::StrCat("labels[", i, "] = ", label,
                                                        " is neither -100 nor a token id")};
        }
    }
    return std::nullopt;
}

std::optional<LineError> parse_pretokenized_line(std::string_view text, int64_t vocab_size,
                                                 Document& out) {
    LineError error;
    std::optional<json> j = parse_object(text, error);
    if (!j) return error;
    auto ids = j->find("input_ids");
    if (ids == j->end()) return LineError{"missing \"input_ids\"", ""};
    out = Document{};
    if (auto e = read_ids(*ids, "input_ids", out.input_ids)) return e;
    if (auto labels = j->find("labels"); labels != j->end()) {
        if (auto e = read_ids(*labels, "labels", out.labels)) return e;
    } else {
        out.labels = out.input_ids;
    }
    return validate_document(out, vocab_size);
}

absl::StatusOr<DatasetFormat> detect_dataset_format(const std::string& path,
                                                    size_t max_line_bytes) {
    DT_ASSIGN_OR_RETURN(JsonlReader reader,
                        JsonlReader::open(path, JsonlReader::kDefaultBufferBytes, max_line_bytes));
    JsonlReader::Line line;
    for (int n = 0; n < kDetectLines; ++n) {
        DT_ASSIGN_OR_RETURN(const bool more, reader.next(line));
        if (!more) break;
        LineError unused;
        std::optional<json> j = line.too_long ? std::nullopt : parse_object(line.text, unused);
        const DataLineKind kind = j ? classify_data_line(*j) : DataLineKind::kOther;
        if (kind == DataLineKind::kTokenized) return DatasetFormat::kPretokenized;
        if (kind != DataLineKind::kOther) return DatasetFormat::kChat;
    }
    return DatasetFormat::kChat;
}

namespace {

// An exclusive flock on `path` (created), held until the descriptor closes; a holder that dies
// releases it. Blocks while another process or thread holds it.
absl::StatusOr<UniqueFd> lock_file(const std::string& path) {
    DT_ASSIGN_OR_RETURN(UniqueFd fd, process_sandbox().open(path, O_RDWR | O_CREAT | O_CLOEXEC));
    while (::flock(fd.get(), LOCK_EX) != 0) {
        if (errno != EINTR) {
            return absl::InternalError(
                absl::StrCat(path, ": flock failed: ", std::strerror(errno)));
        }
    }
    return fd;
}

}  // namespace

absl::StatusOr<uint64_t> dataset_cache_key(const std::string& path, DatasetFormat format,
                                           const DatasetOptions& options) {
    DT_ASSIGN_OR_RETURN(const uint64_t content, hash_file(path));
    Hash64 h;
    h.update_field("deltatune token cache v1");
    h.update_field(dataset_format_name(format));
    h.update_field(format == DatasetFormat::kChat ? options.chat.fingerprint : "");
    h.update_field(bad_line_policy_name(options.bad_lines));
    h.update_u64(static_cast<uint64_t>(options.vocab_size));
    h.update_u64(static_cast<uint64_t>(options.max_line_bytes));
    h.update_u64(static_cast<uint64_t>(options.max_document_tokens));
    h.update_u64(content);
    return h.digest();
}

std::string dataset_cache_path(const std::string& path, const std::string& cache_dir,
                               uint64_t key) {
    const std::string stem = std::filesystem::path(path).stem().string();
    return (std::filesystem::path(cache_dir) / absl::StrFormat("%s.%016x.dtcache", stem, key))
        .string();
}

absl::StatusOr<TokenizedDataset> load_dataset(const std::string& path,
                                              const DatasetOptions& options) {
    DatasetFormat format = options.format;
    if (format == DatasetFormat::kAuto) {
        DT_ASSIGN_OR_RETURN(format, detect_dataset_format(path, options.max_line_bytes));
    }
    if (format == DatasetFormat::kChat && !options.chat.tokenize) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": chat data needs a tokenizer (--tokenizer)"));
    }
    TokenStore store;
    BadLineCounts counts;
    if (options.cache_dir.empty()) {
        DT_RETURN_IF_ERROR(tokenize_file(path, format, options, store, counts));
        return TokenizedDataset::from_store(std::move(store), std::move(counts));
    }
    DT_ASSIGN_OR_RETURN(const uint64_t key, dataset_cache_key(path, format, options));
    const std::string cache = dataset_cache_path(path, options.cache_dir, key);
    // Any failure to open (missing, torn, checksum mismatch) means rebuild: the cache is only
    // ever a faster way to the same result.
    absl::StatusOr<TokenizedDataset> cached = open_token_cache(cache, key);
    if (cached.ok()) return cached;
    // One builder per cache file: the ranks of a job (and jobs sharing the folder) that miss
    // together queue on the file's lock; the first tokenizes, the others then map its result.
    DT_RETURN_IF_ERROR(process_sandbox().make_dirs(options.cache_dir));
    DT_ASSIGN_OR_RETURN(const UniqueFd lock, lock_file(cache + ".lock"));
    cached = open_token_cache(cache, key);
    if (cached.ok()) return cached;
    DT_RETURN_IF_ERROR(tokenize_file(path, format, options, store, counts));
    DT_RETURN_IF_ERROR(write_token_cache(cache, key, store, counts));
    return open_token_cache(cache, key);
}

}  // namespace deltatune
