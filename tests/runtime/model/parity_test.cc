// End-to-end parity of `deltatune step` (CPU reference path) with transformers 5.17 in fp32,
// against fixtures made by scripts/fixtures/make_parity_fixtures.py (each document run alone
// there): loss relative error < 1e-5 and every gradient ||g - g_ref|| / ||g_ref|| < 1e-4.
//
// Parameters after one AdamW step, < 1e-6, checked two ways:
//  - optimizer parity: our AdamW applied to transformers' own gradients, every element;
//  - end to end (`--update-out`): Adam's first step is lr * g / (|g| + eps), a sign function of
//    g, so an element whose reference gradient is at fp32 cancellation level flips with rounding.
//    The fixtures' own fp64 rerun shows transformers-fp32 gets the sign of such elements wrong
//    (e.g. -1.9e-8 where fp64 gives +6.6e-8), so those elements, |g_ref| < 1e-5 * max |g_ref| of
//    their tensor, are left out of the end-to-end norm; how many is printed.
//
// LoRA (peft): the same step with `--adapter` on each fixture's checkpoint, against
// tests/fixtures/parity/lora/ (see check_lora_fixture for why against their fp64 rerun).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "nlohmann/json.hpp"
#include "runtime/base/file_util.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/optim/adamw.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

using testing::TempDir;

constexpr double kSignAmbiguous = 1e-5;  // relative to the tensor's largest |gradient|

std::string fixture_dir(const std::string& name) {
    return testing::source_path("tests/fixtures/parity/" + name);
}

nlohmann::json expected_json(const std::string& dir) {
    auto text = read_file(dir + "/expected.json");
    REQUIRE(text.ok());
    return nlohmann::json::parse(*text);
}

SafetensorsFile open_or_fail(const std::string& path) {
    auto f = SafetensorsFile::open(path);
    INFO(path << ": " << f.status().ToString());
    REQUIRE(f.ok());
    return *std::move(f);
}

Tensor tensor_or_fail(const SafetensorsFile& f, const std::string& name) {
    auto t = f.get(name);
    INFO(name << ": " << t.status().ToString());
    REQUIRE(t.ok());
    REQUIRE(t->dtype() == DType::kF32);
    return *t;
}

// Mask of elements whose reference gradient is at cancellation level (see the file comment).
std::vector<bool> sign_ambiguous(const Tensor& grad) {
    const float* g = grad.data<float>();
    float max_abs = 0;
    for (int64_t i = 0; i < grad.numel(); ++i) max_abs = std::max(max_abs, std::abs(g[i]));
    std::vector<bool> mask(static_cast<size_t>(grad.numel()));
    for (int64_t i = 0; i < grad.numel(); ++i)
        mask[i] = g[i] != 0 && std::abs(g[i]) < kSignAmbiguous * max_abs;
    return mask;
}

