// cuDNN fused flash attention for the gated attention op (attention_cudnn.h).
#include "kernels/attention/attention_cudnn.h"

#include <cudnn.h>

#include <chrono>
#include <map>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "cudnn_frontend.h"
#include "kernels/attention/attention_gate.h"

namespace deltatune {

namespace fe = cudnn_frontend;
using bf16 = __nv_bfloat16;

namespace {

constexpr int64_t kD = 256;

// Tensor uids of the variant packs (forward and backward share the input names).
enum Uid : int64_t {
    kQ = 1,
    kK,
    kV,
    kO,
    kStats,
    kScale,
    kSeqQ,
    kSeqKv,
    kQOff,
    kKOff,
    kVOff,
    kOOff,
    kStatsOff,
    kDo,
    kDoOff,
    kDq,
    kDqOff,
    kDk,
    kDkOff,
    kDv,
    kDvOff,
};

int64_t pow2_at_least(int64_t n, int64_t floor) {
    int64_t p = floor;
    while (p < n) p *= 2;
    return p;
}

// The buckets a plan serves: batch slots, longest document, total tokens.
struct Shape {
    int64_t slots, max_len, max_tokens, q_heads, kv_heads;
    auto tie() const { return std::tie(slots, max_len, max_tokens, q_heads, kv_heads); }
    bool operator<(const Shape& o) const { return tie() < o.tie(); }
};

// Powers of two for slots, the longest document (at least 64) and tokens: a training run meets a
// handful of buckets. Tighter buckets (multiples of 4 slots, 128 tokens) ran the kernel faster
// but met new buckets nearly every step, and building plans then cost more than it saved
// (docs/performance.md "Measured choices").
Shape shape_of(const GatedAttentionArgs& a) {
    const int64_t longest = a.max_doc_tokens > 0 ? a.max_doc_tokens : a.tokens;
    return {pow2_at_least(a.num_docs, 1), pow2_at_least(longest, 64), pow2_at_least(a.tokens, 1024),
            a.q_heads, a.kv_heads};
}

absl::Status fe_status(fe::error_t e, const char* what) {
    if (e.is_good()) return absl::OkStatus();
    return absl::UnimplementedError(absl::StrCat("cuDNN attention ", what, ": ", e.get_message()));
}

absl::Status cudnn_status(cudnnStatus_t s, const char* what) {
    if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(what, ": ", cudnnGetErrorString(s)));
}

absl::Status cuda_status(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Returns the frontend call's failure as a Status (the cuDNN reason included).
#define DT_FE(expr, what)                                                      \
    do {                                                                       \
        if (absl::Status st_ = fe_status((expr), what); !st_.ok()) return st_; \
    } while (0)

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// Ragged (tokens, heads, head_dim) tensor seen as (slots, heads, max_len, dim). Every slot starts
// at its ragged offset, so the batch stride is never used: the dense one stands in for it (cuDNN
// checks its alignment).
void set_ragged(const TensorPtr& t, const Shape& s, int64_t heads, int64_t dim,
                const TensorPtr& offsets) {
    t->set_dim({s.slots, heads, s.max_len, dim})
        .set_stride({s.max_len * heads * dim, dim, heads * dim, 1})
        .set_ragged_offset(offsets);
}

struct Graphs {
    std::shared_ptr<fe::graph::Graph> graph;
    int64_t workspace = 0;  // cuDNN's own
};

struct Builder {
    std::shared_ptr<fe::graph::Graph> g = std::make_shared<fe::graph::Graph>();
    const Shape& s;
    // Every bucket compiles its own plan (about 0.1 s each). Not dynamic shapes with a shared
    // kernel cache: cuDNN 9.19 accepted that for the forward and then ran the kernel compiled for
    // the first bucket on every other one (wrong o for other head counts and document layouts).
    explicit Builder(const Shape& shape) : s(shape) {
        g->set_io_data_type(fe::DataType_t::BFLOAT16)
            .set_intermediate_data_type(fe::DataType_t::FLOAT)
            .set_compute_data_type(fe::DataType_t::FLOAT);
    }
    TensorPtr ints(Uid uid, int64_t n, const char* name,
                   fe::DataType_t type = fe::DataType_t::INT32) {
        return g->tensor(fe::graph::Tensor_attributes()
                             .set_uid(uid)
                             .set_name(name)
                             .set_dim({n, 1, 1, 1})
                             .set_stride({1, 1, 1, 1})
                             .set_data_type(type));
    }
    // int64, as cuDNN's own tests use from 9.6 on: no 2^31-element limit on the packed batch.
    TensorPtr offsets(Uid uid, const char* name) {
        return ints(uid, s.slots + 1, name, fe::DataType_t::INT64);
    }
    TensorPtr input(Uid uid, Uid off, int64_t heads, const char* name) {
        auto t = g->tensor(fe::graph::Tensor_attributes().set_uid(uid).set_name(name));
        set_ragged(t, s, heads, kD, offsets(off, name));
        return t;
    }
    // q, k and v, the inputs of both directions.
    std::tuple<TensorPtr, TensorPtr, TensorPtr> qkv() {
        return {input(kQ, kQOff, s.q_heads, "q"), input(kK, kKOff, s.kv_heads, "k"),
                input(kV, kVOff, s.kv_heads, "v")};
    }
    // Causal within each document: top-left causal mask, the padding mask from the document
    // lengths, and the scale (SDPA_attributes or SDPA_backward_attributes).
    template <typename Attributes>
    Attributes& masked(Attributes& a) {
        return a.set_causal_mask(true)
            .set_attn_scale(scale())
            .set_padding_mask(true)
            .set_seq_len_q(ints(kSeqQ, s.slots, "seq_q"))
            .set_seq_len_kv(ints(kSeqKv, s.slots, "seq_kv"));
    }
    TensorPtr scale() {
        return g->tensor(fe::graph::Tensor_attributes()
                             .set_uid(kScale)
                             .set_name("scale")
                             .set_dim({1, 1, 1, 1})
                             .set_stride({1, 1, 1, 1})
                             .set_is_pass_by_value(true)
                             .set_data_type(fe::DataType_t::FLOAT));
    }
    TensorPtr stats(TensorPtr t) {
        t->set_uid(kStats)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim({s.slots, s.q_heads, s.max_len, 1})
            .set_stride({s.max_len * s.q_heads, 1, s.q_heads, 1})
            .set_ragged_offset(offsets(kStatsOff, "stats_off"));
        return t;
    }
    absl::StatusOr<Graphs> finish(cudnnHandle_t h) {
        DT_FE(g->validate(), "validate");
        DT_FE(g->build_operation_graph(h), "build_operation_graph");
        DT_FE(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
        DT_FE(g->check_support(h), "check_support");
        DT_FE(g->build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans");
        Graphs out{g, 0};
        DT_FE(g->get_workspace_size(out.workspace), "get_workspace_size");
        return out;
    }
};

}  // namespace

struct CudnnAttention::Impl {
    cudnnHandle_t handle = nullptr;
    std::map<Shape, Graphs> forward, backward;
    double build_seconds = 0;

    absl::StatusOr<const Graphs*> forward_graph(const Shape& s) {
        return cached(forward, s, [&] { return build_forward(s); });
    }
    absl::StatusOr<const Graphs*> backward_graph(const Shape& s) {
        return cached(backward, s, [&] { return build_backward(s); });
    }
    // The plan for `s` in `plans`, built (and its time accounted) on first use.
    template <typename Build>
    absl::StatusOr<const Graphs*> cached(std::map<Shape, Graphs>& plans, const Shape& s,
                                         Build build) {
        if (auto it = plans.find(s); it != plans.end()) return &it->second;
        const auto t0 = std::chrono::steady_clock::now();
        absl::StatusOr<Graphs> built = build();
        build_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!built.ok()) return built.status();
        return &plans.emplace(s, *std::move(built)).first->second;
    }
    absl::StatusOr<Graphs> build_forward(const Shape& s);
    absl::StatusOr<Graphs> build_backward(const Shape& s);
};

absl::StatusOr<Graphs> CudnnAttention::Impl::build_forward(const Shape& s) {
    Builder b(s);
    auto [q, k, v] = b.qkv();
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("gated_attention_forward")
                    // The engine kernels_tests and scripts/gpu/cudnn_ragged_probe.py checked (the
                    // unified one needs cuDNN 9.21 for a causal bound); not AUTO, which may pick
                    // an unchecked engine on a newer cuDNN.
                    .set_implementation(fe::AttentionImplementation_t::COMPOSITE)
                    .set_generate_stats(true);
    auto [o, stats] = b.g->sdpa(q, k, v, b.masked(opts));
    o->set_output(true).set_uid(kO);
    set_ragged(o, s, s.q_heads, kD, b.offsets(kOOff, "o_off"));
    b.stats(stats)->set_output(true);
    return b.finish(handle);
}

absl::StatusOr<Graphs> CudnnAttention::Impl::build_backward(const Shape& s) {
    Builder b(s);
    auto [q, k, v] = b.qkv();
    auto o = b.input(kO, kOOff, s.q_heads, "o");
    auto d_o = b.input(kDo, kDoOff, s.q_heads, "d_o");
    auto stats = b.stats(b.g->tensor(fe::graph::Tensor_attributes().set_name("stats")));
    // The workspace (fp32 dq accumulation) is sized by the tokens present, not slots x max_len.
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("gated_attention_backward")
                    .set_max_total_seq_len_q(s.max_tokens)
                    .set_max_total_seq_len_kv(s.max_tokens);
    auto [dq, dk, dv] = b.g->sdpa_backward(q, k, v, o, d_o, stats, b.masked(opts));
    dq->set_output(true).set_uid(kDq);
    dk->set_output(true).set_uid(kDk);
    dv->set_output(true).set_uid(kDv);
    set_ragged(dq, s, s.q_heads, kD, b.offsets(kDqOff, "dq_off"));
    set_ragged(dk, s, s.kv_heads, kD, b.offsets(kDkOff, "dk_off"));
    set_ragged(dv, s, s.kv_heads, kD, b.offsets(kDvOff, "dv_off"));
    return b.finish(handle);
}

namespace {

size_t align256(size_t n) {
    return (n + 255) / 256 * 256;
}

// The device-side ragged description of a batch at the front of the workspace: the int32
// document lengths and three int64 offset arrays, each 256-byte aligned (cuDNN reads them as
// 16-byte aligned tensors).
struct Ragged {
    int32_t* seq_len;
    int64_t *q_off, *kv_off, *stats_off;
    static size_t array_bytes(const Shape& s) {
        return align256(sizeof(int64_t) * static_cast<size_t>(s.slots + 1));
    }
    static size_t bytes(const Shape& s) { return 4 * array_bytes(s); }
    static Ragged at(void* w, const Shape& s) {
        auto* p = static_cast<char*>(w);
        const size_t n = array_bytes(s);
        return {reinterpret_cast<int32_t*>(p), reinterpret_cast<int64_t*>(p + n),
                reinterpret_cast<int64_t*>(p + 2 * n), reinterpret_cast<int64_t*>(p + 3 * n)};
    }
};

// The backward's gated d_o in the workspace, after the ragged arrays.
size_t d_o_bytes(const GatedAttentionArgs& a) {
    return align256(sizeof(bf16) * static_cast<size_t>(a.tokens * a.q_heads * kD));
}

// The variant-pack entries forward and backward share: q, k, v, o, the lse, the scale, the
// document lengths and the ragged offsets of those tensors.
std::unordered_map<int64_t, void*> shared_pack(const GatedAttentionArgs& a, const Ragged& r,
                                               const bf16* o, const float* lse, float* scale) {
    return {{kQ, const_cast<bf16*>(a.q)},
            {kK, const_cast<bf16*>(a.k)},
            {kV, const_cast<bf16*>(a.v)},
            {kO, const_cast<bf16*>(o)},
            {kStats, const_cast<float*>(lse)},
            {kScale, scale},
            {kSeqQ, r.seq_len},
            {kSeqKv, r.seq_len},
            {kQOff, r.q_off},
            {kKOff, r.kv_off},
            {kVOff, r.kv_off},
            {kOOff, r.q_off},
            {kStatsOff, r.stats_off}};
}

absl::Status check_args(const GatedAttentionArgs& a) {
    if (!gated_attention_supported(a)) {
        return absl::InvalidArgumentError("cuDNN attention: unsupported gated attention arguments");
    }
    return absl::OkStatus();
}

absl::Status fill_ragged(const Ragged& r, const GatedAttentionArgs& a, const Shape& s,
                         cudaStream_t stream) {
    return cuda_status(
        attention_ragged_offsets(r.seq_len, r.q_off, r.kv_off, r.stats_off, a.cu_seqlens,
                                 a.num_docs, s.slots, a.q_heads, a.kv_heads, kD, stream),
        "attention_ragged_offsets");
}

absl::Status check_workspace(const absl::StatusOr<size_t>& need, size_t have, const char* what) {
    if (!need.ok()) return need.status();
    if (have >= *need) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("cuDNN attention ", what, ": workspace of ", have, " bytes, needs ", *need));
}

absl::Status execute(cudnnHandle_t handle, const Graphs& g,
                     std::unordered_map<int64_t, void*>& pack, void* workspace,
                     cudaStream_t stream) {
    if (absl::Status st = cudnn_status(cudnnSetStream(handle, stream), "cudnnSetStream");
        !st.ok()) {
        return st;
    }
    DT_FE(g.graph->execute(handle, pack, workspace), "execute");
    return absl::OkStatus();
}

}  // namespace

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudnnAttention::~CudnnAttention() {
    if (impl_ && impl_->handle) cudnnDestroy(impl_->handle);
}

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::create() {
    auto impl = std::make_unique<Impl>();
    if (absl::Status st = cudnn_status(cudnnCreate(&impl->handle), "cudnnCreate"); !st.ok()) {
        return st;
    }
    return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

int CudnnAttention::plans_built() const {
    return static_cast<int>(impl_->forward.size() + impl_->backward.size());
}

double CudnnAttention::build_seconds() const {
    return impl_->build_seconds;
}

absl::StatusOr<size_t> CudnnAttention::forward_workspace_bytes(const GatedAttentionArgs& a) {
    if (absl::Status st = check_args(a); !st.ok()) return st;
    const Shape s = shape_of(a);
    absl::StatusOr<const Graphs*> g = impl_->forward_graph(s);
    if (!g.ok()) return g.status();
    return Ragged::bytes(s) + align256(static_cast<size_t>((*g)->workspace));
}

absl::StatusOr<size_t> CudnnAttention::backward_workspace_bytes(const GatedAttentionArgs& a) {
    if (absl::Status st = check_args(a); !st.ok()) return st;
    const Shape s = shape_of(a);
    absl::StatusOr<const Graphs*> g = impl_->backward_graph(s);
    if (!g.ok()) return g.status();
    return Ragged::bytes(s) + d_o_bytes(a) + align256(static_cast<size_t>((*g)->workspace));
}

absl::Status CudnnAttention::forward(bf16* y, bf16* o, float* lse, const GatedAttentionArgs& a,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (absl::Status st = check_workspace(forward_workspace_bytes(a), workspace_bytes, "forward");
        !st.ok() || a.tokens == 0) {
        return st;
    }
    const Shape s = shape_of(a);
    const Graphs& g = impl_->forward.at(s);
    const Ragged r = Ragged::at(workspace, s);
    if (absl::Status st = fill_ragged(r, a, s, stream); !st.ok()) return st;
    float scale = a.scale;
    std::unordered_map<int64_t, void*> pack = shared_pack(a, r, o, lse, &scale);
    if (absl::Status st = execute(impl_->handle, g, pack,
                                  static_cast<char*>(workspace) + Ragged::bytes(s), stream);
        !st.ok()) {
        return st;
    }
    return cuda_status(
        attention_gate_forward(y, o, {a.gate, a.gate_token_stride, a.gate_head_stride}, a.tokens,
                               a.q_heads, stream),
        "attention_gate_forward");
}

absl::Status CudnnAttention::backward(bf16* dq, bf16* dk, bf16* dv, bf16* dgate, const bf16* dy,
                                      const bf16* o, const float* lse, const GatedAttentionArgs& a,
                                      void* workspace, size_t workspace_bytes,
                                      cudaStream_t stream) {
    if (absl::Status st = check_workspace(backward_workspace_bytes(a), workspace_bytes, "backward");
        !st.ok() || a.tokens == 0) {
        return st;
    }
    const Shape s = shape_of(a);
    const Graphs& g = impl_->backward.at(s);
    const Ragged r = Ragged::at(workspace, s);
    auto* d_o = reinterpret_cast<bf16*>(static_cast<char*>(workspace) + Ragged::bytes(s));
    char* cudnn_ws = reinterpret_cast<char*>(d_o) + d_o_bytes(a);
    if (absl::Status st = fill_ragged(r, a, s, stream); !st.ok()) return st;
    if (absl::Status st =
            cuda_status(attention_gate_backward(d_o, nullptr, dgate, dy, o,
                                                {a.gate, a.gate_token_stride, a.gate_head_stride},
                                                a.tokens, a.q_heads, stream),
                        "attention_gate_backward");
        !st.ok()) {
        return st;
    }
    float scale = a.scale;
    std::unordered_map<int64_t, void*> pack = shared_pack(a, r, o, lse, &scale);
    pack.insert({{kDo, d_o},
                 {kDoOff, r.q_off},
                 {kDq, dq},
                 {kDqOff, r.q_off},
                 {kDk, dk},
                 {kDkOff, r.kv_off},
                 {kDv, dv},
                 {kDvOff, r.kv_off}});
    return execute(impl_->handle, g, pack, cudnn_ws, stream);
}

}  // namespace deltatune
