// Multi-tensor AdamW and the global gradient norm against their references over tensors of
// awkward sizes (empty, one element, chunk boundaries) ([cuda]; skipped with a printed reason
// where no GPU is present).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "kernels/optim/adamw.h"
#include "kernels/optim/grad_norm.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

const std::vector<int64_t> kSizes = {1, 4095, 0, 4096, 4097, 33333, 7};

TEST_CASE("multi-tensor AdamW CUDA step matches the reference", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(51);
    AdamWHyper hyper;
    hyper.lr = 1e-3;
    hyper.weight_decay = 0.1;
    struct Host {
        std::vector<float> p, m, v;
    };
    std::vector<Host> ref(kSizes.size());
    std::vector<std::unique_ptr<DeviceBuffer<float>>> bufs;
    std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> bf16s;
    std::vector<AdamWTensorArgs> args(kSizes.size());
    auto dev = [&bufs](const std::vector<float>& h) {
        bufs.push_back(std::make_unique<DeviceBuffer<float>>(h));
        return bufs.back()->get();
    };
    for (size_t i = 0; i < kSizes.size(); ++i) {
        const size_t n = static_cast<size_t>(kSizes[i]);
        ref[i].p = random_f32(n, rng);
        ref[i].m = random_f32(n, rng, 0.01f);
        ref[i].v = random_f32(n, rng, 1e-3f);
        for (auto& x : ref[i].v) x = x * x;
        bf16s.push_back(std::make_unique<DeviceBuffer<uint16_t>>(n));
        args[i] = {dev(ref[i].p),
                   dev(ref[i].m),
                   dev(ref[i].v),
                   nullptr,
                   bf16_ptr(*bf16s.back()),
                   kSizes[i],
                   0};
    }
    const int64_t chunks = adamw_plan_chunks(args.data(), static_cast<int>(args.size()));
    DeviceBuffer<float> scale(std::vector<float>{0.5f});
    for (int64_t step = 1; step <= 3; ++step) {
        INFO("step " << step);
        for (size_t i = 0; i < kSizes.size(); ++i) {
            const auto g = random_f32(static_cast<size_t>(kSizes[i]), rng, 0.1f);
            args[i].grad = dev(g);
            auto gs = g;
            for (auto& x : gs) x *= 0.5f;  // the device grad_scale
            adamw_step_ref(ref[i].p.data(), ref[i].m.data(), ref[i].v.data(), gs.data(), kSizes[i],
                           hyper, step);
            bf16s[i]->poison();
        }
        DeviceBuffer<AdamWTensorArgs> d_args(args);
        REQUIRE(adamw_multi_tensor_step(d_args.get(), static_cast<int>(args.size()), chunks, hyper,
                                        step, scale.get(), nullptr) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        for (size_t i = 0; i < kSizes.size(); ++i) {
            INFO("tensor " << i << " of size " << kSizes[i]);
            const size_t n = static_cast<size_t>(kSizes[i]);
            std::vector<float> p(n), m(n), v(n);
            REQUIRE(cudaMemcpy(p.data(), args[i].param, n * 4, cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
            REQUIRE(cudaMemcpy(m.data(), args[i].m, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
            REQUIRE(cudaMemcpy(v.data(), args[i].v, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
            CHECK(noted("adamw p max_scaled", max_scaled_err(p, ref[i].p, 1e-7, 1e-5)) <= 1.0);
            CHECK(noted("adamw m max_scaled", max_scaled_err(m, ref[i].m, 1e-8, 1e-5)) <= 1.0);
            CHECK(noted("adamw v max_scaled", max_scaled_err(v, ref[i].v, 1e-12, 1e-5)) <= 1.0);
            const auto copy = bf16s[i]->download();
            int64_t bad = 0;
            for (size_t j = 0; j < n; ++j) bad += copy[j] != float_to_bf16_bits(p[j]);
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("global gradient norm CUDA is exact to fp32 and reproducible", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(61);
    std::vector<std::unique_ptr<DeviceBuffer<float>>> bufs;
    std::vector<GradNormTensor> tensors;
    double ref = 0;
    for (int64_t n : kSizes) {
        const auto g = random_f32(static_cast<size_t>(n), rng, 0.3f);
        for (float x : g) ref += static_cast<double>(x) * x;
        bufs.push_back(std::make_unique<DeviceBuffer<float>>(g));
        tensors.push_back({bufs.back()->get(), n, 0});
    }
    ref = std::sqrt(ref);
    const int64_t chunks = grad_norm_plan_chunks(tensors.data(), static_cast<int>(tensors.size()));
    DeviceBuffer<GradNormTensor> d_tensors(tensors);
    const size_t ws_bytes = grad_norm_workspace_bytes(chunks);
    DeviceBuffer<char> ws(ws_bytes);
    DeviceBuffer<float> out(2);
    float first[2] = {0, 0};
    for (int rep = 0; rep < 2; ++rep) {
        ws.poison();
        out.poison();
        const float max_norm = static_cast<float>(ref / 4);
        REQUIRE(global_grad_norm(out.get(), out.get() + 1, d_tensors.get(),
                                 static_cast<int>(tensors.size()), chunks, max_norm, ws.get(),
                                 ws_bytes, nullptr) == cudaSuccess);
        const auto got = out.download();
        CHECK(std::abs(got[0] - ref) <= 1e-5 * ref);
        CHECK(std::abs(got[1] - max_norm / (ref + 1e-6)) <= 1e-5);
        if (rep == 0) {
            first[0] = got[0];
            first[1] = got[1];
        } else {
            CHECK(got[0] == first[0]);
            CHECK(got[1] == first[1]);
        }
    }
}
#else
TEST_CASE("multi-tensor AdamW CUDA step matches the reference", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
TEST_CASE("global gradient norm CUDA is exact to fp32 and reproducible", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
