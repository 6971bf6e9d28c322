// The kernel choices against what else asks them: the GPU blocks and the memory planner must
// answer as the report does, and the choices' config-level shape checks must be the kernels' own
// *_supported (which exist in CUDA builds only). No GPU needed.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/model/gpu_blocks.h"
#include "runtime/model/kernel_choice.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/test_gpus.h"
#if DELTATUNE_HAVE_CUDA
#include "kernels/attention/attention.h"
#include "kernels/gdn/causal_conv1d.h"
#include "kernels/gdn/gdn_chunked_rule.h"
#include "kernels/norm/gated_rmsnorm.h"
#endif

namespace deltatune {
namespace {

constexpr AttentionCore kCores[] = {AttentionCore::kWgmma, AttentionCore::kCudnn,
                                    AttentionCore::kFlash};

std::vector<Qwen35Config> shipped_configs() {
    std::vector<Qwen35Config> out;
    for (const auto& e :
         std::filesystem::directory_iterator(testing::source_path("configs/models"))) {
        auto c = load_qwen35_config(e.path().string());
        REQUIRE(c.ok());
        out.push_back(*c);
    }
    REQUIRE_FALSE(out.empty());
    return out;
}

std::string reported(const KernelTarget& t, const std::string& name) {
    for (const KernelChoice& k : gpu_kernel_choices(t))
        if (k.op == name) return k.implementation;
    FAIL("no op " << name);
    return "";
}

TEST_CASE("kernel choice: the memory planner keeps y alone exactly where the wgmma core runs",
          "[registry]") {
    for (const Qwen35Config& c : shipped_configs()) {
        for (const testing::TestGpu& gpu : testing::test_gpus()) {
            if (gpu.arch.code_arch == 0) continue;
            for (const AttentionCore core : kCores) {
                const bool wgmma =
                    reported({gpu.arch, core, &c}, "gated_attention").find("attention_wgmma.cu") !=
                    std::string::npos;
                CHECK(gpu_attention_keeps_y_only(c, gpu.arch, core) == wgmma);
            }
        }
    }
}

TEST_CASE("kernel choice: the GDN core's ops are decided together", "[registry]") {
    for (const Qwen35Config& c : shipped_configs()) {
        for (const testing::TestGpu& gpu : testing::test_gpus()) {
            if (gpu.arch.code_arch == 0) continue;
            INFO(gpu.name);
            const ImplChoice core = choose_gdn_core({gpu.arch, AttentionCore::kWgmma, &c});
            for (const std::string& name : gdn_core_ops()) {
                const std::string impl = reported({gpu.arch, AttentionCore::kWgmma, &c}, name);
                CHECK((impl.rfind("kernels/gdn/gdn_simple.cu", 0) == 0) ==
                      (core.impl == KernelImpl::kGdnSimple));
            }
        }
    }
}

#if DELTATUNE_HAVE_CUDA
TEST_CASE("kernel choice: the GDN block runs the core the report names", "[registry]") {
    for (const Qwen35Config& c : shipped_configs()) {
        for (const testing::TestGpu& gpu : testing::test_gpus()) {
            const bool chunked = reported({gpu.arch, AttentionCore::kWgmma, &c}, "gated_delta_rule")
                                     .rfind("kernels/gdn/gdn_chunked_rule.cu (", 0) == 0;
            CHECK(gpu_gdn_fused(c, gpu.arch) == chunked);
        }
    }
}

TEST_CASE("kernel choice: the GDN core's shape check is the chunked kernels' own", "[registry]") {
    Qwen35Config c;
    for (const int64_t dk : {64, 128, 256})
        for (const int64_t dv : {64, 128, 192})
            for (const int64_t hk : {0, 1, 16})
                for (const int64_t hv : {0, 16, 40, 48, 65536})
                    for (const int64_t kernel : {0, 1, 4, 5}) {
                        c.linear_key_head_dim = dk;
                        c.linear_value_head_dim = dv;
                        c.linear_num_key_heads = hk;
                        c.linear_num_value_heads = hv;
                        c.linear_conv_kernel_dim = kernel;
                        const bool kernels = gated_delta_rule_supported(0, hk, hv, dk, dv) &&
                                             causal_conv1d_supported(0, c.conv_dim(), kernel) &&
                                             gated_rmsnorm_supported(0, dv);
                        INFO(dk << "/" << dv << " heads " << hk << "/" << hv << " conv " << kernel);
                        CHECK(
                            (choose_gdn_core({hopper_gpu_arch(), AttentionCore::kWgmma, &c}).impl ==
                             KernelImpl::kGdnChunked) == kernels);
                    }
}

TEST_CASE("kernel choice: attention's head_dim check is the fused cores' own", "[registry]") {
    alignas(16) static const unsigned char buffer[64] = {};
    const auto* any = reinterpret_cast<const __nv_bfloat16*>(buffer);
    Qwen35Config c;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    for (const int64_t d : {16, 24, 32, 64, 128, 256, 512}) {
        c.head_dim = d;
        GatedAttentionArgs a;  // a well-formed batch of the config's shape
        a.q = a.k = a.v = a.gate = any;
        a.cu_seqlens = reinterpret_cast<const int32_t*>(buffer);
        a.num_docs = 1;
        a.q_heads = c.num_attention_heads;
        a.kv_heads = c.num_key_value_heads;
        a.head_dim = d;
        a.gate_token_stride = a.q_heads * 2 * d;
        a.gate_head_stride = 2 * d;
        a.scale = 1.0f / std::sqrt(static_cast<float>(d));
        INFO("head_dim " << d);
        CHECK((choose_attention({hopper_gpu_arch(), AttentionCore::kWgmma, &c}).impl !=
               KernelImpl::kAttentionGeneric) == gated_attention_supported(a));
    }
}
#endif

TEST_CASE("kernel choice: the projections that run in FP8, by GPU and shape", "[registry]") {
    auto big = load_qwen35_config(testing::source_path("configs/models/qwen3.8-27b.json"));
    REQUIRE(big.ok());
    const std::vector<std::string> all = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                          "gate_proj", "up_proj", "down_proj", "in_proj_qkv",
                                          "in_proj_z", "out_proj"};
    CHECK(fp8_projection_modules(*big, testing::h200().arch) == all);
    // Per-row FP8 scales are cuBLASLt's on Hopper only.
    for (const testing::TestGpu& other : {testing::a100(), testing::l40s(), testing::b200()}) {
        INFO(other.name);
        CHECK(fp8_projection_modules(*big, other.arch).empty());
    }
    // tiny-b: the GDN's widths (168 and 120) are not multiples of 16, so those stay bf16.
    auto tiny =
        load_qwen35_config(testing::source_path("tests/fixtures/parity/tiny-b/config.json"));
    REQUIRE(tiny.ok());
    CHECK(fp8_projection_modules(*tiny, testing::h200().arch) ==
          std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                   "down_proj"});
}

}  // namespace
}  // namespace deltatune
