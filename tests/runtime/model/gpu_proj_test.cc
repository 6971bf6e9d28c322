// [cuda] The GPU projections with a LoRA branch (runtime/model/gpu_proj.h) against the fp32
// reference (kernels/mlp/linear_ref.cc: linear_* and lora_*_ref) on fresh random bf16 inputs, for
// ranks and widths down to the tiny fixtures' (rank 2-4, 2-3 output heads), alone and as a group
// of two sharing their input: y, dx accumulated onto a prior value, dA and dB, and no dW for a
// frozen weight. Relative L2 error
// < 1e-2 each (bf16 operands and intermediates). Skips with a printed reason without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/common/bf16_bits.h"
#include "kernels/mlp/linear.h"
#include "runtime/device/device_context.h"
#include "runtime/model/gpu_lora.h"
#include "runtime/model/gpu_proj.h"
#include "tests/runtime/model/gpu_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA  // the projections run on the device only

// Random values already rounded to bf16 (the reference then sees what the GPU sees).
std::vector<float> random_bf16(size_t n, float scale, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = bf16_bits_to_float(float_to_bf16_bits(normal(rng)));
    return v;
}

DeviceMemory upload_bf16(DeviceContext& dev, const std::vector<float>& v) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = float_to_bf16_bits(v[i]);
    auto m = dev.allocate(bits.size() * 2);
    REQUIRE(m.ok());
    REQUIRE(cudaMemcpy(m->get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice) ==
            cudaSuccess);
    return *std::move(m);
}

