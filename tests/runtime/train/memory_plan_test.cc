// The memory planner: parameter counts of the published widths (the 27B-slice has
// 5.59 B), and fit decisions for the full Qwen3.8-27B on H200s (141 GiB): 1 and 2 GPUs cannot
// hold its fp32 optimizer state, 4 can (the memory target).
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "kernels/attention/attention.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/train/memory_plan.h"
#if DELTATUNE_HAVE_CUDA
#include "kernels/attention/attention_wgmma.h"
#endif

namespace deltatune {
namespace {

Qwen35Config qwen_27b(int layers) {
    Qwen35Config c;
    c.vocab_size = 248320;
    c.hidden_size = 5120;
    c.intermediate_size = 17408;
    c.num_attention_heads = 24;
    c.num_key_value_heads = 4;
    c.head_dim = 256;
    c.linear_num_key_heads = 16;
    c.linear_num_value_heads = 48;
    c.linear_key_head_dim = 128;
    c.linear_value_head_dim = 128;
    c.linear_conv_kernel_dim = 4;
    c.tie_word_embeddings = false;
    c.num_layers = layers;
    for (int l = 0; l < layers; ++l) {
        c.layer_types.push_back(l % 4 == 3 ? LayerType::kFullAttention
                                           : LayerType::kLinearAttention);
    }
    return c;
}

constexpr int64_t kH200 = int64_t{141} << 30;

TEST_CASE("parameter count of the 27B-slice is 5.59 B", "[memory_plan]") {
    const int64_t n = count_parameters(qwen_27b(8));
    CHECK(n > 5.585e9);
    CHECK(n < 5.595e9);
    const int64_t full = count_parameters(qwen_27b(64));
    CHECK(full > 26e9);
    CHECK(full < 28e9);
}

TEST_CASE("the full 27B fits 4 H200s but not 1 or 2, with numbers in the refusal",
          "[memory_plan]") {
    const Qwen35Config c = qwen_27b(64);
    MemoryPlanInput in;
    in.tokens_per_batch = 8192;
    in.world_size = 1;
    const absl::Status one = check_fits(c, in, kH200);
    REQUIRE(one.code() == absl::StatusCode::kResourceExhausted);
    CHECK(one.message().find("MEMORY_PLAN") != std::string_view::npos);
    CHECK(one.message().find("fp32 master weights + AdamW moments") != std::string_view::npos);
    CHECK(one.message().find("it fits from 4 GPUs") != std::string_view::npos);
    in.world_size = 2;
    CHECK(check_fits(c, in, kH200).code() == absl::StatusCode::kResourceExhausted);
    in.world_size = 4;
    CHECK(check_fits(c, in, kH200).ok());
    WARN(plan_memory(c, in).describe());
}

TEST_CASE("LoRA on the frozen bf16 base fits the full 27B on one H200", "[memory_plan][lora]") {
    const Qwen35Config c = qwen_27b(64);
    LoraSpec spec;
    spec.rank = 16;
    for (size_t i = 0; i < kNumProj; ++i) spec.targets.push_back(static_cast<Proj>(i));
    // Per layer rank * (in + out): MLP 3 * (5120 + 17408); GDN qkv 5120 + 10240, z 5120 + 6144,
    // a and b 5120 + 48 each, out 6144 + 5120; attention q 5120 + 12288, k and v 5120 + 1024
    // each, o 6144 + 5120. 48 GDN and 16 attention layers.
    CHECK(count_lora_parameters(c, spec) == 16 * (64 * 67584 + 48 * 48224 + 16 * 40960));
    MemoryPlanInput in;
    in.tokens_per_batch = 8192;
    in.world_size = 1;
    in.adapter_parameters = count_lora_parameters(c, spec);
    CHECK(choose_recompute(c, in, kH200) == Recompute::kLayer);
    in.recompute = Recompute::kLayer;
    REQUIRE(check_fits(c, in, kH200).ok());
    const MemoryPlan plan = plan_memory(c, in);
    CHECK(plan.describe().find("bf16 frozen base") != std::string::npos);
    CHECK(plan.describe().find("fp32 master weights") == std::string::npos);
    // With the room left, the last layers keep their activations instead of recomputing.
    const int64_t kept = choose_kept_layers(c, in, kH200);
    CHECK(kept > 8);
    CHECK(kept < 64);
    MemoryPlanInput more = in;
    more.kept_layers = kept;
    CHECK(check_fits(c, more, kH200).ok());
    more.kept_layers = kept + 1;
    CHECK_FALSE(check_fits(c, more, kH200).ok());
    WARN("LoRA 27B on one H200: the last " << kept << " of 64 layers keep their activations");
    // The base in bf16 is most of it: 2 bytes a parameter.
    CHECK(plan.peak_bytes < 2 * count_parameters(c) + 60 * (int64_t{1} << 30));
    WARN(plan.describe());
}

TEST_CASE("recompute per layer saves activation memory", "[memory_plan]") {
    MemoryPlanInput in;
    in.recompute = Recompute::kNone;
    const int64_t none = plan_memory(qwen_27b(8), in).peak_bytes;
    in.recompute = Recompute::kLayer;
    const int64_t layer = plan_memory(qwen_27b(8), in).peak_bytes;
    CHECK(layer < none);
    CHECK(parse_recompute("sometimes").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the automatic policy skips recomputation where it fits", "[memory_plan]") {
    MemoryPlanInput in;
    in.tokens_per_batch = 8192;
    // The 27B-slice on one H200 has room for every layer's activations; the full 27B on 4 does
    // not (its optimizer state takes most of each GPU), so it recomputes per layer.
    CHECK(choose_recompute(qwen_27b(8), in, kH200) == Recompute::kNone);
    in.world_size = 4;
    CHECK(choose_recompute(qwen_27b(64), in, kH200) == Recompute::kLayer);
    in.recompute = Recompute::kNone;
    CHECK_FALSE(check_fits(qwen_27b(64), in, kH200).ok());
    WARN("27B-slice, no recompute: "
         << plan_memory(qwen_27b(8), MemoryPlanInput{1, 8192, Recompute::kNone, 1024}).describe());
}

TEST_CASE("a layer's backward phase holds the attention kernels' workspace", "[memory_plan]") {
    // A small vocabulary, so that the layer phase is the larger one and the plan describes it.
    Qwen35Config c = qwen_27b(8);
    c.vocab_size = 1024;
    MemoryPlanInput in;
    in.tokens_per_batch = 8192;
    in.recompute = Recompute::kNone;
    const MemoryPlan with = plan_memory(c, in);
    // d_o (96 MiB) and delta, and the dS tiles at their budget: a batch of 8192 tokens can need
    // more (many documents and one long one) than the 4 GiB past which dQ's sums serve.
    CHECK(with.describe().find("attention workspace 4.1 GiB") != std::string::npos);
    // 1024 tokens: at most (16 + 1024) x 17 / 2 tile pairs, under the budget.
    in.tokens_per_batch = 1024;
    CHECK(plan_memory(c, in).describe().find("attention workspace 1.6 GiB") != std::string::npos);
    // The bound saturates instead of wrapping for absurd sizes.
    CHECK(attention_ds_tile_bound(int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40, 64) ==
          size_t{1} << 62);
    // One document of 8192 tokens, 24 heads: (128 + 1) x 129 / 2 rounded up = 8321 tile pairs
    // of 8 KiB, at least the 128 x 129 / 2 = 8256 there are.
    CHECK(attention_ds_tile_bound(8192, 1, 8192, 24) == size_t{8321} * 24 * 8192);
}

TEST_CASE("FP8 projections add their quantised operands to the layer phase", "[memory_plan]") {
    Qwen35Config c = qwen_27b(8);
    c.vocab_size = 1024;  // the layer phase is the larger one
    MemoryPlanInput in;
    in.tokens_per_batch = 8192;
    const MemoryPlan bf16 = plan_memory(c, in);
    in.fp8_projections = true;
    const MemoryPlan fp8 = plan_memory(c, in);
    // The MLP's activation and gradient (8192 x (5120 + 17408) bytes) and its weight (5120 x
    // 17408 bytes): 0.26 GiB.
    CHECK(fp8.peak_bytes - bf16.peak_bytes ==
          int64_t{8192} * (5120 + 17408) + int64_t{5120} * 17408);
    CHECK(fp8.describe().find("FP8 operands 0.3 GiB") != std::string::npos);
    CHECK(bf16.describe().find("FP8") == std::string::npos);
}

#if DELTATUNE_HAVE_CUDA
// The plan reserves the kernels' own bound (host code: no GPU needed), which must cover the
// workspace of every batch the kernels can be given: one long document, all one-token ones, one
// long document among one-token ones (the most dS tiles under the budget), even splits.
TEST_CASE("the planner's attention workspace covers every batch's", "[memory_plan]") {
    for (const int64_t T : {1, 63, 1000, 8192, 20000}) {
        const size_t bound = attention_backward_workspace_bound(T, 24);
        std::vector<std::vector<int64_t>> batches = {{T}, std::vector<int64_t>(T, 1)};
        for (const int64_t d : {T / 2, T / 64, T / 512}) {
            if (d < 1 || d >= T) continue;
            std::vector<int64_t> one_long(d, 1);
            one_long.push_back(T - d);
            batches.push_back(one_long);
            std::vector<int64_t> even(d, T / d);
            even.back() += T - (T / d) * d;
            batches.push_back(even);
        }
        for (const auto& docs : batches) {
            GatedAttentionArgs a;
            a.tokens = T;
            a.num_docs = static_cast<int64_t>(docs.size());
            a.q_heads = 24, a.kv_heads = 4, a.head_dim = 256;
            for (const int64_t max_doc :
                 {*std::max_element(docs.begin(), docs.end()), int64_t{0}}) {
                a.max_doc_tokens = max_doc;
                INFO("T = " << T << ", " << docs.size() << " documents, max_doc_tokens "
                            << max_doc);
                CHECK(gated_attention_backward_wgmma_workspace_bytes(a) <= bound);
            }
        }
    }
}
#endif

TEST_CASE("recompute names resolve to the GPU model's policy", "[memory_plan]") {
    const MemoryPlanInput in;
    CHECK(*resolve_recompute("layer", qwen_27b(8), in) == Recompute::kLayer);
    CHECK(*resolve_recompute("none", qwen_27b(8), in) == Recompute::kNone);
    CHECK(resolve_recompute("sometimes", qwen_27b(8), in).status().code() ==
          absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deltatune
