#include "runtime/model/gpu_lora.h"

#if DELTATUNE_HAVE_CUDA
#include <map>

#include "absl/strings/str_cat.h"
#include "kernels/tensor/cast.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {

namespace {
using bf16 = __nv_bfloat16;
constexpr int64_t kAlign = 128;  // elements: every tensor starts 256-byte aligned in bf16

absl::Status copy_to_host(float* dst, const float* src, int64_t n, cudaStream_t s) {
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToHost, s));
    return absl::OkStatus();
}

// The projections of a layer that share their input, in the order the blocks' forwards run
// them (the first computes the group's down projection).
const std::vector<std::vector<Proj>>& input_groups() {
    static const std::vector<std::vector<Proj>> groups = {
        {Proj::kQkv, Proj::kZ, Proj::kB, Proj::kA},
        {Proj::kQ, Proj::kK, Proj::kV},
        {Proj::kGate, Proj::kUp},
        {Proj::kDown},
        {Proj::kOut},
        {Proj::kO}};
    return groups;
}

int64_t aligned(int64_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

// Offsets in the flat buffers: each group's A matrices back to back (one GEMM reads them as
// one), then every B; bind() turns them into pointers once the buffers exist.
void GpuLoraAdapters::place(const Qwen35Config& config, const ParamSet& adapters, float scale) {
    std::map<std::string, size_t> index;
    for (const NamedParam& p : adapters.all()) {
        index[p.name] = slots_.size();
        slots_.push_back(Slot{p.name, -1, p.value.numel()});
    }
    pairs_.resize(static_cast<size_t>(config.num_layers));
    std::vector<std::pair<GpuLora*, size_t>> b_slots;  // each pair and its B's slot
    for (int64_t l = 0; l < config.num_layers; ++l) {
        for (const std::vector<Proj>& members : input_groups()) {
            auto group = std::make_unique<GpuLoraGroup>();
            int64_t start = -1;
            for (Proj p : members) {
                const std::string prefix = lora_pair_prefix(l, p);
                const auto ia = index.find(prefix + "lora_A.weight");
                const auto ib = index.find(prefix + "lora_B.weight");
                if (ia == index.end() || ib == index.end()) continue;
                if (start < 0) start = total_ = aligned(total_);
                Slot& a = slots_[ia->second];
                a.offset = total_;
                total_ += a.numel;
                GpuLora& g = pairs_[static_cast<size_t>(l)][static_cast<size_t>(p)];
                g.rank = adapters.all()[ia->second].value.shape()[0];
                g.column = group->rank;
                g.first = group->members == 0;
                g.scale = scale;
                g.group = group.get();
                group->rank += g.rank;
                ++group->members;
                b_slots.emplace_back(&g, ib->second);
            }
            if (group->members == 0) continue;
            group_at_.emplace_back(group.get(), start);
            groups_.push_back(std::move(group));
        }
    }
    for (auto& [g, b] : b_slots) {
        Slot& slot = slots_[b];
        slot.offset = total_ = aligned(total_);
        total_ += slot.numel;
        b_at_.emplace_back(g, slot.offset);
    }
}

absl::StatusOr<std::unique_ptr<GpuLoraAdapters>> GpuLoraAdapters::create(DeviceContext& dev,
                                                                         const Qwen35Config& config,
                                                                         const ParamSet& adapters,
                                                                         float scale) {
    if (dev.device().is_cpu()) {
        return absl::FailedPreconditionError("GpuLoraAdapters needs a CUDA device context");
    }
    std::unique_ptr<GpuLoraAdapters> a(new GpuLoraAdapters(dev));
    a->place(config, adapters, scale);
    for (const Slot& slot : a->slots_) {
        if (slot.offset < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("LoRA: ", slot.name, " is not a pair of a projection of this model"));
        }
    }
    const size_t n = static_cast<size_t>(std::max<int64_t>(a->total_, kAlign));
    DT_ASSIGN_OR_RETURN(a->master_, dev.allocate(n * sizeof(float)));
    DT_ASSIGN_OR_RETURN(a->half_, dev.allocate(n * sizeof(bf16)));
    DT_ASSIGN_OR_RETURN(a->grad_, dev.allocate(n * sizeof(float)));
    DT_ASSIGN_OR_RETURN(a->moments_, dev.allocate(2 * n * sizeof(float)));
    const cudaStream_t s = dev.compute_stream();
    for (DeviceMemory* m : {&a->master_, &a->half_, &a->grad_, &a->moments_}) {
        DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(m->get(), 0, m->bytes(), s));
    }
    a->bind();
    DT_RETURN_IF_ERROR(a->upload(adapters));
    return a;
}

// place()'s offsets into pointers of the allocated buffers.
void GpuLoraAdapters::bind() {
    for (auto& [group, o] : group_at_) {
        group->A = half_.as<bf16>() + o;
        group->dA = grad_.as<float>() + o;
    }
    for (auto& [g, o] : b_at_) {
        g->B = half_.as<bf16>() + o;
        g->dB = grad_.as<float>() + o;
    }
}

