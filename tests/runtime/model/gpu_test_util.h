// Helpers shared by the GPU model tests (gpu_parity_test.cc, gpu_gdn_fused_test.cc): the skip
// with a printed reason, gradient files read back by HF name, and per-tensor cosine similarity.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>

#include "runtime/checkpoint/hf_model_io.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/device/device_context.h"

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

}  // namespace deltatune::testing
