// The labeled rows of a batch.
#include "runtime/batch/label_rows.h"

#include "kernels/loss/cross_entropy.h"

namespace deltatune {

std::optional<LabelRows> label_rows(const std::vector<int32_t>& targets,
                                    double min_unlabeled_fraction) {
    LabelRows r;
    r.position.assign(targets.size(), -1);
    for (size_t t = 0; t < targets.size(); ++t) {
        if (targets[t] == kIgnoreIndex) continue;
        r.position[t] = static_cast<int32_t>(r.rows.size());
        r.rows.push_back(static_cast<int32_t>(t));
        r.targets.push_back(targets[t]);
    }
    const double unlabeled = static_cast<double>(targets.size() - r.rows.size());
    if (unlabeled == 0 || r.rows.empty() ||
        unlabeled < min_unlabeled_fraction * static_cast<double>(targets.size()))
        return std::nullopt;
    return r;
}

}  // namespace deltatune
