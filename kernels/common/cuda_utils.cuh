// Device helpers shared by the .cu files: warp/block sums, 16-byte bf16 packs, and the
// deterministic column-partial reduction used for weight gradients (dw += sum of per-block rows).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

namespace deltatune::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `scratch` holds 32 floats; the fixed tree order makes it deterministic.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

// Eight bf16 values moved as one 16-byte access: element 2i in the low half of w[i]. load8 and
// store8 go through uint4 so that the access is one 128-bit instruction (through the struct's
// members it compiled to four 32-bit accesses, or eight 16-bit ones, in some kernels).
struct alignas(16) Bf16x8 {
    uint32_t w[4];
};

__device__ __forceinline__ void unpack8(const Bf16x8& p, float (&f)[8]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(p.w[i] << 16);  // bf16 is the high half of an fp32
        f[2 * i + 1] = __uint_as_float(p.w[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ Bf16x8 pack8(const float (&f)[8]) {
    Bf16x8 p;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
        p.w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    return p;
}

__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[8]) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    unpack8(Bf16x8{{raw.x, raw.y, raw.z, raw.w}}, f);
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&f)[8]) {
    const Bf16x8 v = pack8(f);
    *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
}

// Four bf16 values as one 8-byte access (the same layout, half as wide).
__device__ __forceinline__ void unpack4(const uint2& raw, float (&f)[4]) {
    f[0] = __uint_as_float(raw.x << 16);
    f[1] = __uint_as_float(raw.x & 0xffff0000u);
    f[2] = __uint_as_float(raw.y << 16);
    f[3] = __uint_as_float(raw.y & 0xffff0000u);
}

__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&f)[4]) {
    unpack4(*reinterpret_cast<const uint2*>(p), f);
}

__device__ __forceinline__ void store4(__nv_bfloat16* p, const float (&f)[4]) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(f[0], f[1]);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(f[2], f[3]);
    *reinterpret_cast<uint2*>(p) = make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                                              *reinterpret_cast<const uint32_t*>(&hi));
}

// V consecutive bf16 values as floats (V = 8: one 16-byte access; 4: one 8-byte access; 1:
// scalar), for kernels templated on whether a row's alignment allows wide accesses.
template <int V>
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&f)[V]) {
    if constexpr (V == 8) {
        load8(p, f);
    } else if constexpr (V == 4) {
        load4(p, f);
    } else {
        f[0] = __bfloat162float(*p);
    }
}

template <int V>
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&f)[V]) {
    if constexpr (V == 8) {
        store8(p, f);
    } else if constexpr (V == 4) {
        store4(p, f);
    } else {
        *p = __float2bfloat16_rn(f[0]);
    }
}

// Asynchronous 16-byte global-to-shared copy (cp.async, L2 only): a thread's copies are grouped
// by cp_async_commit and waited for with cp_async_wait<N> (all but the N newest groups done);
// they occupy no registers while in flight.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Threads per block for a kernel that sweeps a row of `vecs` vectors: the fewest passes over the
// row with at most 512 threads, then as few threads (whole warps, at least 64) as cover it in
// that many passes, so that no thread makes one more pass than the others (27B's 5120 columns,
// 640 vectors of 8: 320 threads x 2 passes, where 256 threads made 3 and 2).
inline int row_threads(int64_t vecs) {
    const int64_t passes = (vecs + 511) / 512;
    const int64_t threads = ((vecs + passes - 1) / passes + 31) / 32 * 32;
    return static_cast<int>(threads < 64 ? 64 : threads);
}

inline bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Whether rows of `cols` bf16 values can move V at a time (load_vec / store_vec): cols a multiple
// of V and every row pointer given (null ones skipped) aligned to the 2V-byte access.
template <int V>
inline bool vectorizable(int64_t cols, std::initializer_list<const void*> rows) {
    if (cols % V != 0) return false;
    for (const void* p : rows) {
        if (p && reinterpret_cast<uintptr_t>(p) % (2 * V) != 0) return false;
    }
    return true;
}

// n rounded up to 256: where workspace regions start.
inline size_t align256(size_t n) {
    return (n + 255) / 256 * 256;
}

// dw[c] += sum over p of partials[p * cols + c]: the second, deterministic pass of every
// weight-gradient reduction (the first pass writes one row of partials per block). A block
// covers 32 columns with 32 rows of threads: thread row y sums parts y, y + 32, ... (coalesced
// 128-byte rows), then row 0 adds the 32 sums in order, so the result depends only on `parts`.
constexpr int kPartialsCols = 32, kPartialsRows = 32;

template <int kUnused = 0>
__global__ void column_partials_accumulate_kernel(float* dw, const float* partials, int parts,
                                                  int cols) {
    __shared__ float sums[kPartialsRows][kPartialsCols + 1];
    const int c = blockIdx.x * kPartialsCols + threadIdx.x;
    float s = 0.0f;
    if (c < cols) {
        for (int p = threadIdx.y; p < parts; p += kPartialsRows) {
            s += partials[static_cast<int64_t>(p) * cols + c];
        }
    }
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) return;
    float total = 0.0f;
    for (int y = 0; y < kPartialsRows; ++y) total += sums[y][threadIdx.x];
    dw[c] += total;
}

inline cudaError_t column_partials_accumulate(float* dw, const float* partials, int parts, int cols,
                                              cudaStream_t stream) {
    const dim3 block(kPartialsCols, kPartialsRows);
    column_partials_accumulate_kernel<<<(cols + kPartialsCols - 1) / kPartialsCols, block, 0,
                                        stream>>>(dw, partials, parts, cols);
    return cudaGetLastError();
}

// Programmatic dependent launch, the device side (sm_90+; the portable code compiles for sm_80,
// where launch_dependent launches plainly and these are empty). The kernel before lets its
// dependent's blocks start:
__device__ __forceinline__ void allow_dependent_launch() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
// and the dependent waits, before it reads what the kernel before wrote, until that is done.
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) as the programmatic dependent of the
// kernel before it on the stream: its blocks may start once every block of that kernel has run
// allow_dependent_launch (or exited), and must run wait_for_prerequisite_grid before reading
// what that kernel writes. Where the kernel's loaded code was built without those instructions
// (the portable code, also when the driver compiles it for a Hopper GPU) the launch is plain.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args&&... args) {
    cudaFuncAttributes attrs{};
    if (cudaError_t e = cudaFuncGetAttributes(&attrs, kernel); e != cudaSuccess) return e;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute early;
    early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &early;
    config.numAttrs = attrs.ptxVersion >= 90 ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace deltatune::cuda
