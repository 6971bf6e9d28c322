// GPUs the kernel-choice tests describe without having them: what probe_gpu_arch reads on each
// with the `all` build (kernels/CMakeLists.txt), shared memory as the CUDA guide lists it.
#pragma once

#include <string>
#include <vector>

#include "runtime/device/device_context.h"

namespace deltatune::testing {

struct TestGpu {
    std::string name;
    GpuArch arch;
};

inline TestGpu v100() {
    return {"V100", {70, 0, 0, 96 * 1024}};
}
inline TestGpu a100() {
    return {"A100", {80, 80, 80, 163 * 1024}};
}
inline TestGpu l40s() {
    return {"L40S", {89, 80, 80, 99 * 1024}};
}
inline TestGpu h200() {
    return {"H200", hopper_gpu_arch()};
}
// An H100 running the portable build (DELTATUNE_CUDA_TARGETS=portable): the driver's JIT.
inline TestGpu h100_portable() {
    return {"H100 (portable build)", {90, 80, 90, 227 * 1024}};
}
inline TestGpu b200() {
    return {"B200", {100, 80, 100, 227 * 1024}};
}
inline TestGpu rtx5090() {
    return {"RTX 5090", {120, 80, 120, 99 * 1024}};
}

inline std::vector<TestGpu> test_gpus() {
    return {v100(), a100(), l40s(), h200(), h100_portable(), b200(), rtx5090()};
}

}  // namespace deltatune::testing
