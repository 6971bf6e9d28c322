#include "runtime/optim/cpu_update.h"

#include <cmath>

#include "runtime/base/status_macros.h"

namespace deltatune {

GradClip grad_clip(double norm, double max_grad_norm) {
    GradClip c;
    c.active = max_grad_norm > 0 && norm > max_grad_norm;
    if (c.active) c.scale = static_cast<float>(max_grad_norm / (norm + 1e-6));
    return c;
}

void clip_and_adamw(const std::vector<CpuUpdatePiece>& pieces, const GradClip& clip,
                    const AdamWHyper& hyper, int64_t step) {
    for (const CpuUpdatePiece& p : pieces) {
        if (clip.active) {
            for (int64_t i = 0; i < p.n; ++i) p.grad[i] *= clip.scale;
        }
        adamw_step_ref(p.param, p.m, p.v, p.grad, p.n, hyper, step);
    }
}

absl::StatusOr<double> fsdp_cpu_step(FsdpCpuParams& store, const AdamWHyper& hyper,
                                     double max_grad_norm) {
    const int64_t step = store.begin_update();
    const std::vector<CpuUpdatePiece> pieces = store.shard_pieces();
    double sq = 0;
    for (const CpuUpdatePiece& p : pieces) {
        for (int64_t i = 0; i < p.n; ++i) sq += static_cast<double>(p.grad[i]) * p.grad[i];
    }
    if (store.comm().world_size() > 1) DT_RETURN_IF_ERROR(store.comm().all_reduce_sum(&sq, 1));
    const double norm = std::sqrt(sq);
    clip_and_adamw(pieces, grad_clip(norm, max_grad_norm), hyper, step);
    store.end_update();
    return norm;
}

}  // namespace deltatune
