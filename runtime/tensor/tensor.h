// Tensor: a shape, strides (in elements), a dtype and a reference-counted storage on the CPU or a
// CUDA device. Views share storage. Host-side element access (data<T>) checks dtype and device.
// Shape letters used across the runtime: T tokens, H hidden, V vocab, D head dim, L layers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/base/check.h"
#include "runtime/tensor/dtype.h"

namespace deltatune {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
    DeviceType type = DeviceType::kCpu;
    int index = 0;
    static Device cpu() { return {}; }
    static Device cuda(int i) { return {DeviceType::kCuda, i}; }
    bool is_cpu() const { return type == DeviceType::kCpu; }
    bool operator==(const Device&) const = default;
    std::string to_string() const;
};

// Bytes owned on one device; the deleter releases them (free, cudaFree, munmap...).
class Storage {
  public:
    Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter)
        : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}
    ~Storage() {
        if (deleter_) deleter_(data_);
    }
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;
    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }
    Device device() const { return device_; }

  private:
    void* data_;
    size_t bytes_;
    Device device_;
    std::function<void(void*)> deleter_;
};

template <typename T>
constexpr bool dtype_matches(DType d) {
    if constexpr (std::is_same_v<T, float>) return d == DType::kF32;
    if constexpr (std::is_same_v<T, int32_t>) return d == DType::kI32;
    if constexpr (std::is_same_v<T, int64_t>) return d == DType::kI64;
    if constexpr (std::is_same_v<T, uint16_t>) return d == DType::kBF16 || d == DType::kF16;
    return false;
}

class Tensor {
  public:
    Tensor() = default;

    // Uninitialised storage. CUDA allocation failures are ResourceExhausted.
    static absl::StatusOr<Tensor> empty(std::vector<int64_t> shape, DType dtype,
                                        Device device = Device::cpu());
    // CPU helpers for the reference path; allocation failure here is a bug-level abort.
    static Tensor cpu(std::vector<int64_t> shape, DType dtype = DType::kF32);  // zero-filled
    static Tensor cpu_from(std::vector<int64_t> shape, std::span<const float> values);
    // Wraps memory owned elsewhere (e.g. an mmap); `owner` keeps it alive.
    static Tensor wrap(std::shared_ptr<Storage> storage, size_t byte_offset,
                       std::vector<int64_t> shape, DType dtype);

    bool defined() const { return storage_ != nullptr; }
    const std::vector<int64_t>& shape() const { return shape_; }
    const std::vector<int64_t>& strides() const { return strides_; }
    int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
    int64_t size(int64_t d) const;
    DType dtype() const { return dtype_; }
    Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
    int64_t numel() const;
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
    bool is_contiguous() const;
    std::string shape_string() const;  // "[2, 3]"

    void* raw_data() const;
    template <typename T>
    T* data() const {
        DT_CHECK(dtype_matches<T>(dtype_)) << "tensor dtype is " << dtype_name(dtype_);
        DT_CHECK(device().is_cpu()) << "host access to a tensor on " << device().to_string();
        return static_cast<T*>(raw_data());
    }

    // A view of contiguous data with a new shape of the same element count.
    Tensor view(std::vector<int64_t> shape) const;
    // Elements [start, start + length) along `dim`, sharing storage.
    Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
    // Contiguous copy on the same device (a no-op share when already contiguous).
    Tensor contiguous() const;
    // Copy converted to `dtype` (CPU only: float formats and integers among themselves).
    absl::StatusOr<Tensor> to_dtype(DType dtype) const;
    // Copy to `device` (contiguous). Without a CUDA build, CUDA devices are Unimplemented.
    absl::StatusOr<Tensor> to_device(Device device) const;
    // fp32 contiguous CPU copy of a float tensor of any float dtype on any device.
    absl::StatusOr<Tensor> to_cpu_f32() const;

    void fill_zero();  // CPU or CUDA, contiguous only

  private:
    std::shared_ptr<Storage> storage_;
    size_t offset_ = 0;  // bytes into storage
    std::vector<int64_t> shape_;
    std::vector<int64_t> strides_;
    DType dtype_ = DType::kF32;
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

}  // namespace deltatune
