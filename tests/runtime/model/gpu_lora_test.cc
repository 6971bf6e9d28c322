// [cuda] The LoRA step on the GPU (`deltatune step --device cuda --adapter`) against the CPU
// reference (itself checked against transformers + peft, parity_test.cc) on the LoRA parity
// fixtures, whose B matrices are non-zero so every adapter gradient is: loss relative error
// < 1e-2 and every adapter gradient's cosine > 0.99 or, where rounding the base to bf16 moves
// the fp32 reference itself further, within 0.05 of that floor (gpu_noise_floor.h), both
// recompute policies; the update is AdamW's on the GPU's own gradients to fp32 rounding.
// Skips with a printed reason without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/lora.h"
#include "runtime/optim/adamw.h"
#include "runtime/train/step_runner.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/gpu_noise_floor.h"
#include "tests/runtime/model/gpu_test_util.h"

namespace deltatune {
namespace {

// The adapter tensors of a --grads-out / --update-out file (PEFT's names, `prefix` first).
ParamSet read_adapter(const std::string& path, const PeftAdapter& like, const HfModel& model,
                      const std::string& prefix) {
    auto f = SafetensorsFile::open(path);
    REQUIRE(f.ok());
    ParamSet out = like.params.zeros_like();
    for (auto& p : out.all()) {
        auto t = f->get(prefix + peft_name(p.name, model.layout));
        INFO(p.name);
        REQUIRE(t.ok());
        REQUIRE(t->numel() == p.value.numel());
        std::copy(t->data<float>(), t->data<float>() + t->numel(), p.value.data<float>());
    }
    return out;
}

double l2_norm(const Tensor& t) {
    double s = 0;
    for (int64_t i = 0; i < t.numel(); ++i) s += double(t.data<float>()[i]) * t.data<float>()[i];
    return std::sqrt(s);
}

double largest_norm(const ParamSet& set) {
    double m = 0;
    for (const auto& p : set.all()) m = std::max(m, l2_norm(p.value));
    return m;
}

TEST_CASE("the LoRA step on the GPU matches the CPU reference on the LoRA fixtures",
          "[cuda][lora]") {
    if (!testing::have_gpu()) return;
    for (const std::string name : {"tiny-a", "tiny-b", "tiny-c"}) {
        const std::string dir = testing::source_path("tests/fixtures/parity/" + name);
        const std::string adapter_dir = testing::source_path("tests/fixtures/parity/lora/" + name);
        auto model = load_hf_model(dir);
        REQUIRE(model.ok());
        auto adapter = load_peft_adapter(adapter_dir, *model);
        REQUIRE(adapter.ok());
        const auto read = [&](const std::string& f) {
            return read_adapter(f, *adapter, *model, "grad.");
        };
        testing::TempDir tmp;
        StepOptions o;
        o.model_dir = dir;
        o.batch_path = dir + "/batch.json";
        o.adapter_dir = adapter_dir;
        o.adamw = {1e-3, 0.9, 0.999, 1e-8, 0.01};
        o.grads_out = tmp.file("cpu_grads.safetensors");
        auto cpu = run_step(o);
        REQUIRE(cpu.ok());
        const ParamSet ref = read(o.grads_out);
        const testing::NoiseFloor floor =
            testing::bf16_noise_floor(dir, o, ref, cpu->grad_norm, read);
        for (const std::string policy : {"none", "layer"}) {
            o.device = "cuda";
            o.recompute = policy;
            o.grads_out = tmp.file("gpu_grads_" + policy + ".safetensors");
            o.update_out = tmp.file("gpu_update_" + policy + ".safetensors");
            auto gpu = run_step(o);
            INFO(name << " recompute=" << policy << ": " << gpu.status().ToString());
            REQUIRE(gpu.ok());
            const ParamSet got = read(o.grads_out);
            const std::vector<double> cs = testing::cosines(got, ref);
            int below = 0;
            size_t worst = 0;
            for (size_t i = 0; i < cs.size(); ++i) {
                if (cs[i] < cs[worst]) worst = i;
                const double need = std::min(0.99, floor.min_cos[i] - 0.05);
                if (cs[i] <= need) {
                    ++below;
                    std::printf("  %s: cosine %.4f <= %.4f, |g_ref| %.3e of the largest %.3e\n",
                                got.all()[i].name.c_str(), cs[i], need, l2_norm(ref.all()[i].value),
                                largest_norm(ref));
                }
            }
            // The update: AdamW from fresh moments on the GPU's own gradients.
            ParamSet expect = adapter->params.clone();
            AdamWState state = make_adamw_state(expect);
            adamw_update(expect, got, state, o.adamw);
            const ParamSet update = read_adapter(o.update_out, *adapter, *model, "");
            const double update_err = testing::param_rel_diff(update, expect);
            const double rel = std::abs(gpu->loss - cpu->loss) / cpu->loss;
            std::printf(
                "gpu lora %s recompute=%s: loss %.6f vs cpu %.6f (rel %.2e), min adapter grad "
                "cosine %.6f (%s; bf16 floor %.6f), grad norm %.5f vs %.5f (floor moves %.2e), "
                "update vs AdamW on its gradients %.2e\n",
                name.c_str(), policy.c_str(), gpu->loss, cpu->loss, rel, cs[worst],
                got.all()[worst].name.c_str(), floor.min_cos[worst], gpu->grad_norm, cpu->grad_norm,
                floor.grad_norm_rel, update_err);
            CHECK(rel < 1e-2);
            CHECK(below == 0);
            CHECK(std::abs(gpu->grad_norm - cpu->grad_norm) <
                  std::max(2e-2, 3 * floor.grad_norm_rel) * cpu->grad_norm);
            CHECK(update_err < 1e-5);
            CHECK(gpu->label_tokens == cpu->label_tokens);
        }
    }
}

}  // namespace
}  // namespace deltatune
