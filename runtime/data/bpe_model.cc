#include "runtime/data/bpe_model.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/data/utf8.h"

namespace deltatune::tok {
namespace {

constexpr int32_t kNoRank = INT32_MAX;
// Words up to this many bytes merge with a quadratic scan over an array, which beats a heap on
// the short words that make up nearly all text; longer ones use the library's heap algorithm.
constexpr size_t kSmallWord = 128;

}  // namespace

// Open-addressing map (left id, right id) -> (rank, merged id); a flat table keeps the lookup
// in the merge loop to one or two cache misses.
struct BpeModel::MergeTable {
    static constexpr uint64_t kEmpty = ~0ull;
    std::vector<uint64_t> keys;
    std::vector<std::pair<int32_t, int32_t>> vals;
    int shift = 60;

    explicit MergeTable(size_t n) {
        size_t cap = 16;
        int bits = 4;
        while (cap < 2 * n) cap <<= 1, ++bits;
        shift = 64 - bits;
        keys.assign(cap, kEmpty);
        vals.resize(cap);
    }
    static uint64_t key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    size_t slot(uint64_t k) const {
        return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift);
    }
    void put(int32_t a, int32_t b, int32_t rank, int32_t id) {
        const uint64_t k = key(a, b);
        size_t i = slot(k);
        while (keys[i] != kEmpty && keys[i] != k) i = (i + 1) & (keys.size() - 1);
        keys[i] = k;
        vals[i] = {rank, id};  // a repeated pair keeps its last rank, as the library's map does
    }
    const std::pair<int32_t, int32_t>* find(int32_t a, int32_t b) const {
        const uint64_t k = key(a, b);
        size_t i = slot(k);
        while (true) {
            if (keys[i] == k) return &vals[i];
            if (keys[i] == kEmpty) return nullptr;
            i = (i + 1) & (keys.size() - 1);
        }
    }
};

BpeModel::~BpeModel() = default;

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::create(
    StringMap<int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    bool ignore_merges) {
    std::unique_ptr<BpeModel> m(new BpeModel());
    m->ignore_merges_ = ignore_merges;
    int32_t max_id = -1;
    for (const auto& [token, id] : vocab) {
        if (id < 0)
            return absl::InvalidArgumentError(
                absl::StrCat("field \"model.vocab\": negative id for token \"", token, "\""));
        max_id = std::max(max_id, id);
    }
    m->id_bytes_.resize(static_cast<size_t>(max_id + 1));
    m->id_present_.assign(static_cast<size_t>(max_id + 1), false);
    for (const auto& [token, id] : vocab) {
        std::optional<std::string> bytes = byte_level_decode(token);
        if (bytes && ignore_merges) m->bytes_vocab_.emplace(*bytes, id);
        m->id_bytes_[static_cast<size_t>(id)] = bytes ? std::move(*bytes) : token;
        m->id_present_[static_cast<size_t>(id)] = true;
    }
    const ByteLevelTable& bl = byte_level_table();
    for (size_t b = 0; b < 256; ++b) {
        auto it = vocab.find(bl.byte_to_utf8[b]);
        m->byte_id_[b] = it == vocab.end() ? -1 : it->second;
    }
    m->merges_ = std::make_unique<MergeTable>(merges.size());
    m->merge_pairs_.reserve(merges.size());
    std::string joined;
    for (size_t i = 0; i < merges.size(); ++i) {
        const auto& [a, b] = merges[i];
        auto ia = vocab.find(a), ib = vocab.find(b);
        joined = a + b;
        auto ij = vocab.find(joined);
        const std::string* missing = ia == vocab.end()   ? &a
                                     : ib == vocab.end() ? &b
                                     : ij == vocab.end() ? &joined
                                                         : nullptr;
        if (missing) {
            return absl::InvalidArgumentError(absl::StrCat(
                "field \"model.merges[", i, "]\": token \"", *missing, "\" is not in model.vocab"));
        }
        m->merges_->put(ia->second, ib->second, static_cast<int32_t>(i), ij->second);
        m->merge_pairs_.emplace_back(ia->second, ib->second);
    }
    m->vocab_ = std::move(vocab);
    return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const std::string* BpeModel::token_bytes(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size() ||
        !id_present_[static_cast<size_t>(id)]) {
        return nullptr;
    }
    return &id_bytes_[static_cast<size_t>(id)];
}