absl::Status GpuLoraAdapters::reserve(int64_t tokens) {
    if (tokens <= capacity_) return absl::OkStatus();
    int64_t columns = 0, widest = 0;
    for (const auto& g : groups_) columns += g->rank, widest = std::max(widest, g->rank);
    // Every group's xa, then one dyb as wide as the widest group.
    DT_RETURN_IF_ERROR(dev_.synchronize());  // the old buffers may still be read
    activations_.reset();
    DT_ASSIGN_OR_RETURN(
        activations_,
        dev_.allocate(sizeof(bf16) * static_cast<size_t>(tokens * (columns + widest))));
    bf16* at = activations_.as<bf16>();
    for (auto& g : groups_) {
        g->xa = at;
        at += tokens * g->rank;
    }
    for (auto& g : groups_) g->dyb = at;
    capacity_ = tokens;
    return absl::OkStatus();
}

GpuLoraAdapters::~GpuLoraAdapters() {
    cudaStreamSynchronize(dev_.compute_stream());
}

absl::StatusOr<std::vector<GpuOptimizerGroup>> GpuLoraAdapters::optimizer_groups() {
    AdamWTensorArgs t{master_.as<float>(),
                      moments_.as<float>(),
                      second_moment(),
                      grad_.as<float>(),
                      half_.as<bf16>(),
                      total_,
                      0};
    return std::vector<GpuOptimizerGroup>{GpuOptimizerGroup{{t}, /*sharded=*/false}};
}

const GpuLora* GpuLoraAdapters::find(int64_t layer, Proj p) const {
    if (layer < 0 || layer >= static_cast<int64_t>(pairs_.size())) return nullptr;
    const GpuLora& g = pairs_[static_cast<size_t>(layer)][static_cast<size_t>(p)];
    return g.rank > 0 ? &g : nullptr;
}

absl::Status GpuLoraAdapters::zero_grads() {
    DT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grad_.get(), 0, grad_.bytes(), dev_.compute_stream()));
    return absl::OkStatus();
}

absl::Status GpuLoraAdapters::copy_out(const DeviceMemory& from, ParamSet& to) const {
    if (to.all().size() != slots_.size()) {
        return absl::InvalidArgumentError("LoRA download: the set does not match the adapter");
    }
    const cudaStream_t s = dev_.compute_stream();
    for (size_t i = 0; i < slots_.size(); ++i) {
        Tensor& t = to.all()[i].value;
        if (to.all()[i].name != slots_[i].name || t.numel() != slots_[i].numel) {
            return absl::InvalidArgumentError(
                absl::StrCat("LoRA download: ", to.all()[i].name, " is not ", slots_[i].name));
        }
        DT_RETURN_IF_ERROR(
            copy_to_host(t.data<float>(), from.as<float>() + slots_[i].offset, t.numel(), s));
    }
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return absl::OkStatus();
}

absl::Status GpuLoraAdapters::download(ParamSet& params) const {
    return copy_out(master_, params);
}

absl::Status GpuLoraAdapters::download_grads(ParamSet& grads) const {
    return copy_out(grad_, grads);
}

absl::Status GpuLoraAdapters::upload(const ParamSet& params) {
    if (params.all().size() != slots_.size()) {
        return absl::InvalidArgumentError("LoRA upload: the set does not match the adapter");
    }
    const cudaStream_t s = dev_.compute_stream();
    for (size_t i = 0; i < slots_.size(); ++i) {
        const Tensor& t = params.all()[i].value;
        if (t.numel() != slots_[i].numel || t.dtype() != DType::kF32) {
            return absl::InvalidArgumentError(
                absl::StrCat("LoRA upload: ", params.all()[i].name, " has the wrong shape"));
        }
        DT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(master_.as<float>() + slots_[i].offset,
                                                t.data<float>(), sizeof(float) * t.numel(),
                                                cudaMemcpyHostToDevice, s));
    }
    return refresh_half();
}

absl::Status GpuLoraAdapters::refresh_half() {
    const cudaStream_t s = dev_.compute_stream();
    DT_CUDA_RETURN_IF_ERROR(cast_f32_to_bf16(half_.as<bf16>(), master_.as<float>(), total_, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));  // the host values may go away
    return absl::OkStatus();
}

absl::Status GpuLoraAdapters::save_state(std::vector<float>& master, std::vector<float>& m,
                                         std::vector<float>& v) const {
    const cudaStream_t s = dev_.compute_stream();
    const size_t n = static_cast<size_t>(total_);
    master.resize(n), m.resize(n), v.resize(n);
    DT_RETURN_IF_ERROR(copy_to_host(master.data(), master_.as<float>(), total_, s));
    DT_RETURN_IF_ERROR(copy_to_host(m.data(), moments_.as<float>(), total_, s));
    DT_RETURN_IF_ERROR(copy_to_host(v.data(), second_moment(), total_, s));
    DT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return absl::OkStatus();
}

absl::Status GpuLoraAdapters::load_state(const std::vector<float>& master,
                                         const std::vector<float>& m, const std::vector<float>& v) {
    const size_t n = static_cast<size_t>(total_);
    if (master.size() != n || m.size() != n || v.size() != n) {
        return absl::InvalidArgumentError(
            absl::StrCat("LoRA state: ", master.size(), " elements, the adapter has ", n));
    }
    const cudaStream_t s = dev_.compute_stream();
    const std::pair<float*, const float*> copies[] = {{master_.as<float>(), master.data()},
                                                      {moments_.as<float>(), m.data()},
                                                      {second_moment(), v.data()}};
    for (const auto& [dst, src] : copies) {
        DT_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyHostToDevice, s));
    }
    return refresh_half();
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
