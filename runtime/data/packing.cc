// The packing sampler: per-epoch shuffle, windowed best-fit decreasing, rank grouping, cursor.
#include "runtime/data/packing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"

namespace deltatune {
namespace {

constexpr char kCursorFormat[] = "deltatune.packer.v1";

// splitmix64: a fixed, portable generator, so a seed means the same batches on every platform and
// standard library (std::shuffle and the std distributions are implementation-defined).
class Rng {
  public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, n) without modulo bias.
    uint64_t below(uint64_t n) {
        const uint64_t limit =
            std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
        uint64_t x;
        do x = next();
        while (x >= limit);
        return x % n;
    }
    template <typename T>
    void shuffle(std::vector<T>& v) {
        for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
    }

  private:
    uint64_t state_;
};

// Groups by first_doc from 0, none past the documents (a file with no documents makes an empty
// group), weights finite and positive.
absl::Status check_mixture(const std::vector<MixtureGroup>& mixture, int64_t documents) {
    for (size_t g = 0; g < mixture.size(); ++g) {
        const MixtureGroup& m = mixture[g];
        const int64_t prev = g == 0 ? 0 : mixture[g - 1].first_doc;
        if ((g == 0 && m.first_doc != 0) || m.first_doc < prev || m.first_doc > documents) {
            return absl::InvalidArgumentError(absl::StrCat(
                "packing: mixture group ", g, " starts at document ", m.first_doc,
                " (groups start at 0, in order, within the ", documents, " documents)"));
        }
        if (!std::isfinite(m.weight) || m.weight <= 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                "packing: mixture group ", g, " has weight ", m.weight, " (must be positive)"));
        }
    }
    return absl::OkStatus();
}

// What a plan depends on besides the mixture, in the order a restored cursor is checked: written
// into the cursor, compared when one is restored.
std::vector<std::pair<const char*, nlohmann::json>> plan_fields(const PackingOptions& o,
                                                                size_t documents,
                                                                uint64_t lengths_hash) {
    return {{"seed", o.seed},
            {"world_size", o.world_size},
            {"tokens_per_batch", o.tokens_per_batch},
            {"window", o.window},
            {"overlong", overlong_policy_name(o.overlong)},
            {"documents", documents},
            {"lengths_hash", absl::StrFormat("%016x", lengths_hash)}};
}

uint64_t epoch_seed(uint64_t seed, int64_t epoch) {
    Rng a(seed);
    Rng b(static_cast<uint64_t>(epoch) ^ 0xD1B54A32D192ED03ull);
    return a.next() ^ b.next();
}

// Best-fit decreasing of the window's items (indices into `items`) into bins of `capacity`.
std::vector<PackedBin> best_fit_decreasing(std::vector<size_t> window,
                                           const std::vector<Segment>& items, int64_t capacity) {
    // Stable, so equal lengths keep their shuffled order and the result is fully determined.
    std::stable_sort(window.begin(), window.end(),
                     [&](size_t a, size_t b) { return items[a].tokens() > items[b].tokens(); });
    std::vector<PackedBin> bins;
    std::set<std::pair<int64_t, size_t>> open;  // (remaining capacity, bin); ties by bin index
    for (size_t i : window) {
        const int64_t len = items[i].tokens();
        auto it = open.lower_bound({len, 0});
        size_t b;
        int64_t remaining;
        if (it == open.end()) {
            b = bins.size();
            bins.emplace_back();
            remaining = capacity;
        } else {
            b = it->second;
            remaining = it->first;
            open.erase(it);
        }
        bins[b].segments.push_back(items[i]);
        bins[b].tokens += len;
        if (remaining - len > 0) open.insert({remaining - len, b});
    }
    return bins;
}

int64_t spread(const std::vector<PackedBin>& group) {
    const auto [lo, hi] = std::minmax_element(
        group.begin(), group.end(),
        [](const PackedBin& a, const PackedBin& b) { return a.tokens < b.tokens; });
    return hi->tokens - lo->tokens;
}

