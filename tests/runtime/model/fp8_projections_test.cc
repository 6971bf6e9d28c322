// FP8 projections (Qwen35GpuModel::set_fp8_projections) against the bf16 step on the same
// weights and batch: the loss within 2% and every parameter's gradient at cosine >= 0.99 (the
// issue's bar), the worst printed; on tiny-a (every projection FP8-shaped), tiny-b (some: widths
// not multiples of 16 stay bf16) and a wider config from tiny-a (hidden 256) with longer
// documents. Also: the switch off gives the bf16 step's bits. [cuda]: skipped with a printed
// reason without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include "runtime/device/device_context.h"
#include "runtime/device/linear_fp8.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/model/qwen35_params.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/gpu_test_util.h"

namespace deltatune {
namespace {

struct StepResult {
    double loss = 0;
    ParamSet grads;
};

StepResult run_step(DeviceContext& dev, const Qwen35Config& config, ParamSet& params,
                    const PackedBatch& batch, bool fp8) {
    auto gpu = Qwen35GpuModel::create(dev, config, params, Recompute::kNone);
    REQUIRE(gpu.ok());
    (*gpu)->set_fp8_projections(fp8);
    auto l = (*gpu)->forward(batch);
    REQUIRE(l.ok());
    REQUIRE((*gpu)->backward().ok());
    StepResult r{l->loss, params.zeros_like()};
    REQUIRE((*gpu)->download_grads(r.grads).ok());
    return r;
}

// The smallest per-parameter gradient cosine of `got` against `ref`, and which parameter.
std::pair<double, std::string> worst_cosine(const ParamSet& got, const ParamSet& ref) {
    std::pair<double, std::string> worst{2.0, ""};
    for (size_t i = 0; i < got.all().size(); ++i) {
        const auto& p = got.all()[i];
        const double c = testing::cosine(p.value.data<float>(), ref.all()[i].value.data<float>(),
                                         p.value.numel());
        if (c < worst.first) worst = {c, p.name};
    }
    return worst;
}

TEST_CASE("FP8 projections: loss and every gradient against the bf16 step", "[cuda]") {
    if (!testing::have_gpu()) return;
    auto ctx = DeviceContext::create(Device::cuda(0));
    REQUIRE(ctx.ok());
    if (!fp8_gpu_supported((*ctx)->sm_version())) {
        WARN("skipped: FP8 projections run on Hopper (sm_90) only");
        return;
    }
    struct Case {
        std::string name;
        int64_t hidden, intermediate;  // 0: the fixture's
        std::vector<int32_t> docs;
    };
    for (const Case& k :
         {Case{"tiny-a", 0, 0, {90, 300, 41, 170}}, Case{"tiny-b", 0, 0, {90, 300, 41, 170}},
          Case{"tiny-a", 256, 512, {700, 129, 1200}}}) {
        auto hf = load_hf_model(testing::source_path("tests/fixtures/parity/" + k.name));
        REQUIRE(hf.ok());
        Qwen35Config config = hf->config;
        ParamSet params = hf->params.clone();
        if (k.hidden > 0) {  // the fixture's layout, wider, freshly initialised
            config.hidden_size = k.hidden, config.intermediate_size = k.intermediate;
            params = make_qwen35_params(config, config.tie_word_embeddings);
            init_qwen35_params(config, params, 11);
        }
        const std::string label = k.name + " hidden " + std::to_string(config.hidden_size);
        INFO(label);
        const PackedBatch batch = testing::random_batch(k.docs, config.vocab_size, 5);
        const StepResult bf16 = run_step(**ctx, config, params, batch, false);
        const StepResult again = run_step(**ctx, config, params, batch, false);
        const StepResult fp8 = run_step(**ctx, config, params, batch, true);
        const double loss_rel = std::abs(fp8.loss - bf16.loss) / std::abs(bf16.loss);
        const auto [cos, name] = worst_cosine(fp8.grads, bf16.grads);
        std::printf(
            "FP8 projections on %s: loss %.5f vs bf16 %.5f (rel %.2e), worst gradient "
            "cosine %.5f (%s), gradients rel %.2e\n",
            label.c_str(), fp8.loss, bf16.loss, loss_rel, cos, name.c_str(),
            testing::param_rel_diff(fp8.grads, bf16.grads));
        CHECK(again.loss == bf16.loss);  // off: the bf16 step, bit for bit
        CHECK(testing::param_rel_diff(again.grads, bf16.grads) == 0.0);
        CHECK(loss_rel < 2e-2);
        CHECK(cos >= 0.99);
        CHECK(testing::param_rel_diff(fp8.grads, bf16.grads) > 0.0);  // FP8 really ran
    }
}

}  // namespace
}  // namespace deltatune
