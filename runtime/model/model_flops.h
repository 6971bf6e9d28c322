// Model FLOPs of a training step and the dense bf16 peak they are divided by for MFU (model FLOPs
// utilisation): what `deltatune bench` and a job's step metrics report. Recomputation is not
// counted, so recomputing layers lowers MFU rather than hiding in it.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/qwen35_config.h"

namespace deltatune {

// FLOPs of forward and backward over documents of lengths `docs` (each attends only to itself):
//   6 * N_mm * T                     N_mm = every linear weight incl. the LM head, not the
//   embedding (4 * N_mm with a frozen base under an adapter of `adapter_params`, which add 6 each)
//   + per full-attention layer 12 * n_q * d_h * s_bar * T,   s_bar = sum s_i^2 / (2 sum s_i)
//   + per GDN layer HV * T * [(6KV + 5.25CK + 4CV) + (16KV + 18CK + 10CV + 4C^2)],  C = 64
double step_flops(const Qwen35Config& c, const std::vector<int64_t>& docs,
                  int64_t adapter_params = 0);

// Dense bf16 tensor-core peak FLOP/s of a GPU of compute capability `sm_version`, by its SXM part
// (80: A100, 312 TFLOP/s; 90: H100 and H200, 989.4; 100: B200, 2250); 0 where the capability does
// not say which part it is (MFU is then not reported rather than guessed).
double dense_bf16_peak_flops(int sm_version);

}  // namespace deltatune
