// FsdpGpuParams' gradient buffers (see fsdp_gpu.h): zeroing them between steps, and the rows of
// the embedding's gradient that may be nonzero.
#include "runtime/distributed/fsdp_gpu.h"

#if DELTATUNE_HAVE_CUDA
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/optim/grad_rows.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {

// At world size 1 with untied embeddings only the embedding's backward writes its gradient, and
// only into the rows of the step's ids (a few thousand of ~250k). Those rows are marked, so the
// gradient norm skips the others (exact zeros), the optimizer defers their updates
// (runtime/optim/deferred_rows.h) and zero_grads_except zeroes only the marked ones: at the 27B
// shape no 5 GB memset and no 5 GB gradient read per step.
absl::Status FsdpGpuParams::track_embedding_rows() {
    if (comm_.world_size() != 1 || layout_.tied) return absl::OkStatus();
    for (size_t i = 0; i < names_.size(); ++i) {
        if (names_[i] != "model.embed_tokens.weight") continue;
        const GpuParamSlot& slot = layout_.slots[i];
        RowMask m;
        m.begin = units_[static_cast<size_t>(slot.unit)].shard_begin + slot.offset;
        m.rows = config_.vocab_size;
        m.row_len = config_.hidden_size;
        DT_ASSIGN_OR_RETURN(embed_rows_, dev_.allocate(static_cast<size_t>(m.rows)));
        m.touched = embed_rows_.as<uint8_t>();
        if (slot.replicated || m.rows * m.row_len != slot.numel || !row_mask_valid(m)) {
            embed_rows_.reset();  // a layout the mask cannot describe: every row is read
            break;
        }
        DT_CUDA_RETURN_IF_ERROR(
            cudaMemsetAsync(embed_rows_.get(), 0, embed_rows_.bytes(), compute()));
        embed_mask_ = m;
        embed_slot_ = static_cast<int>(i);
        return absl::OkStatus();
    }
    return absl::OkStatus();
}

// The optimizer's deferred embedding rows (runtime/optim/deferred_rows.h), when it defers them.
absl::Status FsdpGpuParams::refresh_embedding_rows(const int32_t* sorted_ids, int64_t n) {
    return deferred_ ? deferred_->catch_up(sorted_ids, n) : absl::OkStatus();
}

absl::Status FsdpGpuParams::catch_up_embedding() {
    return deferred_ ? deferred_->catch_up_all() : absl::OkStatus();
}

absl::Status FsdpGpuParams::reset_embedding_deferral() {
    return deferred_ ? deferred_->forget() : absl::OkStatus();
}

absl::Status FsdpGpuParams::zero_grads() {
    DT_RETURN_IF_ERROR(require_trained("zero_grads"));
    const cudaStream_t s = compute();
    DT_RETURN_IF_ERROR(order(comm_stream(), s));
    DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grad_.get(), 0, grad_.bytes(), s));
    DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(rep_grad_.get(), 0, rep_grad_.bytes(), s));
    if (embed_rows_.get()) {
        DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(embed_rows_.get(), 0, embed_rows_.bytes(), s));
    }
    for (Unit& u : units_) {
        if (u.full_grad.get()) {  // unsynced accumulation left over: discard on the comm stream
            DT_RETURN_IF_ERROR(order(s, comm_stream()));
            u.full_grad.reset();
        }
    }
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::zero_marked_grads(const std::vector<char>& zero) {
    DT_RETURN_IF_ERROR(require_trained("zero_grads"));
    if (comm_.world_size() != 1 || zero.size() != layout_.slots.size()) {
        return absl::FailedPreconditionError("partial gradient zeroing needs world size 1");
    }
    std::vector<std::pair<int64_t, int64_t>> runs;  // [begin, end) in grad_, by start
    std::vector<std::pair<int64_t, bool>> slots;    // (begin, zero it) of every sharded slot
    for (size_t i = 0; i < layout_.slots.size(); ++i) {
        const GpuParamSlot& slot = layout_.slots[i];
        if (slot.replicated) continue;
        slots.emplace_back(units_[static_cast<size_t>(slot.unit)].shard_begin + slot.offset,
                           zero[i]);
    }
    std::vector<size_t> order(slots.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return slots[a].first < slots[b].first; });
    // A run ends where a kept slot starts: padding between zeroed neighbours is zeroed too
    // (nothing ever writes it), never a kept slot's values.
    float* g = grad_.as<float>();
    for (size_t k = 0; k < order.size(); ++k) {
        const size_t i = order[k];
        if (!slots[i].second) continue;
        const int64_t end = k + 1 < order.size() ? slots[order[k + 1]].first : shard_total_;
        if (!runs.empty() && runs.back().second == slots[i].first) {
            runs.back().second = end;
        } else {
            runs.emplace_back(slots[i].first, end);
        }
    }
    for (const auto& [b, e] : runs) {
        DT_CUDA_RETURN_IF_ERROR(
            cudaMemsetAsync(g + b, 0, sizeof(float) * static_cast<size_t>(e - b), compute()));
    }
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::zero_grads_except(const std::vector<char>& skip) {
    std::vector<char> zero(skip.size());
    for (size_t i = 0; i < skip.size(); ++i) zero[i] = !skip[i];
    // The tracked embedding: only its marked rows can be nonzero (track_embedding_rows).
    const bool rows = embed_slot_ >= 0 && static_cast<size_t>(embed_slot_) < zero.size() &&
                      zero[static_cast<size_t>(embed_slot_)];
    if (rows) zero[static_cast<size_t>(embed_slot_)] = 0;
    DT_RETURN_IF_ERROR(order(comm_stream(), compute()));
    DT_RETURN_IF_ERROR(zero_marked_grads(zero));
    if (rows) {
        DT_CUDA_RETURN_IF_ERROR(zero_marked_rows(grad_.as<float>() + embed_mask_.begin,
                                                 embed_rows_.as<uint8_t>(), embed_mask_.rows,
                                                 embed_mask_.row_len, compute()));
    }
    DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(rep_grad_.get(), 0, rep_grad_.bytes(), compute()));
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::zero_param_grads(const std::vector<size_t>& params) {
    if (params.empty()) return absl::OkStatus();
    std::vector<char> zero(layout_.slots.size(), 0);
    for (size_t i : params) {
        if (i >= zero.size()) return absl::OutOfRangeError("zero_param_grads: no such parameter");
        zero[i] = 1;
    }
    return zero_marked_grads(zero);
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
