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
#include "tests/runtime/model/test_gpus.h"

namespace deltatune {
namespace {

MachineInfo h200() {
    MachineInfo m;
    m.gpu = hopper_gpu_arch();
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
    CHECK(op(r, "gated_delta_rule").implementation == "kernels/gdn/gdn_simple.cu (sm_90a)");
    // The GDN core is not fused: strict fails, naming it, unless allow-listed.
    const absl::Status s = check_strict(r);
    REQUIRE_FALSE(s.ok());
    CHECK(std::string(s.message()).find("gated_delta_rule") != std::string::npos);
    CHECK(std::string(s.message()).find("gated_attention") == std::string::npos);
    CHECK(check_strict(r, gdn_core_ops()).ok());

    c.head_dim = 32;
    r = kernel_registry_for(m, &c);
    CHECK(op(r, "gated_attention").implementation ==
          "kernels/attention/attention_generic.cu (sm_90a)");
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
    CHECK(op(r, "gated_delta_rule").implementation == "kernels/gdn/gdn_simple.cu (sm_90a)");
    CHECK_FALSE(check_strict(r).ok());

    // Each of the chunked kernels' limits sends the whole core to the simple kernels, saying why.
    c.linear_value_head_dim = 128;
    c.linear_conv_kernel_dim = 5;
    r = kernel_registry_for(m, &c);
    CHECK(op(r, "causal_conv1d").implementation == "kernels/gdn/gdn_simple.cu (sm_90a)");
    CHECK(op(r, "gated_rmsnorm").why.find("conv kernel 5") != std::string::npos);
    c.linear_conv_kernel_dim = 4;
    c.linear_num_value_heads = 40;
    r = kernel_registry_for(m, &c);
    CHECK(op(r, "gated_delta_rule").implementation == "kernels/gdn/gdn_simple.cu (sm_90a)");
    CHECK(op(r, "gated_delta_rule").why.find("heads 16/40") != std::string::npos);
}

MachineInfo machine_of(const testing::TestGpu& gpu, AttentionCore core = AttentionCore::kWgmma) {
    MachineInfo m;
    m.gpu = gpu.arch;
    m.gpu_name = gpu.name;
    m.attention_core = core;
    return m;
}

Qwen35Config qwen_27b() {
    auto c = load_qwen35_config(testing::source_path("configs/models/qwen3.8-27b.json"));
    REQUIRE(c.ok());
    return *c;
}

TEST_CASE("registry on a GPU before sm_80: no kernel code, nothing fused", "[registry]") {
    const KernelRegistry r = kernel_registry_for(machine_of(testing::v100()), nullptr);
    CHECK(op(r, "linear").kind == KernelKind::kLibrary);
    CHECK(op(r, "rmsnorm_residual").kind == KernelKind::kSimple);
    CHECK(op(r, "rmsnorm_residual").why == "sm_70: the kernels need sm_80 or newer");
    for (const auto& name : gdn_core_ops()) CHECK(op(r, name).implementation == "none");
    CHECK_FALSE(check_strict(r).ok());
}

TEST_CASE("registry on the 27B: each GPU's best kernels, named with the code that runs",
          "[registry]") {
    const Qwen35Config c = qwen_27b();
    struct Want {
        testing::TestGpu gpu;
        std::string attention, gdn, code;
        bool strict_ok;
    };
    const std::vector<Want> wants = {
        {testing::h200(), "attention_wgmma.cu", "gdn_chunked_rule.cu", "(sm_90a)", true},
        {testing::a100(), "attention_flash.cu", "gdn_chunked_rule.cu", "(sm_80)", true},
        {testing::h100_portable(), "attention_flash.cu", "gdn_chunked_rule.cu",
         "(compute_80 as sm_90)", true},
        {testing::b200(), "attention_flash.cu", "gdn_chunked_rule.cu", "(compute_80 as sm_100)",
         true},
        // 99 KiB of shared memory per block: the flash and chunked kernels do not fit.
        {testing::l40s(), "attention_generic.cu", "gdn_simple.cu", "(sm_80)", false},
        {testing::rtx5090(), "attention_generic.cu", "gdn_simple.cu", "(compute_80 as sm_120)",
         false},
    };
    for (const Want& w : wants) {
        INFO(w.gpu.name);
        const KernelRegistry r = kernel_registry_for(machine_of(w.gpu), &c);
        CHECK(op(r, "gated_attention").implementation.find(w.attention) != std::string::npos);
        CHECK(op(r, "gated_delta_rule").implementation.find(w.gdn) != std::string::npos);
        for (const KernelChoice& k : r.ops) {
            INFO(k.op << ": " << k.implementation);
            if (k.kind != KernelKind::kLibrary)
                CHECK(k.implementation.find(w.code) != std::string::npos);
        }
        CHECK(check_strict(r).ok() == w.strict_ok);
        if (!w.strict_ok) {
            CHECK(op(r, "gated_attention").why.find("this GPU gives 99 KiB") != std::string::npos);
            CHECK(op(r, "gated_delta_rule").why.find("this GPU gives 99 KiB") != std::string::npos);
        }
    }
    // Without the sm_90a code, the wgmma core asked for is the portable flash kernel, saying so.
    const KernelRegistry a100 = kernel_registry_for(machine_of(testing::a100()), &c);
    CHECK(op(a100, "gated_attention").why.find("needs the sm_90a code") != std::string::npos);
    CHECK(op(a100, "gated_delta_rule").why.find("mma.sync") != std::string::npos);
    // cuDNN's attention where asked for, on any GPU with kernel code.
    const KernelRegistry cudnn =
        kernel_registry_for(machine_of(testing::l40s(), AttentionCore::kCudnn), &c);
    CHECK(op(cudnn, "gated_attention").kind == KernelKind::kLibrary);
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
        std::vector<testing::TestGpu> gpus = testing::test_gpus();
        gpus.push_back({"none", GpuArch{}});
        for (const testing::TestGpu& gpu : gpus) {
            for (const AttentionCore core :
                 {AttentionCore::kWgmma, AttentionCore::kCudnn, AttentionCore::kFlash}) {
                const MachineInfo m = machine_of(gpu, core);
                const KernelRegistry r = kernel_registry_for(m, c ? &*c : nullptr);
                REQUIRE(r.ops.size() == 14);
                for (const KernelChoice& k : r.ops) {
                    INFO(k.op << " on " << gpu.name << ": " << k.implementation);
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
