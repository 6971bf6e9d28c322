// Byte-level BPE model: the vocabulary and merge ranks of a tokenizer.json "model" of type BPE,
// applied to one pre-token (raw bytes) at a time exactly as the Hugging Face library does:
// start from one symbol per byte and repeatedly apply the lowest-ranked merge, leftmost first.
// Results are memoised per word in a sharded cache, so the model is safe to share among threads.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune::tok {

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
struct StringEq {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, StringEq>;

class BpeModel {
  public:
    // `vocab`: token (byte-level characters, as in tokenizer.json) to id; `merges`: token pairs
    // in rank order. Errors name the JSON field ("model.merges[i]"); the caller adds the file.
    static absl::StatusOr<std::unique_ptr<BpeModel>> create(
        StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
        bool ignore_merges);

    // Appends the ids of one pre-token given as raw bytes. Fails only when a byte has no
    // vocabulary entry.
    absl::Status tokenize(std::string_view word, std::vector<int32_t>& out) const;

    std::optional<int32_t> token_to_id(std::string_view token) const;
    // The bytes a model token stands for (its byte-level decoding, or the token's own UTF-8 when
    // it is not byte-level text, as the ByteLevel decoder does); null when `id` is not in the
    // vocabulary.
    const std::string* token_bytes(int32_t id) const;
    int64_t size() const { return static_cast<int64_t>(id_bytes_.size()); }  // max id + 1
    const StringMap<int32_t>& vocab() const { return vocab_; }
    const std::vector<std::pair<int32_t, int32_t>>& merge_pairs() const { return merge_pairs_; }
    bool ignore_merges() const { return ignore_merges_; }

    ~BpeModel();

  private:
    BpeModel() = default;
    struct MergeTable;
    struct CacheShard {
        std::mutex mu;
        StringMap<std::vector<int32_t>> words;
    };
    static constexpr size_t kCacheShards = 64;
    static constexpr size_t kCacheShardCapacity = 4096;
    static constexpr size_t kMaxCachedWord = 256;

    absl::Status merge_word(std::string_view word, std::vector<int32_t>& out) const;
    void merge_small(std::vector<int32_t>& out, size_t first) const;
    void merge_large(std::vector<int32_t>& out, size_t first) const;

    StringMap<int32_t> vocab_;
    StringMap<int32_t> bytes_vocab_;  // raw bytes -> id, for ignore_merges
    std::vector<std::string> id_bytes_;
    std::vector<bool> id_present_;
    std::array<int32_t, 256> byte_id_{};
    std::vector<std::pair<int32_t, int32_t>> merge_pairs_;  // (left id, right id) by rank
    std::unique_ptr<MergeTable> merges_;
    bool ignore_merges_ = false;
    mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace deltatune::tok
