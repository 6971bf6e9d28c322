// CudaAllocator on cudaMemPool_t (stream-ordered allocation, cached by the pool).
#include "runtime/device/cuda_allocator.h"

#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/device/cuda_status.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune {

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
        reset();
        ptr_ = o.ptr_;
        bytes_ = o.bytes_;
        owner_ = o.owner_;
        stream_ = o.stream_;
        o.ptr_ = nullptr;
        o.bytes_ = 0;
        o.owner_ = nullptr;
    }
    return *this;
}

void DeviceMemory::reset() {
    if (ptr_ && owner_) owner_->release(ptr_, bytes_, stream_);
    ptr_ = nullptr;
    bytes_ = 0;
    owner_ = nullptr;
}

#if DELTATUNE_HAVE_CUDA

absl::StatusOr<std::unique_ptr<CudaAllocator>> CudaAllocator::create(int device) {
    std::unique_ptr<CudaAllocator> a(new CudaAllocator());
    a->device_ = device;
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    DT_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&pool, &props));
    a->pool_ = pool;
    // Keep freed memory in the pool for reuse instead of returning it at every synchronisation.
    uint64_t threshold = UINT64_MAX;
    DT_CUDA_RETURN_IF_ERROR(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    return a;
}

CudaAllocator::~CudaAllocator() {
    if (pool_) cudaMemPoolDestroy(pool_);
}

absl::StatusOr<DeviceMemory> CudaAllocator::allocate(size_t bytes, cudaStream_t stream) {
    const size_t rounded = (bytes + 255) / 256 * 256;
    DeviceMemory m;
    if (rounded > 0) {
        void* p = nullptr;
        const cudaError_t e = cudaMallocFromPoolAsync(&p, rounded, pool_, stream);
        if (e != cudaSuccess) {
            cudaGetLastError();
            if (e == cudaErrorMemoryAllocation) {
                return absl::ResourceExhaustedError(
                    absl::StrCat("CUDA device ", device_, ": out of memory allocating ", rounded,
                                 " bytes (", in_use_, " bytes in use)"));
            }
            return cuda_status(e, "cudaMallocFromPoolAsync", __FILE__, __LINE__);
        }
        m.ptr_ = p;
        in_use_ += static_cast<int64_t>(rounded);
        if (in_use_ > peak_) peak_ = in_use_;
    }
    m.bytes_ = rounded;
    m.owner_ = this;
    m.stream_ = stream;
    return m;
}

void CudaAllocator::release(void* p, size_t bytes, cudaStream_t stream) {
    cudaFreeAsync(p, stream);
    in_use_ -= static_cast<int64_t>(bytes);
}

#else

absl::StatusOr<std::unique_ptr<CudaAllocator>> CudaAllocator::create(int) {
    return absl::FailedPreconditionError("built without CUDA");
}
CudaAllocator::~CudaAllocator() = default;
absl::StatusOr<DeviceMemory> CudaAllocator::allocate(size_t, cudaStream_t) {
    return absl::FailedPreconditionError("built without CUDA");
}
void CudaAllocator::release(void*, size_t, cudaStream_t) {}

#endif

}  // namespace deltatune
