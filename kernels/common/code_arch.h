// Which device code this binary runs on a GPU, and what each kernel family needs of one: plain
// numbers in every build, so that the host's kernel choice (runtime/model/kernel_choice.cc) can
// describe a GPU it does not have. kernels/CMakeLists.txt builds every kernel for the same
// targets: sm_90a SASS (the Hopper kernels: wgmma, TMA, setmaxnreg, programmatic launch) and the
// portable sm_80 SASS and compute_80 PTX, which the driver compiles for GPUs newer than the
// SASS it finds (Blackwell). In the portable code the Hopper-only kernels are empty and never
// launched.
#pragma once

#include <cstdint>

namespace deltatune {

inline constexpr int kHopperCodeArch = 90;    // sm_90a SASS
inline constexpr int kPortableCodeArch = 80;  // sm_80 SASS or compute_80 PTX

// The code the driver loaded for the current device.
struct LoadedCode {
    int arch = 0;    // kHopperCodeArch, kPortableCodeArch, or 0: none this device can run
    int binary = 0;  // the SASS's architecture: arch itself, or a newer GPU's made from PTX
};

#if DELTATUNE_HAVE_CUDA
// Asks the driver about one small kernel built like all the others (cudaFuncGetAttributes:
// about a microsecond; callers on a hot path may keep the answer).
LoadedCode loaded_code();
#endif

}  // namespace deltatune
