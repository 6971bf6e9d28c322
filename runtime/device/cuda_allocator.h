// Stream-ordered caching allocator on a CUDA memory pool: allocations are cudaMallocFromPoolAsync
// on one pool per device whose release threshold is "never", so freed blocks stay cached in the
// pool and are reused by later allocations in stream order without touching the driver.
// DeviceMemory is the owning handle (freed on its stream when it goes out of scope).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUmemPoolHandle_st;

namespace deltatune {

class CudaAllocator;

// Owns `bytes` of device memory; movable, not copyable. Freed (stream-ordered) on destruction.
class DeviceMemory {
  public:
    DeviceMemory() = default;
    DeviceMemory(DeviceMemory&& o) noexcept { *this = std::move(o); }
    DeviceMemory& operator=(DeviceMemory&& o) noexcept;
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
    ~DeviceMemory() { reset(); }

    void* get() const { return ptr_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }
    void reset();  // frees now (stream-ordered)

  private:
    friend class CudaAllocator;
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
    CudaAllocator* owner_ = nullptr;
    cudaStream_t stream_ = nullptr;
};

class CudaAllocator {
  public:
    // Creates the device's pool (ResourceExhausted / Internal on CUDA errors).
    static absl::StatusOr<std::unique_ptr<CudaAllocator>> create(int device);
    ~CudaAllocator();

    // `bytes` rounded up to 256; the memory is usable by work queued on `stream` after this call
    // and is freed on that stream. ResourceExhausted when the device is full. Contents undefined.
    absl::StatusOr<DeviceMemory> allocate(size_t bytes, cudaStream_t stream);

    int64_t bytes_in_use() const { return in_use_; }
    int64_t peak_bytes() const { return peak_; }

  private:
    friend class DeviceMemory;
    CudaAllocator() = default;
    void release(void* p, size_t bytes, cudaStream_t stream);
    CUmemPoolHandle_st* pool_ = nullptr;
    int device_ = 0;
    int64_t in_use_ = 0;
    int64_t peak_ = 0;
};

}  // namespace deltatune
