// Learning-rate schedule values.
#include "runtime/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace deltatune {

double LrSchedule::at(int64_t step) const {
    if (warmup_steps > 0 && step <= warmup_steps) {
        return peak * static_cast<double>(step) / static_cast<double>(warmup_steps);
    }
    if (kind == LrScheduleKind::kConstant) return peak;
    const int64_t decay_steps = std::max<int64_t>(1, max_steps - warmup_steps);
    const double progress = std::clamp(
        static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
    const double floor = peak * min_lr_ratio;
    if (kind == LrScheduleKind::kLinear) return floor + (peak - floor) * (1.0 - progress);
    return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace deltatune