absl::Status BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return absl::OkStatus();
    if (ignore_merges_) {
        // The library emits a pre-token that is itself in the vocabulary without merging.
        auto it = bytes_vocab_.find(word);
        if (it != bytes_vocab_.end()) {
            out.push_back(it->second);
            return absl::OkStatus();
        }
    }
    if (word.size() == 1) return merge_word(word, out);
    if (word.size() > kMaxCachedWord) return merge_word(word, out);

    const size_t h = StringHash()(word);
    CacheShard& shard = cache_[(h >> 7) % kCacheShards];
    {
        std::lock_guard<std::mutex> lock(shard.mu);
        auto it = shard.words.find(word);
        if (it != shard.words.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return absl::OkStatus();
        }
    }
    const size_t first = out.size();
    if (absl::Status s = merge_word(word, out); !s.ok()) return s;
    std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    std::lock_guard<std::mutex> lock(shard.mu);
    // A full shard starts over: simpler than LRU, and a working set that large is rare.
    if (shard.words.size() >= kCacheShardCapacity) shard.words.clear();
    shard.words.emplace(std::string(word), std::move(ids));
    return absl::OkStatus();
}

absl::Status BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
    const size_t first = out.size();
    for (char c : word) {
        const int32_t id = byte_id_[static_cast<unsigned char>(c)];
        if (id < 0) {
            out.resize(first);
            return absl::InvalidArgumentError(absl::StrFormat(
                "byte 0x%02X has no entry in the model vocabulary (no byte-level symbol)",
                static_cast<unsigned char>(c)));
        }
        out.push_back(id);
    }
    if (word.size() <= kSmallWord) {
        merge_small(out, first);
    } else {
        merge_large(out, first);
    }
    return absl::OkStatus();
}

void BpeModel::merge_small(std::vector<int32_t>& ids, size_t first) const {
    size_t n = ids.size() - first;
    if (n < 2) return;
    int32_t* s = ids.data() + first;
    // pair[k] = (rank, merged id) of symbols k and k + 1.
    struct RankId {
        int32_t first, second;
    } pair[kSmallWord];
    auto look = [&](size_t k) {
        const auto* m = merges_->find(s[k], s[k + 1]);
        pair[k] = m ? RankId{m->first, m->second} : RankId{kNoRank, -1};
    };
    for (size_t k = 0; k + 1 < n; ++k) look(k);
    while (n > 1) {
        size_t best = 0;
        int32_t best_rank = kNoRank;
        for (size_t k = 0; k + 1 < n; ++k) {
            if (pair[k].first < best_rank) best_rank = pair[k].first, best = k;
        }
        if (best_rank == kNoRank) break;
        s[best] = pair[best].second;
        std::memmove(s + best + 1, s + best + 2, (n - best - 2) * sizeof(int32_t));
        std::memmove(pair + best + 1, pair + best + 2, (n - best - 2) * sizeof(pair[0]));
        --n;
        if (best + 1 < n) look(best);
        if (best > 0) look(best - 1);
    }
    ids.resize(first + n);
}

void BpeModel::merge_large(std::vector<int32_t>& ids, size_t first) const {
    struct Symbol {
        int32_t id;
        int32_t prev, next;
        bool alive;
    };
    struct Candidate {
        int32_t rank, pos, id;
        bool operator>(const Candidate& o) const {
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    const size_t n = ids.size() - first;
    std::vector<Symbol> sym(n);
    for (size_t k = 0; k < n; ++k) {
        sym[k] = {ids[first + k], static_cast<int32_t>(k) - 1,
                  k + 1 < n ? static_cast<int32_t>(k + 1) : -1, true};
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto push = [&](int32_t pos) {
        const Symbol& a = sym[static_cast<size_t>(pos)];
        if (a.next < 0) return;
        if (const auto* m = merges_->find(a.id, sym[static_cast<size_t>(a.next)].id)) {
            queue.push({m->first, pos, m->second});
        }
    };
    for (size_t k = 0; k + 1 < n; ++k) push(static_cast<int32_t>(k));
    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& a = sym[static_cast<size_t>(top.pos)];
        if (!a.alive || a.next < 0) continue;
        Symbol& b = sym[static_cast<size_t>(a.next)];
        // Skip entries made stale by earlier merges (the pair no longer yields this token).
        const auto* m = merges_->find(a.id, b.id);
        if (!m || m->second != top.id) continue;
        a.id = top.id;
        b.alive = false;
        a.next = b.next;
        if (b.next >= 0) sym[static_cast<size_t>(b.next)].prev = top.pos;
        if (a.prev >= 0) push(a.prev);
        push(top.pos);
    }
    ids.resize(first);
    for (const Symbol& s : sym) {
        if (s.alive) ids.push_back(s.id);
    }
}

}  // namespace deltatune::tok
