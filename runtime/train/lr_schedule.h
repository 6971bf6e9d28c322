// Learning-rate schedules: linear warmup from 0 over `warmup_steps`, then cosine or linear decay
// to min_lr_ratio * peak at `max_steps`, or constant. Steps are 1-based optimizer steps.
#pragma once

#include <cstdint>

namespace deltatune {

enum class LrScheduleKind { kCosine, kLinear, kConstant };

struct LrSchedule {
    LrScheduleKind kind = LrScheduleKind::kCosine;
    double peak = 1e-5;
    int64_t warmup_steps = 0;
    int64_t max_steps = 1;
    double min_lr_ratio = 0.1;

    double at(int64_t step) const;
};

}  // namespace deltatune
