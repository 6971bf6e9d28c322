// [cuda] The LoRA step on the GPU (`deltatune step --device cuda --adapter`) against the CPU
// reference (itself checked against transformers + peft, parity_test.cc) on the LoRA parity
// fixtures, whose B matrices are non-zero so every adapter gradient is: loss relative error
// < 1e-2, every adapter gradient's cosine > 0.99, gradient norms within 2%, both recompute
// policies; the AdamW step moves every adapter tensor the same way (cosine of the updates > 0.9:
// Adam's first step is close to lr * sign(g), so elements whose gradient is at bf16 rounding
// level may flip). Skips with a printed reason without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/lora.h"
#include "runtime/train/step_runner.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/gpu_test_util.h"

namespace deltatune {
namespace {

using testing::cosine;

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

// Lowest per-tensor cosine of a - base against b - base (base null: of a against b).
double min_cosine(const ParamSet& a, const ParamSet& b, const ParamSet* base, std::string& worst) {
    double lo = 2;
    for (size_t i = 0; i < a.all().size(); ++i) {
        std::vector<float> x(a.all()[i].value.data<float>(),
                             a.all()[i].value.data<float>() + a.all()[i].value.numel());
        std::vector<float> y(b.all()[i].value.data<float>(),
                             b.all()[i].value.data<float>() + b.all()[i].value.numel());
        if (base) {
            const float* z = base->all()[i].value.data<float>();
            for (size_t k = 0; k < x.size(); ++k) x[k] -= z[k], y[k] -= z[k];
        }
        const double c = cosine(x.data(), y.data(), static_cast<int64_t>(x.size()));
        if (c < lo) lo = c, worst = a.all()[i].name;
    }
    return lo;
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
        testing::TempDir tmp;
        StepOptions o;
        o.model_dir = dir;
        o.batch_path = dir + "/batch.json";
        o.adapter_dir = adapter_dir;
        o.adamw = {1e-3, 0.9, 0.999, 1e-8, 0.01};
        o.grads_out = tmp.file("cpu_grads.safetensors");
        o.update_out = tmp.file("cpu_update.safetensors");
        auto cpu = run_step(o);
        REQUIRE(cpu.ok());
        const ParamSet ref = read_adapter(o.grads_out, *adapter, *model, "grad.");
        const ParamSet ref_update = read_adapter(o.update_out, *adapter, *model, "");
        for (const std::string policy : {"none", "layer"}) {
            o.device = "cuda";
            o.recompute = policy;
            o.grads_out = tmp.file("gpu_grads_" + policy + ".safetensors");
            o.update_out = tmp.file("gpu_update_" + policy + ".safetensors");
            auto gpu = run_step(o);
            INFO(name << " recompute=" << policy << ": " << gpu.status().ToString());
            REQUIRE(gpu.ok());
            const ParamSet got = read_adapter(o.grads_out, *adapter, *model, "grad.");
            const ParamSet update = read_adapter(o.update_out, *adapter, *model, "");
            std::string worst, worst_update;
            const double grad_cos = min_cosine(got, ref, nullptr, worst);
            const double update_cos =
                min_cosine(update, ref_update, &adapter->params, worst_update);
            const double rel = std::abs(gpu->loss - cpu->loss) / cpu->loss;
            std::printf(
                "gpu lora %s recompute=%s: loss %.6f vs cpu %.6f (rel %.2e), min adapter grad "
                "cosine %.6f (%s), grad norm %.5f vs %.5f, min update cosine %.4f (%s)\n",
                name.c_str(), policy.c_str(), gpu->loss, cpu->loss, rel, grad_cos, worst.c_str(),
                gpu->grad_norm, cpu->grad_norm, update_cos, worst_update.c_str());
            CHECK(rel < 1e-2);
            CHECK(grad_cos > 0.99);
            CHECK(std::abs(gpu->grad_norm - cpu->grad_norm) < 2e-2 * cpu->grad_norm);
            CHECK(update_cos > 0.9);
            CHECK(gpu->label_tokens == cpu->label_tokens);
        }
    }
}

}  // namespace
}  // namespace deltatune
