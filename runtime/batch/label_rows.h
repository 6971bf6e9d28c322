// The rows of a packed batch that carry a label: the LM head and the loss run on those alone.
// Exact: a row without a label adds nothing to the loss or to any gradient. A chat SFT batch leaves
// its system and user turns unlabeled (about 30% of the tokens in ultrachat-style data), and the LM
// head (hidden x vocabulary per row, three GEMMs) is one of the step's largest parts.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace deltatune {

struct LabelRows {
    std::vector<int32_t> rows;      // the labeled rows, ascending
    std::vector<int32_t> targets;   // their targets, in that order
    std::vector<int32_t> position;  // per batch row: its index in `rows`, or -1 (no label)
};

// The labeled rows of `targets` (-100: none), or nothing when fewer than min_unlabeled_fraction of
// the rows lack a label (then the head runs on every row: on the GPU the two row copies cost more
// than a few rows of the head save, and a fully labeled batch keeps the same bits as before) or
// when none has one (the head still runs, to write the LM head's gradient of zeros).
std::optional<LabelRows> label_rows(const std::vector<int32_t>& targets,
                                    double min_unlabeled_fraction);

// The GPU model's threshold: at 8192 tokens, 128 unlabeled rows (each of the 27B's head rows is
// about 7.6 GFLOP of GEMMs; the copies move 2 x 8192 rows of 10 KiB).
inline constexpr double kGpuLabelRowsMinUnlabeled = 1.0 / 64;

}  // namespace deltatune