// Evens out the token counts of one step's bins: the group's segments are re-dealt
// longest-first to the least-loaded rank (LPT), kept only if every bin still fits and the spread
// shrinks. Window tails leave a half-empty bin next to a full one; this is what fixes that pair,
// and it fills the ranks of an epoch's last step that would otherwise be empty.
void balance_group(std::vector<PackedBin>& group, int64_t capacity) {
    if (group.size() < 2 || spread(group) <= capacity / 64) return;
    std::vector<Segment> segments;
    for (const PackedBin& b : group)
        segments.insert(segments.end(), b.segments.begin(), b.segments.end());
    std::stable_sort(segments.begin(), segments.end(),
                     [](const Segment& a, const Segment& b) { return a.tokens() > b.tokens(); });
    std::vector<PackedBin> dealt(group.size());
    for (const Segment& seg : segments) {
        auto least = std::min_element(
            dealt.begin(), dealt.end(),
            [](const PackedBin& a, const PackedBin& b) { return a.tokens < b.tokens; });
        if (least->tokens + seg.tokens() > capacity) return;
        least->segments.push_back(seg);
        least->tokens += seg.tokens();
    }
    if (spread(dealt) < spread(group)) group = std::move(dealt);
}

}  // namespace

absl::StatusOr<OverlongPolicy> parse_overlong_policy(std::string_view name) {
    if (name == "truncate") return OverlongPolicy::kTruncate;
    if (name == "split") return OverlongPolicy::kSplit;
    if (name == "drop") return OverlongPolicy::kDrop;
    return absl::InvalidArgumentError(absl::StrCat(
        "over-long policy: expected split, truncate or drop, got '", std::string(name), "'"));
}

const char* overlong_policy_name(OverlongPolicy policy) {
    switch (policy) {
        case OverlongPolicy::kTruncate:
            return "truncate";
        case OverlongPolicy::kDrop:
            return "drop";
        default:
            return "split";
    }
}

absl::StatusOr<Packer> Packer::create(std::vector<int64_t> lengths, PackingOptions options) {
    if (options.tokens_per_batch <= 0 || options.window <= 0 || options.world_size <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "packing: tokens_per_batch (", options.tokens_per_batch, "), window (", options.window,
            ") and world_size (", options.world_size, ") must be positive"));
    }
    if (lengths.empty()) return absl::InvalidArgumentError("packing: the dataset has no documents");
    DT_RETURN_IF_ERROR(check_mixture(options.mixture, static_cast<int64_t>(lengths.size())));
    Packer p;
    p.options_ = options;
    const int64_t n = options.tokens_per_batch;
    for (size_t d = 0; d < lengths.size(); ++d) {
        const int64_t len = lengths[d];
        if (len <= 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("packing: document ", d, " has ", len, " tokens"));
        }
        const auto doc = static_cast<int64_t>(d);
        if (len > n) ++p.overlong_documents_;
        if (len > n && options.overlong == OverlongPolicy::kDrop) {
            p.dropped_tokens_ += len;
        } else if (len <= n || options.overlong == OverlongPolicy::kTruncate) {
            p.items_.push_back({doc, 0, std::min(len, n)});
            p.truncated_tokens_ += len - std::min(len, n);
        } else {
            for (int64_t b = 0; b < len; b += n) p.items_.push_back({doc, b, std::min(len, b + n)});
        }
    }
    if (p.items_.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "packing: all ", lengths.size(), " documents are longer than tokens_per_batch (", n,
            ") and overlong: drop leaves none"));
    }
    for (size_t g = 0; g < p.options_.mixture.size(); ++g) {  // items are in document order
        const int64_t end_doc = g + 1 < p.options_.mixture.size()
                                    ? p.options_.mixture[g + 1].first_doc
                                    : static_cast<int64_t>(lengths.size());
        size_t end = p.group_end_.empty() ? 0 : p.group_end_.back();
        while (end < p.items_.size() && p.items_[end].doc < end_doc) ++end;
        p.group_end_.push_back(end);
    }
    if (p.epoch_items(0).empty()) {
        return absl::InvalidArgumentError(
            "packing: the mixture's weights take no document into an epoch");
    }
    p.lengths_hash_ = Hash64().update(lengths.data(), lengths.size() * sizeof(int64_t)).digest();
    p.lengths_ = std::move(lengths);
    p.plan_epoch(0);
    return p;
}

