// FsdpGpuParams to and from checkpoint files without the model in host memory: load_from copies
// this rank's byte ranges from the mapped safetensors through pinned staging to its shards;
// write_param gathers one unit at a time on the device and streams each tensor, converted to its
// stored dtype there, to the export's writer.
#include "runtime/distributed/fsdp_gpu.h"

#if DELTATUNE_HAVE_CUDA
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/tensor/cast.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {

namespace {
using bf16 = __nv_bfloat16;
}  // namespace

absl::Status FsdpGpuParams::load_from(const CheckpointWeights& weights, size_t staging_bytes) {
    if (weights.size() != layout_.slots.size()) {
        return absl::InvalidArgumentError(absl::StrCat("load_from: the checkpoint has ",
                                                       weights.size(), " parameters, the model ",
                                                       layout_.slots.size()));
    }
    const cudaStream_t s = compute();
    DT_ASSIGN_OR_RETURN(PinnedStaging staging, PinnedStaging::create(staging_bytes, 2));
    // Pieces whose stored dtype is not the destination's land here first, then a cast writes
    // them: one buffer, reused in stream order.
    DT_ASSIGN_OR_RETURN(DeviceMemory scratch, dev_.allocate(staging_bytes));
    for (const LocalPiece& p : local_pieces()) {
        const DType stored = weights.dtype(p.param);
        // What crosses the bus: the stored bytes; F16 (no device cast) as fp32 converted on the
        // host.
        const DType wire = stored == DType::kF16 ? DType::kF32 : stored;
        const DType want = p.master ? DType::kF32 : DType::kBF16;
        const auto step = static_cast<int64_t>(staging_bytes / dtype_size(wire));
        for (int64_t c = p.first; c < p.last; c += step) {
            const int64_t d = std::min(p.last, c + step), n = d - c;
            auto fill = [&](void* host) {
                return wire == stored ? weights.copy(p.param, c, d, host)
                                      : weights.copy_f32(p.param, c, d, static_cast<float*>(host));
            };
            float* master = p.master ? p.master + (c - p.first) : nullptr;
            bf16* half = p.half ? p.half + (c - p.first) : nullptr;
            const size_t bytes = static_cast<size_t>(n) * dtype_size(wire);
            if (wire == want) {
                DT_RETURN_IF_ERROR(staging.upload(
                    bytes, fill, master ? static_cast<void*>(master) : static_cast<void*>(half),
                    s));
                continue;
            }
            DT_RETURN_IF_ERROR(staging.upload(bytes, fill, scratch.get(), s, [&] {
                return master ? cast_bf16_to_f32(master, scratch.as<bf16>(), n, s)
                              : cast_f32_to_bf16(half, scratch.as<float>(), n, s);
            }));
        }
    }
    DT_RETURN_IF_ERROR(staging.finish());
    return refresh_half_from_masters();
}

absl::Status FsdpGpuParams::gather_master(ExportCursor& cursor, int unit) {
    const Unit& u = units_[static_cast<size_t>(unit)];
    const cudaStream_t s = compute();
    const size_t bytes = sizeof(float) * static_cast<size_t>(u.padded);
    if (cursor.unit.bytes() < bytes) {
        cursor.unit.reset();
        DT_ASSIGN_OR_RETURN(cursor.unit, dev_.allocate(bytes));
    }
    DT_RETURN_IF_ERROR(order(comm_stream(), s));
    DT_RETURN_IF_ERROR(comm_.all_gather_f32(master_.as<float>() + u.shard_begin,
                                            cursor.unit.as<float>(), static_cast<size_t>(u.shard),
                                            s));
    DT_RETURN_IF_ERROR(comm_.wait(s));  // polls: a dead peer is an error, not a hang
    cursor.gathered = unit;
    return absl::OkStatus();
}

absl::Status FsdpGpuParams::write_param(ExportCursor& cursor, size_t param, DType dtype,
                                        const SafetensorsWrite& write, size_t staging_bytes) {
    DT_RETURN_IF_ERROR(require_trained("export"));
    if (param >= layout_.slots.size()) return absl::OutOfRangeError("export: no such parameter");
    if (!is_float_dtype(dtype)) return absl::InvalidArgumentError("export: not a float dtype");
    const cudaStream_t s = compute();
    if (!cursor.staging) {  // the export's first call: deferred embedding rows are owed first
        DT_RETURN_IF_ERROR(catch_up_embedding());
        DT_ASSIGN_OR_RETURN(PinnedStaging staging, PinnedStaging::create(staging_bytes, 2));
        cursor.staging = std::make_unique<PinnedStaging>(std::move(staging));
        DT_ASSIGN_OR_RETURN(cursor.converted, dev_.allocate(staging_bytes));
    }
    const GpuParamSlot& slot = layout_.slots[param];
    const float* src = rep_master_.as<float>() + slot.offset;
    if (!slot.replicated && comm_.world_size() == 1) {  // the master holds the unit whole
        src =
            master_.as<float>() + units_[static_cast<size_t>(slot.unit)].shard_begin + slot.offset;
    } else if (!slot.replicated) {
        if (cursor.gathered != slot.unit) DT_RETURN_IF_ERROR(gather_master(cursor, slot.unit));
        src = cursor.unit.as<float>() + slot.offset;
    }
    // BF16 is converted on the device; F16 (no device cast) crosses as fp32, converted here.
    const DType wire = dtype == DType::kF16 ? DType::kF32 : dtype;
    const size_t step = cursor.staging->buffer_bytes() / dtype_size(wire);
    for (int64_t c = 0; c < slot.numel; c += static_cast<int64_t>(step)) {
        const int64_t n = std::min<int64_t>(slot.numel - c, static_cast<int64_t>(step));
        const void* piece = src + c;
        if (wire == DType::kBF16) {
            DT_CUDA_RETURN_IF_ERROR(cast_f32_to_bf16(cursor.converted.as<bf16>(), src + c, n, s));
            piece = cursor.converted.get();
        }
        DT_RETURN_IF_ERROR(cursor.staging->download(
            static_cast<size_t>(n) * dtype_size(wire), piece, s, [&](const void* host) {
                return wire == DType::kBF16
                           ? write(host, static_cast<size_t>(n) * sizeof(bf16))
                           : write_f32_as(dtype, static_cast<const float*>(host), n, write);
            }));
    }
    return absl::OkStatus();
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
