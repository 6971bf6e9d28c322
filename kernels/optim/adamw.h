// AdamW, exactly torch.optim.AdamW's single-tensor update (decoupled weight decay, bias
// correction with the step count starting at 1).
#pragma once
#include <cstdint>

#include "kernels/optim/multi_tensor.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace deltatune {

// The initial values serve tests and tools (beta2 0.999 as torch.optim.AdamW's); a job's values,
// beta2 0.95 among them, are its spec's, filled from the one table of job defaults.
struct AdamWHyper {
    double lr = 1e-5;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
};

// One step on n values. param, m, v are updated in place; step is the 1-based step number.
template <typename T>
void adamw_step_ref(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWHyper& hyper,
                    int64_t step);

#if DELTATUNE_HAVE_CUDA
// One parameter tensor of a multi-tensor AdamW step (all device pointers). param, m, v: fp32
// master weight and moments, updated in place; grad: fp32; param_bf16 (may be null) receives the
// updated weight rounded to bf16. chunk_begin is filled by adamw_plan_chunks.
struct AdamWTensorArgs {
    float* param;
    float* m;
    float* v;
    const float* grad;
    __nv_bfloat16* param_bf16;
    int64_t n;
    int64_t chunk_begin;
    RowMask rows = {};  // gradient rows known to be zero, not read (optional; row_mask_valid)
    // With `rows`: unmarked rows are not updated at all. Their zero-gradient steps are deferred
    // to adamw_catch_up_rows, which applies them with the same bits before anything reads them.
    bool defer_unmarked = false;
};

// One step's fp32 scalars, rounded on the host exactly as adamw_step_ref rounds them.
struct AdamWStepScalars {
    float decay, m_weight, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
};
AdamWStepScalars adamw_step_scalars(const AdamWHyper& hyper, int64_t step);

// Host side, once per parameter set: assigns each tensor its first chunk and returns the total
// number of chunks (the launch's work items).
int64_t adamw_plan_chunks(AdamWTensorArgs* tensors, int num_tensors);

// One step over every tensor in one launch, the math of adamw_step_ref in fp32. `tensors` is a
// device copy of the planned array. grad_scale (device, may be null) multiplies every gradient
// first: global_grad_norm's clip coefficient, so clipping needs no host synchronisation.
cudaError_t adamw_multi_tensor_step(const AdamWTensorArgs* tensors, int num_tensors,
                                    int64_t total_chunks, const AdamWHyper& hyper, int64_t step,
                                    const float* grad_scale, cudaStream_t stream);

// Deferred updates (AdamWTensorArgs::defer_unmarked). `table` (device) holds the scalars of the
// steps taken so far in order; adamw_record_scalars writes entry `index` (no host copy, stream
// ordered). adamw_catch_up_rows brings the rows of t.rows (t: param, m, v, param_bf16 and rows
// used) up to date: row r has had table entries [0, row_pos[r]); the entries from there to
// `table_len` are applied as zero-gradient steps, the bf16 copy is written and row_pos[r] becomes
// table_len. The rows are those of `sorted_ids` (n ids in ascending order, repeats allowed), or
// every row when sorted_ids is null.
cudaError_t adamw_record_scalars(AdamWStepScalars* table, int64_t index, const AdamWHyper& hyper,
                                 int64_t step, cudaStream_t stream);
cudaError_t adamw_catch_up_rows(const AdamWTensorArgs& t, const int32_t* sorted_ids, int64_t n,
                                int32_t* row_pos, const AdamWStepScalars* table, int32_t table_len,
                                cudaStream_t stream);
#endif

}  // namespace deltatune