void Packer::plan_epoch(int64_t epoch) {
    const int64_t capacity = options_.tokens_per_batch;
    const auto world = static_cast<size_t>(options_.world_size);
    const auto window = static_cast<size_t>(options_.window);
    const uint64_t seed = epoch_seed(options_.seed, epoch);
    Rng rng(seed);
    std::vector<size_t> order = epoch_items(seed);
    rng.shuffle(order);

    epoch_ = epoch;
    step_ = 0;
    plan_.clear();
    std::vector<PackedBin> carried;
    for (size_t w = 0; w < order.size(); w += window) {
        std::vector<size_t> ids(
            order.begin() + static_cast<std::ptrdiff_t>(w),
            order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), w + window)));
        std::vector<PackedBin> pool = std::move(carried);
        carried.clear();
        for (PackedBin& b : best_fit_decreasing(std::move(ids), items_, capacity))
            pool.push_back(std::move(b));
        // Neighbours in size order go to the ranks of one step, so the ranks' token counts match.
        std::stable_sort(pool.begin(), pool.end(), [](const PackedBin& a, const PackedBin& b) {
            return a.tokens > b.tokens;
        });
        const size_t full = pool.size() / world * world;
        std::vector<std::vector<PackedBin>> steps;
        for (size_t s = 0; s < full; s += world) {
            std::vector<PackedBin> step(std::make_move_iterator(pool.begin() + s),
                                        std::make_move_iterator(pool.begin() + s + world));
            balance_group(step, capacity);
            rng.shuffle(step);  // so no rank always gets the larger bin of its group
            steps.push_back(std::move(step));
        }
        carried.assign(std::make_move_iterator(pool.begin() + full),
                       std::make_move_iterator(pool.end()));
        rng.shuffle(steps);  // BFD emits long documents first; training should not see that order
        for (auto& s : steps) plan_.push_back(std::move(s));
    }
    if (!carried.empty()) {
        // The last group: its segments are spread over all ranks; only when there are fewer
        // segments than ranks do the remaining ranks get empty batches.
        carried.resize(world);
        balance_group(carried, capacity);
        plan_.push_back(std::move(carried));
    }

    update_stats(order);
}

void Packer::update_stats(const std::vector<size_t>& order) {
    const int64_t capacity = options_.tokens_per_batch;
    stats_ = PackingStats{};
    stats_.documents = static_cast<int64_t>(lengths_.size());
    stats_.segments = static_cast<int64_t>(order.size());
    stats_.overlong_documents = overlong_documents_;
    stats_.truncated_tokens = truncated_tokens_;
    stats_.dropped_tokens = dropped_tokens_;
    stats_.steps = static_cast<int64_t>(plan_.size());
    double balance_sum = 0;
    int64_t balanced_steps = 0;
    for (const auto& step : plan_) {
        int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
        for (const PackedBin& b : step) {
            stats_.tokens += b.tokens;
            (b.segments.empty() ? stats_.empty_batches : stats_.batches) += 1;
            lo = std::min(lo, b.tokens);
            hi = std::max(hi, b.tokens);
        }
        if (lo == 0) continue;
        const double ratio = static_cast<double>(hi) / static_cast<double>(lo);
        stats_.rank_balance_worst = std::max(stats_.rank_balance_worst, ratio);
        balance_sum += ratio;
        ++balanced_steps;
    }
    if (balanced_steps)
        stats_.rank_balance_mean = balance_sum / static_cast<double>(balanced_steps);
    stats_.efficiency = static_cast<double>(stats_.tokens) /
                        (static_cast<double>(stats_.batches) * static_cast<double>(capacity));
    std::vector<int64_t> shuffled(order.size());
    for (size_t i = 0; i < order.size(); ++i) shuffled[i] = items_[order[i]].tokens();
    stats_.padded_2d_batches = count_padded_2d_batches(shuffled, capacity);
}

std::vector<size_t> Packer::epoch_items(uint64_t seed) const {
    std::vector<size_t> out;
    if (group_end_.empty()) {
        out.resize(items_.size());
        std::iota(out.begin(), out.end(), size_t{0});
        return out;
    }
    Rng draw(seed ^ 0x6A09E667F3BCC909ull);  // its own stream: the shuffle's stays as it was
    size_t begin = 0;
    for (size_t g = 0; g < group_end_.size(); ++g) {
        const size_t end = group_end_[g];
        const double w = options_.mixture[g].weight;
        const auto copies = static_cast<int64_t>(std::floor(w));
        for (int64_t c = 0; c < copies; ++c) {
            for (size_t i = begin; i < end; ++i) out.push_back(i);
        }
        std::vector<size_t> part(end - begin);
        std::iota(part.begin(), part.end(), begin);
        const auto take = static_cast<size_t>(
            std::llround((w - static_cast<double>(copies)) * static_cast<double>(part.size())));
        if (take > 0 && take < part.size()) draw.shuffle(part);
        out.insert(out.end(), part.begin(), part.begin() + static_cast<std::ptrdiff_t>(take));
        begin = end;
    }
    return out;
}

