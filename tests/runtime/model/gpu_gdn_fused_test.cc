// [cuda] The GPU model's fused Gated DeltaNet path (linear head dims 128: causal_conv1d,
// gated_delta_rule, gated_rmsnorm kernels) against the fp32 CPU reference: `run_step` on a small
// random Qwen3.5 model (one GDN and one full-attention layer) over a packed batch of awkward
// document lengths (1, 63, 65, 200 tokens: chunk-straddling boundaries), device cpu vs cuda,
// both recompute policies. Loss relative error < 1e-2, per-tensor gradient cosine > 0.99. Also
// the block's accumulation contract: a second backward without zeroing doubles every gradient.
// Skips with a printed reason without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "runtime/batch/packed_batch.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/device/device_context.h"
#include "runtime/model/hf_model_io.h"
#include "runtime/model/init_model.h"
#include "runtime/model/qwen35_gpu_model.h"
#include "runtime/train/step_runner.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/gpu_test_util.h"

namespace deltatune {
namespace {

using testing::cosine;
using testing::have_gpu;
using testing::random_docs;
using testing::read_grads;

// hidden 256, GDN key heads 2 / value heads 4 of dims 128, attention head_dim 256, vocab 512.
constexpr const char* kConfig = R"({
  "architectures": ["Qwen3_5ForCausalLM"],
  "model_type": "qwen3_5_text",
  "vocab_size": 512,
  "hidden_size": 256,
  "intermediate_size": 512,
  "num_hidden_layers": 2,
  "layer_types": ["linear_attention", "full_attention"],
  "num_attention_heads": 2,
  "num_key_value_heads": 1,
  "head_dim": 256,
  "linear_num_key_heads": 2,
  "linear_num_value_heads": 4,
  "linear_key_head_dim": 128,
  "linear_value_head_dim": 128,
  "linear_conv_kernel_dim": 4,
  "hidden_act": "silu",
  "rms_norm_eps": 1e-06,
  "initializer_range": 0.02,
  "tie_word_embeddings": false,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
                      "partial_rotary_factor": 0.25},
  "max_position_embeddings": 4096,
  "dtype": "bfloat16"
})";

double norm(const Tensor& t) {
    double s = 0;
    for (int64_t i = 0; i < t.numel(); ++i)
        s += static_cast<double>(t.data<float>()[i]) * t.data<float>()[i];
    return std::sqrt(s);
}

void write_batch_json(const std::string& path, const std::vector<Document>& docs) {
    std::ofstream f(path);
    f << "{\"documents\": [";
    for (size_t d = 0; d < docs.size(); ++d) {
        f << (d ? ", " : "") << "{\"input_ids\": [";
        for (size_t i = 0; i < docs[d].input_ids.size(); ++i)
            f << (i ? ", " : "") << docs[d].input_ids[i];
        f << "], \"labels\": [";
        for (size_t i = 0; i < docs[d].labels.size(); ++i)
            f << (i ? ", " : "") << docs[d].labels[i];
        f << "]}";
    }
    f << "]}\n";
}

TEST_CASE("fused GDN path (head dims 128): deltatune step --device cuda matches the CPU reference",
          "[cuda]") {
    if (!have_gpu()) return;
    testing::TempDir tmp;
    {
        std::ofstream f(tmp.file("config.json"));
        f << kConfig;
    }
    REQUIRE(init_model(tmp.file("config.json"), tmp.file("model"), 7).ok());
    auto model = load_hf_model(tmp.file("model"));
    REQUIRE(model.ok());
    REQUIRE(model->config.linear_key_head_dim == 128);
    const std::vector<Document> docs = random_docs({1, 63, 65, 200}, 512, 11);
    write_batch_json(tmp.file("batch.json"), docs);

    StepOptions o;
    o.model_dir = tmp.file("model");
    o.batch_path = tmp.file("batch.json");
    o.grads_out = tmp.file("cpu.safetensors");
    auto cpu = run_step(o);
    REQUIRE(cpu.ok());
    CHECK(cpu->tokens == 329);
    const ParamSet ref = read_grads(o.grads_out, *model);

    for (const std::string policy : {"none", "layer"}) {
        o.device = "cuda";
        o.recompute = policy;
        o.grads_out = tmp.file("cuda_" + policy + ".safetensors");
        auto gpu = run_step(o);
        INFO("recompute=" << policy << ": " << gpu.status().ToString());
        REQUIRE(gpu.ok());
        const double rel = std::abs(gpu->loss - cpu->loss) / std::abs(cpu->loss);
        const ParamSet got = read_grads(o.grads_out, *model);
        double min_cos = 2;
        std::string worst;
        for (size_t i = 0; i < got.all().size(); ++i) {
            const Tensor& g = got.all()[i].value;
            const Tensor& r = ref.all()[i].value;
            const double cs = cosine(g.data<float>(), r.data<float>(), g.numel());
            if (got.all()[i].name.find("linear_attn") != std::string::npos) {
                std::printf("  %-48s cosine %.6f  norm gpu %.4e cpu %.4e\n",
                            got.all()[i].name.c_str(), cs, norm(g), norm(r));
            }
            if (cs <= 0.99) UNSCOPED_INFO(got.all()[i].name << ": cosine " << cs);
            if (cs < min_cos) min_cos = cs, worst = got.all()[i].name;
        }
        std::printf(
            "fused gdn recompute=%s: loss %.6f vs cpu %.6f (rel %.2e), min grad cosine %.6f (%s), "
            "grad_norm %.4f vs %.4f\n",
            policy.c_str(), gpu->loss, cpu->loss, rel, min_cos, worst.c_str(), gpu->grad_norm,
            cpu->grad_norm);
        CHECK(rel < 1e-2);
        CHECK(min_cos > 0.99);
        CHECK(gpu->label_tokens == cpu->label_tokens);
    }
}

TEST_CASE("fused GDN path accumulates parameter gradients (+=)", "[cuda]") {
    if (!have_gpu()) return;
    testing::TempDir tmp;
    {
        std::ofstream f(tmp.file("config.json"));
        f << kConfig;
    }
    REQUIRE(init_model(tmp.file("config.json"), tmp.file("model"), 3).ok());
    auto model = load_hf_model(tmp.file("model"));
    REQUIRE(model.ok());
    auto batch = pack_documents(random_docs({1, 63, 65, 200}, 512, 5), 512);
    REQUIRE(batch.ok());
    auto ctx = DeviceContext::create(Device::cuda(0));
    REQUIRE(ctx.ok());
    auto gpu = Qwen35GpuModel::create(**ctx, model->config, model->params, Recompute::kNone);
    REQUIRE(gpu.ok());
    ParamSet once = model->params.zeros_like(), twice = model->params.zeros_like();
    REQUIRE((*gpu)->forward(*batch).ok());
    REQUIRE((*gpu)->backward().ok());
    REQUIRE((*gpu)->download_grads(once).ok());
    REQUIRE((*gpu)->forward(*batch).ok());
    REQUIRE((*gpu)->backward().ok());
    REQUIRE((*gpu)->download_grads(twice).ok());
    for (size_t i = 0; i < once.all().size(); ++i) {
        const Tensor& a = once.all()[i].value;
        const Tensor& b = twice.all()[i].value;
        INFO(once.all()[i].name);
        CHECK(cosine(a.data<float>(), b.data<float>(), a.numel()) > 0.9999);
        const double na = norm(a);
        if (na > 0) CHECK(std::abs(norm(b) / na - 2.0) < 1e-3);
    }
}

}  // namespace
}  // namespace deltatune
