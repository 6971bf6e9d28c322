// Helpers shared by the GPU model tests (gpu_parity_test.cc, gpu_gdn_fused_test.cc,
// dist/fsdp_gpu_test.cc, train/trainer_gpu_test.cc): the skip with a printed reason, gradient
// files read back by HF name, per-tensor cosine similarity, random packed documents, and the
// relative difference of two parameter sets.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "runtime/batch/packed_batch.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/device/device_context.h"
#include "runtime/model/hf_model_io.h"

namespace deltatune::testing {

inline bool have_gpu() {
    std::string why;
    if (cuda_device_count(&why) == 0) {
        WARN("skipped: " << why);
        return false;
    }
    return true;
}

// Cosine similarity of two fp32 arrays (-2 when `a` holds a non-finite value; 1 when both are 0).
inline double cosine(const float* a, const float* b, int64_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(a[i])) return -2;
        ab += static_cast<double>(a[i]) * b[i];
        aa += static_cast<double>(a[i]) * a[i];
        bb += static_cast<double>(b[i]) * b[i];
    }
    if (aa == 0 && bb == 0) return 1;
    return ab / std::sqrt(aa * bb);
}

// The `grad.<HF name>` tensors of a --grads-out file, as a ParamSet shaped like `model`'s.
inline ParamSet read_grads(const std::string& path, const HfModel& model) {
    auto f = SafetensorsFile::open(path);
    REQUIRE(f.ok());
    ParamSet g = model.params.zeros_like();
    for (auto& p : g.all()) {
        auto t = f->get("grad." + checkpoint_name(p.name, model.layout));
        INFO(p.name);
        REQUIRE(t.ok());
        std::memcpy(p.value.data<float>(), t->data<float>(), sizeof(float) * p.value.numel());
    }
    return g;
}

// Documents of the given lengths, random tokens, every position labelled but each third.
inline std::vector<Document> random_docs(const std::vector<int32_t>& lengths, int64_t vocab,
                                         uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<Document> docs;
    for (int32_t n : lengths) {
        Document d;
        for (int32_t i = 0; i < n; ++i) {
            d.input_ids.push_back(static_cast<int32_t>(rng() % vocab));
            d.labels.push_back(i % 3 == 2 ? -100 : d.input_ids.back());
        }
        docs.push_back(d);
    }
    return docs;
}

// random_docs packed into one batch.
inline PackedBatch random_batch(const std::vector<int32_t>& lengths, int64_t vocab, uint32_t seed) {
    auto b = pack_documents(random_docs(lengths, vocab, seed), vocab);
    REQUIRE(b.ok());
    return *b;
}

// ||a - ref|| / ||ref|| over every parameter (same names and shapes).
inline double param_rel_diff(const ParamSet& a, const ParamSet& ref) {
    double d = 0, n = 0;
    for (size_t i = 0; i < a.all().size(); ++i) {
        const float* x = a.all()[i].value.data<float>();
        const float* y = ref.all()[i].value.data<float>();
        for (int64_t j = 0; j < a.all()[i].value.numel(); ++j) {
            d += (static_cast<double>(x[j]) - y[j]) * (static_cast<double>(x[j]) - y[j]);
            n += static_cast<double>(y[j]) * y[j];
        }
    }
    return std::sqrt(d / n);
}

}  // namespace deltatune::testing
