// The LM head on the labeled rows alone (runtime/batch/label_rows.h) against the head on every
// row: the same loss and the same gradient of every parameter, on the CPU reference and on the GPU
// ([cuda]: skipped with a printed reason without one). random_batch leaves every third label out.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include "runtime/device/device_context.h"
#include "runtime/model/qwen35_cpu_model.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/model/qwen35_params.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/gpu_test_util.h"

namespace deltatune {
namespace {

TEST_CASE("label-only LM head: the CPU loss and gradients of the head on every row", "[model]") {
    for (const std::string name : {"tiny-a", "tiny-b", "tiny-c"}) {  // tiny-a ties the head
        INFO(name);
        auto hf = load_hf_model(testing::source_path("tests/fixtures/parity/" + name));
        REQUIRE(hf.ok());
        const PackedBatch batch = testing::random_batch({9, 30, 4, 17}, hf->config.vocab_size, 3);
        REQUIRE(batch.label_tokens() < batch.tokens() * 3 / 4);
        ParamSet full_grads = hf->params.zeros_like(), label_grads = hf->params.zeros_like();
        Qwen35CpuModel full(hf->config, hf->params), label_only(hf->config, hf->params);
        full.set_label_only_head(false);
        auto full_loss = full.forward(batch);
        auto label_loss = label_only.forward(batch);
        REQUIRE(full_loss.ok());
        REQUIRE(label_loss.ok());
        CHECK(label_loss->loss_sum == full_loss->loss_sum);  // the same rows' losses, summed
        REQUIRE(full.backward(full_grads).ok());
        REQUIRE(label_only.backward(label_grads).ok());
        CHECK(testing::param_rel_diff(label_grads, full_grads) < 1e-6);
    }
}

TEST_CASE("label-only LM head: the GPU loss and gradients of the head on every row", "[cuda]") {
    if (!testing::have_gpu()) return;
    auto ctx = DeviceContext::create(Device::cuda(0));
    REQUIRE(ctx.ok());
    for (const std::string name : {"tiny-a", "tiny-b", "tiny-c"}) {
        INFO(name);
        auto hf = load_hf_model(testing::source_path("tests/fixtures/parity/" + name));
        REQUIRE(hf.ok());
        const PackedBatch batch =
            testing::random_batch({90, 300, 41, 170}, hf->config.vocab_size, 4);
        double loss[2] = {0, 0};
        ParamSet grads[2] = {hf->params.zeros_like(), hf->params.zeros_like()};
        for (const int label_only : {0, 1}) {
            auto gpu = Qwen35GpuModel::create(**ctx, hf->config, hf->params, Recompute::kNone);
            REQUIRE(gpu.ok());
            (*gpu)->set_label_only_head(label_only == 1);
            auto l = (*gpu)->forward(batch);
            REQUIRE(l.ok());
            REQUIRE((*gpu)->backward().ok());
            REQUIRE((*gpu)->download_grads(grads[label_only]).ok());
            loss[label_only] = l->loss;
        }
        const double loss_rel = std::abs(loss[1] - loss[0]) / std::abs(loss[0]);
        const double grad_rel = testing::param_rel_diff(grads[1], grads[0]);
        std::printf("label-only head on %s: loss rel %.2e, gradients rel %.2e\n", name.c_str(),
                    loss_rel, grad_rel);
        CHECK(loss_rel < 1e-3);  // the same rows' losses; only the GEMMs' rounding may differ
        CHECK(grad_rel < 1e-2);
    }
}

}  // namespace
}  // namespace deltatune