DeviceMemory upload_f32(DeviceContext& dev, const std::vector<float>& v) {
    auto m = dev.allocate(v.size() * 4);
    REQUIRE(m.ok());
    REQUIRE(cudaMemcpy(m->get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    return *std::move(m);
}

std::vector<float> download_bf16(const DeviceMemory& m, size_t n) {
    std::vector<uint16_t> bits(n);
    REQUIRE(cudaMemcpy(bits.data(), m.get(), n * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = bf16_bits_to_float(bits[i]);
    return v;
}

std::vector<float> download_f32(const DeviceMemory& m, size_t n) {
    std::vector<float> v(n);
    REQUIRE(cudaMemcpy(v.data(), m.get(), n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
    double d = 0, r = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        d += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
        r += double(ref[i]) * ref[i];
    }
    return std::sqrt(d / std::max(r, 1e-30));
}

// Two projections reading the same input (a group, gpu_lora.h): widths N1, N2 and ranks r1, r2
// (r2 = 0: a group of one).
struct Shape {
    int64_t T, K, N1, r1, N2, r2;
};

struct Member {
    std::vector<float> w, A, B, dy, y, dB;
};

TEST_CASE("GPU projections with a LoRA branch match the fp32 reference", "[cuda][lora]") {
    if (!testing::have_gpu()) return;
    auto dev = DeviceContext::create(Device::cuda(0));
    REQUIRE(dev.ok());
    DeviceContext& d = **dev;
    const Qwen35Config config;
    std::mt19937 rng(7);
    for (const Shape s : {Shape{97, 64, 3, 3, 3, 3}, Shape{97, 64, 2, 2, 0, 0},
                          Shape{130, 64, 128, 4, 48, 4}, Shape{256, 256, 512, 16, 0, 0},
                          Shape{64, 96, 48, 8, 96, 8}, Shape{200, 64, 6, 3, 2, 3}}) {
        const int64_t T = s.T, K = s.K;
        const float scale = 1.7f;
        const int count = s.r2 > 0 ? 2 : 1;
        const auto x = random_bf16(T * K, 1.0f, rng), dx0 = random_bf16(T * K, 1.0f, rng);
        std::vector<Member> m(static_cast<size_t>(count));
        std::vector<float> dx = dx0, A_all, dA_ref;
        for (int i = 0; i < count; ++i) {
            const int64_t N = i ? s.N2 : s.N1, r = i ? s.r2 : s.r1;
            Member& mb = m[static_cast<size_t>(i)];
            mb.w = random_bf16(N * K, 0.1f, rng), mb.A = random_bf16(r * K, 0.1f, rng);
            mb.B = random_bf16(N * r, 0.1f, rng), mb.dy = random_bf16(T * N, 1.0f, rng);
            // y = x W^T + scale (x A^T) B^T; dx += dy W + scale (dy B) A; dA, dB from zero.
            mb.y.assign(T * N, 0.0f);
            linear_forward_ref(mb.y.data(), x.data(), mb.w.data(), T, K, N);
            lora_forward_ref(mb.y.data(), x.data(), mb.A.data(), mb.B.data(), T, K, N, r, scale);
            std::vector<float> dxi(T * K), dw_unused(N * K), dA(r * K, 0.0f);
            mb.dB.assign(N * r, 0.0f);
            linear_backward_ref(dxi.data(), dw_unused.data(), mb.dy.data(), x.data(), mb.w.data(),
                                T, K, N);
            lora_backward_ref(dxi.data(), dA.data(), mb.dB.data(), mb.dy.data(), x.data(),
                              mb.A.data(), mb.B.data(), T, K, N, r, scale);
            for (size_t k = 0; k < dx.size(); ++k) dx[k] += dxi[k];
            A_all.insert(A_all.end(), mb.A.begin(), mb.A.end());
            dA_ref.insert(dA_ref.end(), dA.begin(), dA.end());
        }
        // The group as GpuLoraAdapters lays it out: the A's stacked, xa and dyb (T, r1 + r2).
        const int64_t R = s.r1 + s.r2;
        DeviceMemory gx = upload_bf16(d, x), gdx = upload_bf16(d, dx0), gA = upload_bf16(d, A_all);
        DeviceMemory gdA = upload_f32(d, std::vector<float>(R * K, 0.0f));
        auto xa = d.allocate(T * R * 2), dyb = d.allocate(T * R * 2);
        REQUIRE(xa.ok());
        REQUIRE(dyb.ok());
        GpuLoraGroup group{gA.as<bf16>(), gdA.as<float>(), R,
                           count,         xa->as<bf16>(),  dyb->as<bf16>()};
        GpuBatch batch;
        batch.tokens = T;
        const GpuCtx ctx{d, config, batch};
        std::vector<DeviceMemory> w, B, dB, dy, y;
        std::vector<GpuLora> lora(static_cast<size_t>(count));
        for (int i = 0; i < count; ++i) {
            const Member& mb = m[static_cast<size_t>(i)];
            w.push_back(upload_bf16(d, mb.w)), B.push_back(upload_bf16(d, mb.B));
            dB.push_back(upload_f32(d, std::vector<float>(mb.dB.size(), 0.0f)));
            dy.push_back(upload_bf16(d, mb.dy));
            auto out = d.allocate(mb.y.size() * 2);
            REQUIRE(out.ok());
            y.push_back(*std::move(out));
            lora[static_cast<size_t>(i)] = GpuLora{B.back().as<bf16>(),
                                                   dB.back().as<float>(),
                                                   i ? s.r2 : s.r1,
                                                   i ? s.r1 : 0,
                                                   i == 0,
                                                   scale,
                                                   &group};
        }
        for (int i = 0; i < count; ++i) {  // the forwards in group order
            const GpuParam p{w[i].as<bf16>(), nullptr, nullptr, false, &lora[i]};
            REQUIRE(proj_forward(ctx, p, y[i].get(), gx.get(), K, i ? s.N2 : s.N1).ok());
        }
        for (int i = count - 1; i >= 0; --i) {  // the backwards in either order
            const GpuParam p{w[i].as<bf16>(), nullptr, nullptr, false, &lora[i]};  // frozen
            const int64_t N = i ? s.N2 : s.N1;
            REQUIRE(proj_backward_dx(ctx, p, gdx.get(), dy[i].get(), gx.get(), K, N, true).ok());
            REQUIRE(proj_backward_dw(ctx, p, dy[i].get(), gx.get(), K, N).ok());
        }
        REQUIRE(d.synchronize().ok());
        INFO("T " << T << " K " << K << " N " << s.N1 << "/" << s.N2 << " r " << s.r1 << "/"
                  << s.r2);
        const double edx = rel_err(download_bf16(gdx, dx.size()), dx);
        const double edA = rel_err(download_f32(gdA, dA_ref.size()), dA_ref);
        std::printf("gpu proj lora T %lld K %lld N %lld/%lld r %lld/%lld: dx %.2e dA %.2e",
                    (long long)T, (long long)K, (long long)s.N1, (long long)s.N2, (long long)s.r1,
                    (long long)s.r2, edx, edA);
        CHECK(edx < 1e-2);
        CHECK(edA < 1e-2);
        for (int i = 0; i < count; ++i) {
            const Member& mb = m[static_cast<size_t>(i)];
            const double ey = rel_err(download_bf16(y[i], mb.y.size()), mb.y);
            const double edB = rel_err(download_f32(dB[i], mb.dB.size()), mb.dB);
            std::printf(" | y%d %.2e dB%d %.2e", i, ey, i, edB);
            CHECK(ey < 1e-2);
            CHECK(edB < 1e-2);
        }
        std::printf("\n");
        CHECK(group.pending == 0);
    }
}

#endif  // DELTATUNE_HAVE_CUDA

}  // namespace
}  // namespace deltatune
