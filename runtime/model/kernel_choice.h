// The kernel choices of a Qwen3.5 training step: one function per op that has a choice to make,
// and one table (kernel_choice.cc) saying what each implementation is. The GPU blocks dispatch on
// these functions' answers and `deltatune kernels`, TRAINING_STARTED and strict mode
// (kernel_registry.h) print them, so what is reported is what runs. A new op: its entry in kOps
// and its rows in the table; a new implementation of an op: a KernelImpl, its rows, its case in
// the op's choose_* function and in the block's dispatch. Plain host logic in every build: the
// daemon plans and validates for GPUs it may not have.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/device/device_context.h"
#include "runtime/model/qwen35_config.h"

namespace deltatune {

enum class KernelKind : uint8_t {
    kFused,         // the project's fused CUDA kernel for the op
    kLibrary,       // cuBLASLt / cuBLAS
    kSimple,        // reference-grade CUDA kernel (correct, slow): not acceptable in strict mode
    kCpuReference,  // the fp32 CPU reference (no usable GPU)
};
const char* kernel_kind_name(KernelKind k);

// One op's implementation as reported.
struct KernelChoice {
    std::string op;  // e.g. "gated_attention"
    KernelKind kind;
    std::string implementation;  // e.g. "kernels/attention/attention_flash.cu (sm_90a)"
    std::string why;             // one line
};

// What the choices depend on: the GPU (its compute capability, the kernels' code loaded for it,
// its shared memory), the attention core the process asked for (DELTATUNE_ATTENTION), and the
// model (null: shapes unknown, taken as served).
struct KernelTarget {
    GpuArch gpu;
    AttentionCore attention_core = AttentionCore::kWgmma;
    const Qwen35Config* config = nullptr;
};

// Every implementation an op can run.
enum class KernelImpl : uint8_t {
    kCpuReference,  // no usable GPU: the CPU engine's fp32 reference
    kNotBuilt,      // no kernel code for this GPU (before sm_80, or not among the build's targets)
    kCublasLt,      // linear
    kOnly,          // the op's one fused kernel
    kAttentionWgmma,
    kAttentionCudnn,
    kAttentionFlash,
    kAttentionGeneric,
    kGdnChunked,  // the GDN core's fused path: causal_conv1d, chunked rule, gated_rmsnorm
    kGdnSimple,   // the GDN core on kernels/gdn/gdn_simple.cu
};

// An op's implementation and, for a fallback, why (empty: the table's line).
struct ImplChoice {
    KernelImpl impl;
    std::string why;
};

// The attention core of every full-attention layer where head_dim is 256 (else the generic
// kernel): with the sm_90a code the core asked for; with the portable code the mma.sync flash
// kernel for the wgmma core (cuDNN's where asked), where the GPU's shared memory holds it, else
// the generic kernel. At run time a batch whose arguments the fused cores reject
// (gated_attention_supported) runs the generic kernel too.
ImplChoice choose_attention(const KernelTarget& t);
// The GDN core of every linear-attention layer: the chunked path where its kernels serve the
// config's shapes (and, with the portable code, the GPU's shared memory holds their mma.sync
// recurrences), else the simple kernels. At run time a batch the chunked kernels reject (their
// *_supported at its token count) runs the simple kernels too.
ImplChoice choose_gdn_core(const KernelTarget& t);

// The ops of the GDN core, which choose_gdn_core decides together.
const std::vector<std::string>& gdn_core_ops();

// Under FP8 projections (Qwen35GpuModel::set_fp8_projections): the projections, by Hugging Face
// module name, whose GEMMs run in FP8 on `gpu` (runtime/device/linear_fp8.h: Hopper, both
// widths multiples of 16; the GDN gate inputs in_proj_a and in_proj_b never). Empty on other
// GPUs.
std::vector<std::string> fp8_projection_modules(const Qwen35Config& c, const GpuArch& gpu);

// Every op of a training step in the report's order, chosen for the GPU t.gpu (sm_version not 0).
std::vector<KernelChoice> gpu_kernel_choices(const KernelTarget& t);
// The same ops on a machine without a GPU: the CPU references, each saying `why`.
std::vector<KernelChoice> cpu_kernel_choices(const std::string& why);

}  // namespace deltatune
