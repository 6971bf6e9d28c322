// Hashing (libxxhash), flat token storage, and the memory-mapped token cache file.
#include "runtime/data/token_cache.h"

#include <fcntl.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/base/path_sandbox.h"

namespace deltatune {
namespace {

constexpr char kMagic[8] = {'D', 'T', 'T', 'O', 'K', 'C', 'v', '1'};
constexpr uint32_t kVersion = 1;

struct Header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t documents;
    uint64_t tokens;
    uint64_t key;
    uint64_t stats_bytes;
    uint64_t reserved;
    uint64_t checksum;
};
static_assert(sizeof(Header) == 64, "the cache header is 64 bytes on disk");

size_t pad8(size_t n) {
    return (n + 7) & ~size_t{7};
}

// Everything but the checksum field itself, then the payload.
uint64_t checksum_of(Header h, const void* payload, size_t payload_bytes) {
    h.checksum = 0;
    return Hash64().update(&h, sizeof h).update(payload, payload_bytes).digest();
}

nlohmann::json counts_to_json(const BadLineCounts& c) {
    return {{"lines", c.lines},
            {"records", c.records},
            {"skipped", c.skipped},
            {"by_reason", c.by_reason}};
}

absl::Status corrupt(const std::string& path, const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt token cache: ", why));
}

}  // namespace

void Hash64::FreeState::operator()(XXH64_state_s* state) const {
    XXH64_freeState(state);
}

Hash64::Hash64() : state_(XXH64_createState()) {
    if (!state_) throw std::bad_alloc();
    XXH64_reset(state_.get(), /*seed=*/0);
}

Hash64& Hash64::update(const void* data, size_t size) {
    XXH64_update(state_.get(), data, size);
    return *this;
}

Hash64& Hash64::update_field(std::string_view s) {
    return update_u64(s.size()).update(s);
}

uint64_t Hash64::digest() const {
    return XXH64_digest(state_.get());
}

absl::StatusOr<uint64_t> hash_file(const std::string& path) {
    absl::StatusOr<UniqueFd> fd = process_sandbox().open(path, O_RDONLY);
    if (!fd.ok()) return fd.status();
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(::fdopen(fd->get(), "rb"), std::fclose);
    if (!f) return errno_status(path, "cannot open", errno);
    fd->release();  // the FILE owns it now
    std::vector<char> buf(1 << 20);
    Hash64 h;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) h.update(buf.data(), n);
    if (std::ferror(f.get())) return absl::DataLossError(absl::StrCat(path, ": read error"));
    return h.digest();
}

void TokenStore::append(const Document& doc) {
    ids.insert(ids.end(), doc.input_ids.begin(), doc.input_ids.end());
    labels.insert(labels.end(), doc.labels.begin(), doc.labels.end());
    offsets.push_back(static_cast<int64_t>(ids.size()));
}

void TokenStore::append(const TokenStore& other) {
    const int64_t base = static_cast<int64_t>(ids.size());
    ids.insert(ids.end(), other.ids.begin(), other.ids.end());
    labels.insert(labels.end(), other.labels.begin(), other.labels.end());
    for (size_t i = 1; i < other.offsets.size(); ++i) offsets.push_back(base + other.offsets[i]);
}

TokenizedDataset TokenizedDataset::from_store(TokenStore store, BadLineCounts counts) {
    auto owned = std::make_shared<const TokenStore>(std::move(store));
    TokenizedDataset d;
    d.offsets_ = owned->offsets.data();
    d.ids_ = owned->ids.data();
    d.labels_ = owned->labels.data();
    d.documents_ = owned->documents();
    d.owner_ = std::move(owned);
    d.counts_ = std::move(counts);
    return d;
}

std::vector<int64_t> TokenizedDataset::lengths() const {
    std::vector<int64_t> out(static_cast<size_t>(documents_));
    for (int64_t i = 0; i < documents_; ++i) out[static_cast<size_t>(i)] = length(i);
    return out;
}

Document TokenizedDataset::document(int64_t doc, int64_t begin, int64_t end) const {
    const int32_t* ids = ids_ + offsets_[doc];
    const int32_t* labels = labels_ + offsets_[doc];
    return Document{std::vector<int32_t>(ids + begin, ids + end),
                    std::vector<int32_t>(labels + begin, labels + end)};
}

