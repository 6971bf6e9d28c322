// Tokenized documents as flat arrays (per-document offsets into int32 ids and labels), held in
// memory or memory-mapped from a token cache file, and that file's format:
//
//   header (64 bytes, little-endian): magic "DTTOKCv1", u32 version, u32 header bytes,
//     u64 documents, u64 tokens, u64 key, u64 stats bytes, u64 reserved, u64 checksum
//   stats JSON (the bad-line counts of the build), zero-padded to 8 bytes
//   i64 offsets[documents + 1], i32 ids[tokens], i32 labels[tokens]
//
// The checksum is a 64-bit hash of every byte after the header plus the header's other fields, so
// a truncated, torn or bit-flipped file is DataLoss, never trusted. Files are written atomically.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/data/jsonl_reader.h"

struct XXH64_state_s;  // libxxhash's streaming state (xxhash.h)

namespace deltatune {

// XXH64 (seed 0) from libxxhash, streamed: the content hash of data files, cache keys and the
// cache checksum. Its values equal those of the project's own XXH64 before it, so token caches
// written then stay valid.
class Hash64 {
  public:
    Hash64();
    Hash64& update(const void* data, size_t size);
    Hash64& update(std::string_view s) { return update(s.data(), s.size()); }
    // Length-prefixed, so ("ab", "c") and ("a", "bc") hash differently.
    Hash64& update_field(std::string_view s);
    Hash64& update_u64(uint64_t v) { return update(&v, sizeof v); }
    uint64_t digest() const;

  private:
    struct FreeState {
        void operator()(XXH64_state_s* state) const;
    };
    // Allocated by the library: its layout is not part of libxxhash's ABI.
    std::unique_ptr<XXH64_state_s, FreeState> state_;
};

// Streams the whole file through Hash64 with a fixed buffer (size and mtime are not enough: an
// edited file can keep both).
absl::StatusOr<uint64_t> hash_file(const std::string& path);

// Growable flat storage, filled while tokenizing.
struct TokenStore {
    std::vector<int64_t> offsets{0};
    std::vector<int32_t> ids;
    std::vector<int32_t> labels;

    void append(const Document& doc);
    void append(const TokenStore& other);
    int64_t documents() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

// Read-only tokenized documents, cheap to copy (the storage is shared).
class TokenizedDataset {
  public:
    TokenizedDataset() = default;
    static TokenizedDataset from_store(TokenStore store, BadLineCounts counts);

    int64_t size() const { return documents_; }
    int64_t total_tokens() const { return documents_ ? offsets_[documents_] : 0; }
    int64_t length(int64_t doc) const { return offsets_[doc + 1] - offsets_[doc]; }
    std::vector<int64_t> lengths() const;
    std::span<const int32_t> input_ids(int64_t doc) const {
        return {ids_ + offsets_[doc], static_cast<size_t>(length(doc))};
    }
    std::span<const int32_t> labels(int64_t doc) const {
        return {labels_ + offsets_[doc], static_cast<size_t>(length(doc))};
    }
    // A copy of tokens [begin, end) of a document (a truncated or split piece).
    Document document(int64_t doc, int64_t begin, int64_t end) const;
    Document document(int64_t doc) const { return document(doc, 0, length(doc)); }

    // What building it saw: lines read, accepted, skipped per reason.
    const BadLineCounts& counts() const { return counts_; }
    bool from_cache() const { return !cache_path_.empty(); }
    const std::string& cache_path() const { return cache_path_; }

  private:
    friend absl::StatusOr<TokenizedDataset> open_token_cache(const std::string&, uint64_t);
    std::shared_ptr<const void> owner_;  // a TokenStore or a file mapping
    const int64_t* offsets_ = nullptr;
    const int32_t* ids_ = nullptr;
    const int32_t* labels_ = nullptr;
    int64_t documents_ = 0;
    BadLineCounts counts_;
    std::string cache_path_;
};

// Writes `store` and `counts` under `key` to `path` atomically (temp + fsync + rename).
absl::Status write_token_cache(const std::string& path, uint64_t key, const TokenStore& store,
                               const BadLineCounts& counts);
// Maps a cache file and verifies magic, version, sizes, key and checksum. Missing: NotFound;
// another key: FailedPrecondition; corrupt or truncated: DataLoss naming the file.
absl::StatusOr<TokenizedDataset> open_token_cache(const std::string& path, uint64_t key);

}  // namespace deltatune
