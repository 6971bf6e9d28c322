// The memory planner: parameter counts of the published widths (benchmark.md's 27B-slice has
// 5.59 B), and fit decisions for the full Qwen3.8-27B on H200s (141 GiB): 1 and 2 GPUs cannot
// hold its fp32 optimizer state, 4 can (benchmark.md's memory target).
#include <catch2/catch.hpp>

#include "kernels/attention.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/train/memory_plan.h"

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

TEST_CASE("parameter count of the 27B-slice is benchmark.md's 5.59 B", "[memory_plan]") {
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

TEST_CASE("recompute per layer saves activation memory", "[memory_plan]") {
    MemoryPlanInput in;
    in.recompute = RecomputePolicy::kNone;
    const int64_t none = plan_memory(qwen_27b(8), in).peak_bytes;
    in.recompute = RecomputePolicy::kLayer;
    const int64_t layer = plan_memory(qwen_27b(8), in).peak_bytes;
    CHECK(layer < none);
    CHECK(parse_recompute_policy("sometimes").status().code() ==
          absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the automatic policy skips recomputation where it fits", "[memory_plan]") {
    MemoryPlanInput in;
    in.tokens_per_batch = 8192;
    // The 27B-slice on one H200 has room for every layer's activations; the full 27B on 4 does
    // not (its optimizer state takes most of each GPU), so it recomputes per layer.
    CHECK(choose_recompute(qwen_27b(8), in, kH200) == RecomputePolicy::kNone);
    in.world_size = 4;
    CHECK(choose_recompute(qwen_27b(64), in, kH200) == RecomputePolicy::kLayer);
    in.recompute = RecomputePolicy::kNone;
    CHECK_FALSE(check_fits(qwen_27b(64), in, kH200).ok());
    WARN("27B-slice, no recompute: "
         << plan_memory(qwen_27b(8), MemoryPlanInput{1, 8192, RecomputePolicy::kNone, 1024})
                .describe());
}

TEST_CASE("a layer's backward phase holds the attention kernels' workspace", "[memory_plan]") {
    // A small vocabulary, so that the layer phase is the larger one and the plan describes it.
    Qwen35Config c = qwen_27b(8);
    c.vocab_size = 1024;
    MemoryPlanInput in;
    in.tokens_per_batch = 8192;
    in.recompute = RecomputePolicy::kNone;
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

TEST_CASE("recompute names resolve to the GPU model's policy", "[memory_plan]") {
    const MemoryPlanInput in;
    CHECK(*resolve_recompute("layer", qwen_27b(8), in) == Recompute::kLayer);
    CHECK(*resolve_recompute("none", qwen_27b(8), in) == Recompute::kNone);
    CHECK(resolve_recompute("sometimes", qwen_27b(8), in).status().code() ==
          absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deltatune