absl::Status write_token_cache(const std::string& path, uint64_t key, const TokenStore& store,
                               const BadLineCounts& counts) {
    std::string stats = counts_to_json(counts).dump();
    stats.resize(pad8(stats.size()), ' ');  // JSON tolerates trailing spaces
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.version = kVersion;
    h.header_bytes = sizeof(Header);
    h.documents = static_cast<uint64_t>(store.documents());
    h.tokens = store.ids.size();
    h.key = key;
    h.stats_bytes = stats.size();
    const std::pair<const void*, size_t> payload[] = {
        {stats.data(), stats.size()},
        {store.offsets.data(), store.offsets.size() * sizeof(int64_t)},
        {store.ids.data(), store.ids.size() * sizeof(int32_t)},
        {store.labels.data(), store.labels.size() * sizeof(int32_t)}};
    Hash64 sum;
    Header zeroed = h;
    zeroed.checksum = 0;
    sum.update(&zeroed, sizeof zeroed);
    for (const auto& [p, n] : payload) sum.update(p, n);
    h.checksum = sum.digest();
    std::vector<std::pair<const void*, size_t>> chunks{{&h, sizeof h}};
    chunks.insert(chunks.end(), std::begin(payload), std::end(payload));
    return write_file_atomic(path, chunks);
}

absl::StatusOr<TokenizedDataset> open_token_cache(const std::string& path, uint64_t key) {
    absl::StatusOr<MappedFile> file = map_file(path);
    if (!file.ok()) return file.status();
    if (file->size < sizeof(Header)) {
        return corrupt(path, absl::StrCat("only ", file->size, " bytes"));
    }
    const auto* bytes = file->data;
    Header h;
    std::memcpy(&h, bytes, sizeof h);
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return corrupt(path, "bad magic");
    if (h.version != kVersion || h.header_bytes != sizeof(Header)) {
        return corrupt(path, absl::StrCat("version ", h.version, ", expected ", kVersion));
    }
    if (h.key != key) {
        return absl::FailedPreconditionError(absl::StrCat(path, ": cache for another key"));
    }
    // Sizes are checked against the file before any multiplication can overflow.
    const size_t payload = file->size - sizeof(Header);
    if (h.documents > payload / 8 || h.tokens > payload / 8 || h.stats_bytes > payload ||
        h.stats_bytes % 8 != 0 || h.stats_bytes + (h.documents + 1) * 8 + h.tokens * 8 != payload) {
        return corrupt(path, absl::StrCat(file->size, " bytes do not match ", h.documents,
                                          " documents and ", h.tokens, " tokens (truncated?)"));
    }
    if (checksum_of(h, bytes + sizeof(Header), payload) != h.checksum) {
        return corrupt(path, "checksum mismatch");
    }
    const auto* offsets = reinterpret_cast<const int64_t*>(bytes + sizeof(Header) + h.stats_bytes);
    const auto* ids = reinterpret_cast<const int32_t*>(offsets + h.documents + 1);
    // A valid checksum over invalid offsets would mean a writer bug; still never index past them.
    if (offsets[0] != 0 || static_cast<uint64_t>(offsets[h.documents]) != h.tokens) {
        return corrupt(path, "offsets do not span the tokens");
    }
    for (uint64_t i = 0; i < h.documents; ++i) {
        if (offsets[i + 1] < offsets[i]) return corrupt(path, "offsets decrease");
    }
    TokenizedDataset d;
    try {
        const auto j =
            nlohmann::json::parse(bytes + sizeof(Header), bytes + sizeof(Header) + h.stats_bytes);
        d.counts_.lines = j.at("lines").get<int64_t>();
        d.counts_.records = j.at("records").get<int64_t>();
        d.counts_.skipped = j.at("skipped").get<int64_t>();
        d.counts_.by_reason = j.at("by_reason").get<std::map<std::string, int64_t>>();
    } catch (const nlohmann::json::exception& e) {
        return corrupt(path, absl::StrCat("stats: ", e.what()));
    }
    d.offsets_ = offsets;
    d.ids_ = ids;
    d.labels_ = ids + h.tokens;
    d.documents_ = static_cast<int64_t>(h.documents);
    d.owner_ = std::move(file->keep);
    d.cache_path_ = path;
    return d;
}

}  // namespace deltatune
