// Random initialisation of a Qwen3.5 checkpoint, streamed tensor by tensor into its files.
#include "runtime/model/init_model.h"

#include <algorithm>
#include <vector>

#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/qwen35_params.h"

#if DELTATUNE_HAVE_CUDA
#include "kernels/tensor/cast.h"
#include "kernels/tensor/init_fill.h"
#include "runtime/device/cuda_status.h"
#include "runtime/device/device_context.h"
#include "runtime/device/pinned_staging.h"
#include "runtime/model/gpu_param_layout.h"
#endif

namespace deltatune {

namespace {

// Host: init_qwen35_params' generator, one tensor at a time in ParamSet order (the order
// save_hf_model asks for them).
ParamBytes host_values(const HfModel& m, uint64_t seed) {
    auto init = std::make_shared<Qwen35Initializer>(m.config, seed);
    return [&m, init](size_t i, const SafetensorsWrite& write) -> absl::Status {
        const NamedParam& p = m.params.all()[i];
        std::vector<float> v(static_cast<size_t>(p.value.numel()));
        init->fill(p.name, v.data(), p.value.numel());
        return write_f32_as(p.stored_dtype, v.data(), p.value.numel(), write);
    };
}

#if DELTATUNE_HAVE_CUDA
// Device: FsdpGpuParams::init_random's rule per tensor (seed, stream id = parameter index),
// generated a piece at a time, converted on the device and copied out through pinned staging.
struct CudaInit {
    std::unique_ptr<DeviceContext> dev;
    DeviceMemory f32, stored;
    std::unique_ptr<PinnedStaging> staging;
};
constexpr int64_t kPiece = 16 << 20;  // elements

absl::StatusOr<ParamBytes> cuda_values(const HfModel& m, uint64_t seed) {
    auto st = std::make_shared<CudaInit>();
    DT_ASSIGN_OR_RETURN(st->dev, DeviceContext::create(Device::cuda(0)));
    DT_ASSIGN_OR_RETURN(st->f32, st->dev->allocate(kPiece * sizeof(float)));
    DT_ASSIGN_OR_RETURN(st->stored, st->dev->allocate(kPiece * sizeof(float)));
    DT_ASSIGN_OR_RETURN(PinnedStaging staging, PinnedStaging::create(kPiece * sizeof(float), 2));
    st->staging = std::make_unique<PinnedStaging>(std::move(staging));
    const auto range = static_cast<float>(m.config.initializer_range);
    return ParamBytes([&m, st, seed, range](size_t i,
                                            const SafetensorsWrite& write) -> absl::Status {
        const NamedParam& p = m.params.all()[i];
        const GpuInitRule r = gpu_init_rule(p.name, range);
        const cudaStream_t s = st->dev->compute_stream();
        for (int64_t at = 0; at < p.value.numel(); at += kPiece) {
            const int64_t n = std::min(kPiece, p.value.numel() - at);
            DT_CUDA_RETURN_IF_ERROR(init_fill_f32(
                st->f32.as<float>(), n, static_cast<InitFill>(r.kind), r.a, r.b, seed, i, s, at));
            const void* src = st->f32.get();
            if (p.stored_dtype == DType::kBF16) {
                DT_CUDA_RETURN_IF_ERROR(
                    cast_f32_to_bf16(st->stored.as<__nv_bfloat16>(), st->f32.as<float>(), n, s));
                src = st->stored.get();
            }
            const size_t wire = p.stored_dtype == DType::kBF16 ? 2 : 4;
            DT_RETURN_IF_ERROR(
                st->staging->download(static_cast<size_t>(n) * wire, src, s, [&](const void* host) {
                    // bf16 was converted on the device; F32 and F16 cross as fp32.
                    return p.stored_dtype == DType::kBF16
                               ? write(host, static_cast<size_t>(n) * wire)
                               : write_f32_as(p.stored_dtype, static_cast<const float*>(host), n,
                                              write);
                }));
        }
        return absl::OkStatus();
    });
}
#endif

}  // namespace

absl::Status init_model(const std::string& config_path, const std::string& out_dir, uint64_t seed,
                        InitDevice device) {
    HfModel m;
    DT_ASSIGN_OR_RETURN(m.config_json, read_file(config_path));
    DT_ASSIGN_OR_RETURN(m.config, parse_qwen35_config(m.config_json, config_path));
    m.layout = m.config.is_multimodal() ? CheckpointLayout::kMultimodal : CheckpointLayout::kText;
    m.tied = m.config.tie_word_embeddings;
    m.params = make_qwen35_params(m.config, m.tied, /*zero_fill=*/false);  // names and shapes
    m.materialized = false;
    if (device == InitDevice::kHost) return save_hf_model(out_dir, m, host_values(m, seed));
#if DELTATUNE_HAVE_CUDA
    DT_ASSIGN_OR_RETURN(const ParamBytes values, cuda_values(m, seed));
    return save_hf_model(out_dir, m, values);
#else
    return absl::FailedPreconditionError("init-model --device cuda needs a CUDA build");
#endif
}

}  // namespace deltatune
