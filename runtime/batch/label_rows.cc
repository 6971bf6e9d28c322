// The labeled rows of a batch.
#include "runtime/batch/label_rows.h"

#include <algorithm>

#include "kernels/loss/cross_entropy.h"

namespace deltatune {

std::optional<LabelRows> label_rows(const std::vector<int32_t>& targets,
                                    double min_unlabeled_fraction) {
    // Decided from the counts first: a batch the head runs whole on builds no index lists.
    const auto unlabeled = std::count(targets.begin(), targets.end(), kIgnoreIndex);
    const auto labeled = static_cast<int64_t>(targets.size()) - unlabeled;
    if (unlabeled == 0 || labeled == 0 ||
        static_cast<double>(unlabeled) <
            min_unlabeled_fraction * static_cast<double>(targets.size())) {
        return std::nullopt;
    }
    LabelRows r;
    r.rows.reserve(static_cast<size_t>(labeled));
    r.targets.reserve(static_cast<size_t>(labeled));
    r.position.assign(targets.size(), -1);
    for (size_t t = 0; t < targets.size(); ++t) {
        if (targets[t] == kIgnoreIndex) continue;
        r.position[t] = static_cast<int32_t>(r.rows.size());
        r.rows.push_back(static_cast<int32_t>(t));
        r.targets.push_back(targets[t]);
    }
    return r;
}

}  // namespace deltatune
