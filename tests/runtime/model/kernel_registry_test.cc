// The kernel registry and strict-mode validation, on synthetic machines (no GPU needed).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "runtime/device/device_context.h"
#include "runtime/model/kernel_registry.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

MachineInfo h200() {
    MachineInfo m;
    m.sm_version = 90;
    m.gpu_name = "NVIDIA H200";
    m.attention_core = attention_core_from_env().value_or(AttentionCore::kWgmma);  // as probed
    return m;
}

const KernelChoice& op(const KernelRegistry& r, const std::string& name) {
    for (const auto& k : r.ops)
        if (k.op == name) return k;
    FAIL("no op " << name);
    return r.ops.front();
}

TEST_CASE("registry on a machine without a GPU: CPU references, strict mode fails", "[registry]") {
    MachineInfo m;
    m.why_no_gpu = "no CUDA device present";
    const KernelRegistry r = kernel_registry_for(m, nullptr);
    CHECK(r.device == "cpu");
    CHECK(op(r, "gated_attention").kind == KernelKind::kCpuReference);
    CHECK(op(r, "gated_delta_rule").why.find("no CUDA device") != std::string::npos);
    const absl::Status s = check_strict(r);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(s.message()).find("fused_linear_cross_entropy") != std::string::npos);
}

TEST_CASE("registry on an H200: fused everywhere but the GDN core and small head dims",
          "[registry]") {
    const MachineInfo m = h200();
    Qwen35Config c;
    c.head_dim = 256;
    KernelRegistry r = kernel_registry_for(m, &c);
    // A library call only where DELTATUNE_ATTENTION=cudnn asks for cuDNN's.
    CHECK(op(r, "gated_attention").kind ==
          (m.attention_core == AttentionCore::kCudnn ? KernelKind::kLibrary : KernelKind::kFused));
    CHECK(op(r, "linear").kind == KernelKind::kLibrary);
    CHECK(op(r, "gated_delta_rule").kind == KernelKind::kSimple);
    CHECK(op(r, "gated_delta_rule").implementation == "kernels/gdn/gdn_simple.cu");
    // The GDN core is not fused: strict fails, naming it, unless allow-listed.
    const absl::Status s = check_strict(r);
    REQUIRE_FALSE(s.ok());
    CHECK(std::string(s.message()).find("gated_delta_rule") != std::string::npos);
    CHECK(std::string(s.message()).find("gated_attention") == std::string::npos);
    CHECK(check_strict(r, gdn_core_ops()).ok());

    c.head_dim = 32;
    r = kernel_registry_for(m, &c);
    CHECK(op(r, "gated_attention").implementation == "kernels/attention/attention_generic.cu");
    CHECK_FALSE(check_strict(r, gdn_core_ops()).ok());
    CHECK(format_registry(r).find("head_dim 32") != std::string::npos);
    CHECK(format_registry(r).find("linear head dims 0/0") != std::string::npos);
}

TEST_CASE("registry: the wgmma kernels by default, cuDNN's or the handwritten kernels if asked",
          "[registry]") {
    Qwen35Config c;
    c.head_dim = 256;
    {
        const testing::ScopedEnv unset("DELTATUNE_ATTENTION", nullptr);
        const MachineInfo m = h200();
        const KernelChoice k = op(kernel_registry_for(m, &c), "gated_attention");
        CHECK(m.attention_core == AttentionCore::kWgmma);
        CHECK(k.implementation.find("kernels/attention/attention_wgmma.cu forward") == 0);
        CHECK(k.implementation.find("kernels/attention/attention_wgmma_backward.cu") !=
              std::string::npos);
        CHECK(k.kind == KernelKind::kFused);
    }
#if DELTATUNE_HAVE_CUDNN_ATTENTION
    {
        const testing::ScopedEnv asked("DELTATUNE_ATTENTION", "cudnn");
        const MachineInfo m = h200();
        const KernelChoice k = op(kernel_registry_for(m, &c), "gated_attention");
        CHECK(m.attention_core == AttentionCore::kCudnn);
        CHECK(k.kind == KernelKind::kLibrary);
        CHECK(k.implementation.find("cuDNN fused flash attention") == 0);
    }
#endif
    const testing::ScopedEnv asked("DELTATUNE_ATTENTION", "flash");
    const MachineInfo m = h200();
    const KernelChoice flash = op(kernel_registry_for(m, &c), "gated_attention");
    CHECK(m.attention_core == AttentionCore::kFlash);
    CHECK(flash.kind == KernelKind::kFused);
    CHECK(flash.implementation == "kernels/attention/attention_flash.cu (sm_90a)");
}