std::string Packer::mixture_text() const {
    std::string out;
    for (const MixtureGroup& g : options_.mixture) {
        absl::StrAppend(&out, out.empty() ? "" : ",", g.first_doc, ":", g.weight);
    }
    return out;
}

std::vector<PackedBin> Packer::next_step() {
    if (step_ >= steps_in_epoch()) plan_epoch(epoch_ + 1);
    return plan_[static_cast<size_t>(step_++)];
}

std::string Packer::cursor() const {
    nlohmann::json j = {{"format", kCursorFormat}, {"epoch", epoch_}, {"step", step_}};
    for (const auto& [key, value] : plan_fields(options_, lengths_.size(), lengths_hash_)) {
        j[key] = value;
    }
    if (!options_.mixture.empty()) j["mixture"] = mixture_text();  // older cursors have none
    return j.dump();
}

absl::Status Packer::restore(std::string_view cursor) {
    const nlohmann::json j = nlohmann::json::parse(cursor, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || j.value("format", "") != kCursorFormat) {
        return absl::InvalidArgumentError(
            absl::StrCat("packing cursor: not a ", kCursorFormat, " JSON object"));
    }
    int64_t epoch = 0, step = 0;
    try {
        epoch = j.at("epoch").get<int64_t>();
        step = j.at("step").get<int64_t>();
        // Each field the plan depends on must match; say which one does not.
        if (j.value("mixture", "") != mixture_text()) {
            return absl::FailedPreconditionError(
                absl::StrCat("packing cursor was saved with mixture \"", j.value("mixture", ""),
                             "\", this run has \"", mixture_text(), "\""));
        }
        for (const auto& [key, value] : plan_fields(options_, lengths_.size(), lengths_hash_)) {
            if (j.at(key) != value) {
                return absl::FailedPreconditionError(absl::StrCat("packing cursor was saved with ",
                                                                  key, " = ", j.at(key).dump(),
                                                                  ", this run has ", value.dump()));
            }
        }
    } catch (const nlohmann::json::exception& e) {
        return absl::InvalidArgumentError(absl::StrCat("packing cursor: ", e.what()));
    }
    if (epoch < 0) return absl::InvalidArgumentError("packing cursor: negative epoch");
    const int64_t old_epoch = epoch_, old_step = step_;
    plan_epoch(epoch);
    if (step < 0 || step > steps_in_epoch()) {
        const int64_t steps = steps_in_epoch();
        plan_epoch(old_epoch);
        step_ = old_step;
        return absl::InvalidArgumentError(
            absl::StrCat("packing cursor: step ", step, " outside an epoch of ", steps, " steps"));
    }
    step_ = step;
    return absl::OkStatus();
}

int64_t count_padded_2d_batches(const std::vector<int64_t>& lengths, int64_t tokens_per_batch) {
    int64_t batches = 0, rows = 0, longest = 0;
    for (int64_t len : lengths) {
        const int64_t l = std::min(len, tokens_per_batch);
        if (rows > 0 && (rows + 1) * std::max(longest, l) > tokens_per_batch) {
            ++batches;
            rows = 0;
            longest = 0;
        }
        ++rows;
        longest = std::max(longest, l);
    }
    return batches + (rows > 0);
}

absl::StatusOr<PackedBatch> make_packed_batch(const TokenizedDataset& data, const PackedBin& bin,
                                              int64_t vocab_size) {
    if (bin.segments.empty()) {
        PackedBatch empty;
        empty.cu_seqlens.push_back(0);
        return empty;
    }
    std::vector<Document> docs;
    docs.reserve(bin.segments.size());
    for (const Segment& s : bin.segments) {
        if (s.doc < 0 || s.doc >= data.size() || s.begin < 0 || s.end > data.length(s.doc) ||
            s.begin >= s.end) {
            return absl::InvalidArgumentError(absl::StrCat(
                "packed segment ", s.doc, "[", s.begin, ", ", s.end, ") is outside the dataset"));
        }
        docs.push_back(data.document(s.doc, s.begin, s.end));
    }
    return pack_documents(docs, vocab_size > 0 ? vocab_size : std::numeric_limits<int32_t>::max());
}

}  // namespace deltatune