double masked_relative_error(const Tensor& a, const Tensor& b, const std::vector<bool>& skip) {
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    double num = 0, den = 0;
    for (int64_t i = 0; i < b.numel(); ++i) {
        den += static_cast<double>(y[i]) * y[i];
        if (!skip[i])
            num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    }
    return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// What check_step compares gradients and updates with: the fp32 reference (`suffix` "") or its
// fp64 rerun ("_fp64"), and the relative errors allowed.
struct Reference {
    std::string suffix;
    double grad = 1e-4, update = 1e-6;
};

// `deltatune step` on base fixture `name`'s checkpoint and batch against the expected outputs in
// `expected_dir` (the base fixture's own, or a LoRA fixture's with `--adapter` in `extra`).
void check_step(const std::string& name, const std::string& expected_dir, const std::string& extra,
                const Reference& reference = {}) {
    const std::string dir = fixture_dir(name);
    const auto expected = expected_json(expected_dir);
    const auto& h = expected["adamw"];
    TempDir tmp;
    const std::string cmd =
        testing::cli_path() + " step --model " + dir + " --batch " + dir + "/batch.json" + extra +
        " --grads-out " + tmp.file("grads.safetensors") + " --update-out " +
        tmp.file("update.safetensors") + " --lr " + h["lr"].dump() + " --beta1 " +
        h["beta1"].dump() + " --beta2 " + h["beta2"].dump() + " --eps " + h["eps"].dump() +
        " --weight-decay " + h["weight_decay"].dump();
    std::string out;
    REQUIRE(testing::run_command(cmd, out) == 0);
    const auto report = nlohmann::json::parse(out);
    const double loss = report["loss"].get<double>();
    const double ref_loss = expected["loss"].get<double>();
    const double loss_err = std::abs(loss - ref_loss) / std::abs(ref_loss);
    CHECK(loss_err < 1e-5);
    CHECK(report["label_tokens"] == expected["label_tokens"]);

    const SafetensorsFile grads = open_or_fail(tmp.file("grads.safetensors"));
    const std::string& sfx = reference.suffix;
    const SafetensorsFile ref_grads = open_or_fail(expected_dir + "/grads" + sfx + ".safetensors");
    const SafetensorsFile update = open_or_fail(tmp.file("update.safetensors"));
    const SafetensorsFile ref_update =
        open_or_fail(expected_dir + "/update" + sfx + ".safetensors");
    REQUIRE(grads.names().size() == ref_grads.names().size());
    REQUIRE(update.names().size() == ref_update.names().size());
    double worst_grad = 0, worst_update = 0;
    int64_t ambiguous = 0;
    for (const auto& pname : ref_update.names()) {
        INFO(name << ": " << pname);
        const Tensor g_ref = tensor_or_fail(ref_grads, "grad." + pname);
        const double grad_err =
            testing::relative_error(tensor_or_fail(grads, "grad." + pname), g_ref);
        CHECK(grad_err < reference.grad);
        const auto skip = sign_ambiguous(g_ref);
        for (bool s : skip) ambiguous += s;
        const double update_err = masked_relative_error(tensor_or_fail(update, pname),
                                                        tensor_or_fail(ref_update, pname), skip);
        CHECK(update_err < reference.update);
        worst_grad = std::max(worst_grad, grad_err);
        worst_update = std::max(worst_update, update_err);
    }
    WARN(name << ": loss rel err " << loss_err << ", worst grad rel err " << worst_grad
              << ", worst update rel err " << worst_update << " (" << ambiguous
              << " sign-ambiguous elements left out)");
}

void check_fixture(const std::string& name) {
    check_step(name, fixture_dir(name), "");
}

// LoRA (peft 0.21, every projection targeted, B non-zero, lr 1e-3): the adapter's loss, gradients
// and AdamW step, under PEFT's tensor names (scripts/fixtures/make_lora_parity_fixtures.py --fp64).
// Gradients and updates are measured against the fp64 rerun: transformers + peft in fp32 is
// itself up to 1.5e-4 away from it in the gradients of tiny-b (ours 1.6e-4), so an fp32-to-fp32
// comparison would measure the reference's error as much as ours. Updates, sign-ambiguous
// elements left out as for the base fixtures: under 1e-6 (ours 6.8e-7 at worst).
void check_lora_fixture(const std::string& name) {
    const std::string adapter = fixture_dir("lora/" + name);
    check_step(name, adapter, " --adapter " + adapter, {"_fp64", 2e-4, 2e-6});
}

// Our optimizer on transformers' gradients and weights must reproduce torch.optim.AdamW exactly.
void check_optimizer(const std::string& name) {
    const std::string dir = fixture_dir(name);
    const auto h = expected_json(dir)["adamw"];
    auto model = load_hf_model(dir);
    REQUIRE(model.ok());
    const SafetensorsFile ref_grads = open_or_fail(dir + "/grads.safetensors");
    const SafetensorsFile ref_update = open_or_fail(dir + "/update.safetensors");
    ParamSet grads = model->params.zeros_like();
    for (auto& p : grads.all()) {
        const Tensor g =
            tensor_or_fail(ref_grads, "grad." + checkpoint_name(p.name, model->layout));
        std::memcpy(p.value.raw_data(), g.raw_data(), g.nbytes());
    }
    AdamWState state = make_adamw_state(model->params);
    adamw_update(model->params, grads, state,
                 {h["lr"].get<double>(), h["beta1"].get<double>(), h["beta2"].get<double>(),
                  h["eps"].get<double>(), h["weight_decay"].get<double>()});
    double worst = 0;
    for (const auto& p : model->params.all()) {
        INFO(name << ": " << p.name);
        const double err = testing::relative_error(
            p.value, tensor_or_fail(ref_update, checkpoint_name(p.name, model->layout)));
        CHECK(err < 1e-6);
        worst = std::max(worst, err);
    }
    WARN(name << ": AdamW on transformers' gradients, worst relative error " << worst);
}

TEST_CASE("step matches transformers: tiny-a (text layout, tied, GQA 2, v/k heads 2)", "[parity]") {
    check_fixture("tiny-a");
    check_optimizer("tiny-a");
}

TEST_CASE("step matches transformers: tiny-b (multimodal sharded bf16, GQA 3, v/k heads 3)",
          "[parity]") {
    check_fixture("tiny-b");
    check_optimizer("tiny-b");
}

TEST_CASE("step matches transformers: tiny-c (untied, no GQA, v/k heads 1)", "[parity]") {
    check_fixture("tiny-c");
    check_optimizer("tiny-c");
}

TEST_CASE("LoRA step matches transformers + peft on every projection", "[parity][lora]") {
    for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) check_lora_fixture(name);
}

}  // namespace
}  // namespace deltatune
