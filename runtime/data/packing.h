// The packing sampler: documents become 1D batches of at most tokens_per_batch tokens, one batch
// per data-parallel rank per step, deterministic from the seed, resumable from a small cursor.
//
// Per epoch: the documents (after the over-long policy) are shuffled from (seed, epoch); each
// window of `window` consecutive documents is sorted by length and packed best-fit decreasing into
// bins of tokens_per_batch. The window's bins (plus any carried from the previous window) are
// sorted by token count and dealt out in groups of world_size, so the ranks of one step get bins of
// similar size; a group whose sizes still differ (a window's half-empty last bin) has its segments
// re-dealt longest-first to the least-loaded rank when that fits. The steps of a window are then
// shuffled. Bins left over when a window's count is not a multiple of world_size are carried into
// the next window. At the end of an epoch the last incomplete group (fewer bins than ranks) is one
// final step whose segments are spread over all ranks; only when it has fewer segments than ranks
// do the remaining ranks get an EMPTY batch (no documents, zero tokens). No document is skipped or
// repeated within an epoch (unless a mixture weight says so, below), and every rank still runs
// every step's collectives. With world_size 1 there is never an empty batch.
//
// A mixture weights groups of documents (a job's training files): an epoch takes a group's
// segments weight times, the whole part as copies of all of them and the fraction as that share
// of them drawn anew each epoch (weight 2.5 of 100 segments: 250; 0.5: a different 50 each
// epoch). No mixture, or every weight 1, plans exactly as before.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/batch/packed_batch.h"
#include "runtime/data/token_cache.h"

namespace deltatune {

enum class OverlongPolicy {
    kTruncate,  // keep the first tokens_per_batch tokens, drop the rest
    kSplit,     // cut into pieces of tokens_per_batch (the last one shorter), packed independently
    kDrop,      // leave the document out
};
// split|truncate|drop
absl::StatusOr<OverlongPolicy> parse_overlong_policy(std::string_view name);
const char* overlong_policy_name(OverlongPolicy policy);

// Documents [first_doc, the next group's first_doc) taken `weight` times per epoch.
struct MixtureGroup {
    int64_t first_doc = 0;
    double weight = 1.0;
    bool operator==(const MixtureGroup&) const = default;
};

struct PackingOptions {
    int64_t tokens_per_batch = 8192;
    int64_t window = 1024;  // documents per shuffle window
    uint64_t seed = 0;
    int world_size = 1;
    OverlongPolicy overlong = OverlongPolicy::kSplit;
    std::vector<MixtureGroup> mixture;  // by first_doc, the first at 0; empty: every weight 1
};

// Tokens [begin, end) of document `doc`: a whole document, a truncated one, or a split piece.
struct Segment {
    int64_t doc = 0;
    int64_t begin = 0;
    int64_t end = 0;
    int64_t tokens() const { return end - begin; }
    bool operator==(const Segment&) const = default;
};

// One rank's batch for one step. Empty (no segments) only in an epoch's last step.
struct PackedBin {
    std::vector<Segment> segments;
    int64_t tokens = 0;
    bool operator==(const PackedBin&) const = default;
};

// What one epoch's plan looks like.
struct PackingStats {
    int64_t documents = 0;           // input documents
    int64_t segments = 0;            // after splitting over-long documents
    int64_t tokens = 0;              // real tokens packed per epoch (after truncation)
    int64_t overlong_documents = 0;  // longer than tokens_per_batch (split, truncated or dropped)
    int64_t truncated_tokens = 0;    // dropped by kTruncate
    int64_t dropped_tokens = 0;      // in the documents kDrop left out
    int64_t batches = 0;             // non-empty bins
    int64_t empty_batches = 0;       // rank slots left empty in the epoch's last step
    int64_t steps = 0;
    double efficiency = 0;  // tokens / (batches * tokens_per_batch)
    // Rank balance over steps where every rank has a batch: max/min tokens across ranks of a
    // step, worst and mean (1.0 for world_size 1).
    double rank_balance_worst = 1;
    double rank_balance_mean = 1;
    // The 2D padded baseline over the same shuffled order: see count_padded_2d_batches.
    int64_t padded_2d_batches = 0;
};

class Packer {
  public:
    // `lengths[d]` is document d's token count (all > 0). InvalidArgument for bad options.
    static absl::StatusOr<Packer> create(std::vector<int64_t> lengths, PackingOptions options);

    // The next step: world_size bins, index = rank. Rolls into the next epoch after the last step.
    std::vector<PackedBin> next_step();

    int64_t epoch() const { return epoch_; }
    int64_t step_in_epoch() const { return step_; }
    int64_t steps_in_epoch() const { return static_cast<int64_t>(plan_.size()); }
    const PackingStats& epoch_stats() const { return stats_; }
    const PackingOptions& options() const { return options_; }

    // The position as a small JSON object (epoch, step, and what it is valid for). A Packer
    // created with the same lengths and options and restored from it yields exactly the batches
    // the original would have yielded next. A cursor for other lengths or options is
    // FailedPrecondition; a malformed one InvalidArgument.
    std::string cursor() const;
    absl::Status restore(std::string_view cursor);

  private:
    Packer() = default;
    void plan_epoch(int64_t epoch);
    std::vector<size_t> epoch_items(uint64_t seed) const;  // indices into items_, unshuffled
    std::string mixture_text() const;  // "first_doc:weight,..." (the cursor's record of it)
    void update_stats(const std::vector<size_t>& order);  // `order`: the epoch's shuffle

    PackingOptions options_;
    std::vector<int64_t> lengths_;
    std::vector<Segment> items_;     // epoch-independent, in document order
    std::vector<size_t> group_end_;  // per mixture group, one past its last item
    uint64_t lengths_hash_ = 0;
    int64_t overlong_documents_ = 0;
    int64_t truncated_tokens_ = 0;
    int64_t dropped_tokens_ = 0;
    int64_t epoch_ = 0;
    int64_t step_ = 0;
    std::vector<std::vector<PackedBin>> plan_;  // [step][rank] of the current epoch
    PackingStats stats_;
};

// 2D padding's batch count for documents in this order: each batch takes documents while
// (documents in it) x (its longest document) stays within tokens_per_batch.
int64_t count_padded_2d_batches(const std::vector<int64_t>& lengths, int64_t tokens_per_batch);

// The rank's PackedBatch (via pack_documents); an empty bin gives an empty batch (cu_seqlens {0}).
absl::StatusOr<PackedBatch> make_packed_batch(const TokenizedDataset& data, const PackedBin& bin,
                                              int64_t vocab_size);

}  // namespace deltatune
