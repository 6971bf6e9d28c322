// Helpers for the [cuda] kernel tests: GPU presence (skip with a printed reason), device buffers
// that are poisoned (all-ones bytes: NaN in bf16 and fp32) before every launch, random bf16
// inputs kept with their exact fp32 values for the references, and error norms.
#pragma once

#if DELTATUNE_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/bf16_bits.h"
#include "kernels/common/code_arch.h"

namespace deltatune::cudatest {

inline bool have_gpu() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        WARN("skipped: no CUDA device present");
        return false;
    }
    return true;
}

// For the tests of the Hopper-only kernels: skipped, saying so, where the sm_90a code is not the
// one loaded (the portable build, or a GPU other than Hopper).
inline bool have_hopper_code() {
    if (!have_gpu()) return false;
    if (loaded_code().arch >= kHopperCodeArch) return true;
    WARN("skipped: the sm_90a code is not loaded here (portable build or a non-Hopper GPU)");
    return false;
}

// A device array of T; never zero-initialised (poison() fills it with NaN bytes).
template <typename T>
class DeviceBuffer {
  public:
    explicit DeviceBuffer(size_t n) : n_(n) {
        REQUIRE(cudaMalloc(&p_, (n > 0 ? n : 1) * sizeof(T)) == cudaSuccess);
    }
    explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
    // Large random buffers without generating every value on the host: a random block of at
    // most 4M values is uploaded, then repeated by doubling device-to-device copies.
    struct RandomFill {
        size_t n;
        float scale;
    };
    explicit DeviceBuffer(RandomFill f) : DeviceBuffer(f.n) {
        std::mt19937 rng(static_cast<uint32_t>(f.n * 2654435761u) ^ 0x9e3779b9u);
        std::normal_distribution<float> normal(0.0f, f.scale);
        const size_t block = f.n < (size_t{1} << 22) ? f.n : (size_t{1} << 22);
        std::vector<T> host(block);
        for (auto& x : host) {
            if constexpr (sizeof(T) == 2) {
                x = float_to_bf16_bits(normal(rng));
            } else {
                x = normal(rng);
            }
        }
        REQUIRE(cudaMemcpy(p_, host.data(), block * sizeof(T), cudaMemcpyHostToDevice) ==
                cudaSuccess);
        for (size_t filled = block; filled < f.n; filled *= 2) {
            const size_t count = filled < f.n - filled ? filled : f.n - filled;
            REQUIRE(cudaMemcpy(p_ + filled, p_, count * sizeof(T), cudaMemcpyDeviceToDevice) ==
                    cudaSuccess);
        }
    }
    ~DeviceBuffer() { cudaFree(p_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return p_; }
    size_t size() const { return n_; }
    void upload(const std::vector<T>& host) {
        REQUIRE(host.size() == n_);
        REQUIRE(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    }
    std::vector<T> download() const {
        std::vector<T> host(n_);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        REQUIRE(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
        return host;
    }
    void poison() { REQUIRE(cudaMemset(p_, 0xff, n_ * sizeof(T)) == cudaSuccess); }

  private:
    T* p_ = nullptr;
    size_t n_;
};

inline __nv_bfloat16* bf16_ptr(const DeviceBuffer<uint16_t>& b) {
    return reinterpret_cast<__nv_bfloat16*>(b.get());
}

// Random values already representable in bf16: `bits` goes to the device, `f` to the reference.
struct Bf16Data {
    std::vector<uint16_t> bits;
    std::vector<float> f;
};

inline Bf16Data random_bf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    Bf16Data d;
    d.bits.resize(n);
    d.f.resize(n);
    for (size_t i = 0; i < n; ++i) {
        d.bits[i] = float_to_bf16_bits(normal(rng));
        d.f[i] = bf16_bits_to_float(d.bits[i]);
    }
    return d;
}

inline std::vector<float> to_float(const std::vector<uint16_t>& bits) {
    std::vector<float> f(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) f[i] = bf16_bits_to_float(bits[i]);
    return f;
}

inline std::vector<float> random_f32(size_t n, std::mt19937& rng, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
}

// ||got - ref|| / ||ref||; any NaN or infinity in `got` (an unwritten, poisoned element) gives
// infinity so the check fails.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
    REQUIRE(got.size() == ref.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        const double d = static_cast<double>(got[i]) - ref[i];
        num += d * d;
        den += static_cast<double>(ref[i]) * ref[i];
    }
    return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Largest |got - ref| / (atol + rtol |ref|) over elements; <= 1 passes. NaN gives infinity.
inline double max_scaled_err(const std::vector<float>& got, const std::vector<float>& ref,
                             double atol, double rtol) {
    REQUIRE(got.size() == ref.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        const double e = std::abs(static_cast<double>(got[i]) - ref[i]) /
                         (atol + rtol * std::abs(static_cast<double>(ref[i])));
        worst = e > worst ? e : worst;
    }
    return worst;
}

// The worst value of each named error over all shapes, printed when the test binary exits: the
// figures a report quotes (max_scaled is |got - ref| / (atol + rtol |ref|), passing at <= 1).
class ErrorTable {
  public:
    ~ErrorTable() {
        for (const auto& [name, v] : worst_) std::printf("worst %-44s %.3e\n", name.c_str(), v);
    }
    double add(const std::string& name, double v) {
        auto [it, fresh] = worst_.emplace(name, v);
        if (!fresh && !(v <= it->second)) it->second = v;
        return v;
    }

  private:
    std::map<std::string, double> worst_;
};

inline double noted(const std::string& name, double v) {
    static ErrorTable table;
    return table.add(name, v);
}

// Document lengths summing to `tokens`: ones, odd lengths, one long tail; cu_seqlens layout.
inline std::vector<int32_t> awkward_cu_seqlens(const std::vector<int32_t>& lengths) {
    std::vector<int32_t> cu{0};
    for (int32_t l : lengths) cu.push_back(cu.back() + l);
    return cu;
}

inline std::vector<int32_t> positions_from_cu(const std::vector<int32_t>& cu) {
    std::vector<int32_t> pos(static_cast<size_t>(cu.back()));
    for (size_t d = 0; d + 1 < cu.size(); ++d) {
        for (int32_t t = cu[d]; t < cu[d + 1]; ++t) pos[static_cast<size_t>(t)] = t - cu[d];
    }
    return pos;
}

}  // namespace deltatune::cudatest
#endif