TEST_CASE("registry on an H200: fused GDN core for linear head dims 128", "[registry]") {
    const MachineInfo m = h200();
    Qwen35Config c;
    c.head_dim = 256;
    c.linear_num_key_heads = 16;
    c.linear_num_value_heads = 48;
    c.linear_key_head_dim = 128;
    c.linear_value_head_dim = 128;
    c.linear_conv_kernel_dim = 4;
    KernelRegistry r = kernel_registry_for(m, &c);
    for (const auto& name : gdn_core_ops()) CHECK(op(r, name).kind == KernelKind::kFused);
    CHECK(op(r, "gated_delta_rule").implementation == "kernels/gdn/gdn_chunked_rule.cu (sm_90a)");
    CHECK(op(r, "causal_conv1d").implementation == "kernels/gdn/causal_conv1d.cu (sm_90a)");
    CHECK(op(r, "gated_rmsnorm").implementation == "kernels/norm/gated_rmsnorm.cu (sm_90a)");
    CHECK(check_strict(r).ok());

    c.linear_value_head_dim = 64;
    r = kernel_registry_for(m, &c);
    CHECK(op(r, "gated_delta_rule").kind == KernelKind::kSimple);
    CHECK(op(r, "gated_delta_rule").implementation == "kernels/gdn/gdn_simple.cu");
    CHECK_FALSE(check_strict(r).ok());

    // Each of the chunked kernels' limits sends the whole core to the simple kernels, saying why.
    c.linear_value_head_dim = 128;
    c.linear_conv_kernel_dim = 5;
    r = kernel_registry_for(m, &c);
    CHECK(op(r, "causal_conv1d").implementation == "kernels/gdn/gdn_simple.cu");
    CHECK(op(r, "gated_rmsnorm").why.find("conv kernel 5") != std::string::npos);
    c.linear_conv_kernel_dim = 4;
    c.linear_num_value_heads = 40;
    r = kernel_registry_for(m, &c);
    CHECK(op(r, "gated_delta_rule").implementation == "kernels/gdn/gdn_simple.cu");
    CHECK(op(r, "gated_delta_rule").why.find("heads 16/40") != std::string::npos);
}

TEST_CASE("registry on a non-Hopper GPU: nothing fused", "[registry]") {
    MachineInfo m;
    m.sm_version = 80;
    m.gpu_name = "A100";
    const KernelRegistry r = kernel_registry_for(m, nullptr);
    CHECK(op(r, "linear").kind == KernelKind::kLibrary);
    CHECK(op(r, "rmsnorm_residual").kind == KernelKind::kSimple);
    CHECK(op(r, "rmsnorm_residual").why.find("sm_80") != std::string::npos);
    for (const auto& name : gdn_core_ops()) CHECK(op(r, name).implementation == "none");
}

// The files a report line names (its implementation may name several, or a library plus one).
std::vector<std::string> named_files(const std::string& implementation) {
    static const std::regex file(R"((kernels|runtime)/[A-Za-z0-9_/]+\.(cu|cc|h|cuh))");
    std::vector<std::string> out;
    for (auto it = std::sregex_iterator(implementation.begin(), implementation.end(), file);
         it != std::sregex_iterator(); ++it)
        out.push_back(it->str());
    return out;
}

TEST_CASE("registry for every shipped config, GPU and attention core: the files it names exist",
          "[registry]") {
    std::vector<std::optional<Qwen35Config>> configs = {std::nullopt};
    for (const auto& e :
         std::filesystem::directory_iterator(testing::source_path("configs/models"))) {
        auto c = load_qwen35_config(e.path().string());
        REQUIRE(c.ok());
        configs.emplace_back(*c);
    }
    for (const auto& c : configs) {
        for (const int sm : {0, 80, 90}) {
            for (const AttentionCore core :
                 {AttentionCore::kWgmma, AttentionCore::kCudnn, AttentionCore::kFlash}) {
                MachineInfo m;
                m.sm_version = sm;
                m.attention_core = core;
                const KernelRegistry r = kernel_registry_for(m, c ? &*c : nullptr);
                REQUIRE(r.ops.size() == 14);
                for (const KernelChoice& k : r.ops) {
                    INFO(k.op << " on sm " << sm << ": " << k.implementation);
                    CHECK_FALSE(k.why.empty());
                    if (k.implementation == "none") continue;
                    const std::vector<std::string> files = named_files(k.implementation);
                    CHECK_FALSE(files.empty());
                    for (const std::string& f : files)
                        CHECK(std::filesystem::exists(testing::source_path(f)));
                }
            }
        }
    }
}

}  // namespace
}  // namespace deltatune
