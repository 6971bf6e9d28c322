// The loaded-code probe: an empty kernel built for the same targets as every other.
#include "kernels/common/code_arch.h"

#include <cuda_runtime.h>

namespace deltatune {

namespace {

__global__ void code_arch_probe_kernel() {}

}  // namespace

LoadedCode loaded_code() {
    cudaFuncAttributes a{};
    if (cudaFuncGetAttributes(&a, code_arch_probe_kernel) != cudaSuccess) {
        cudaGetLastError();  // no image for this device: not sticky, cleared
        return {};
    }
    // ptxVersion: the virtual architecture the loaded code came from (90 for sm_90a, 80 for the
    // portable code); binaryVersion: the SASS's (the device's own where it came from PTX).
    return {a.ptxVersion >= kHopperCodeArch ? kHopperCodeArch : kPortableCodeArch, a.binaryVersion};
}

}  // namespace deltatune
