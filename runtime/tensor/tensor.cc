// Tensor storage management and the few copies the runtime needs (contiguous, dtype, device).
#include "runtime/tensor/tensor.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#if DELTATUNE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace deltatune {

std::string Device::to_string() const {
    return type == DeviceType::kCpu ? std::string("cpu") : absl::StrCat("cuda:", index);
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
    std::vector<int64_t> s(shape.size());
    int64_t acc = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        s[i] = acc;
        acc *= shape[i];
    }
    return s;
}

namespace {

int64_t count(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

absl::StatusOr<std::shared_ptr<Storage>> allocate(size_t bytes, Device device) {
    if (device.is_cpu()) {
        // 64-byte alignment for vector loads; aligned_alloc needs a multiple of the alignment.
        const size_t rounded = ((bytes + 63) / 64) * 64;
        void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
        if (!p)
            return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
        return std::make_shared<Storage>(p, bytes, device, [](void* q) { std::free(q); });
    }
#if DELTATUNE_HAVE_CUDA
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(device.index);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    cudaSetDevice(prev);
    if (err != cudaSuccess) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "cudaMalloc(", bytes, ") on ", device.to_string(), ": ", cudaGetErrorString(err)));
    }
    return std::make_shared<Storage>(p, bytes, device, [](void* q) { cudaFree(q); });
#else
    return absl::UnimplementedError("this build has no CUDA support (DELTATUNE_CUDA=OFF)");
#endif
}

// Copies a strided CPU tensor element by element into contiguous `dst`.
void gather_strided(const Tensor& src, char* dst) {
    const size_t es = dtype_size(src.dtype());
    const auto& shape = src.shape();
    const auto& strides = src.strides();
    const char* base = static_cast<const char*>(src.raw_data());
    std::vector<int64_t> idx(shape.size(), 0);
    const int64_t n = src.numel();
    for (int64_t i = 0; i < n; ++i) {
        int64_t off = 0;
        for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
        std::memcpy(dst + static_cast<size_t>(i) * es, base + off * static_cast<int64_t>(es), es);
        for (size_t d = shape.size(); d-- > 0;) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

}  // namespace

absl::StatusOr<Tensor> Tensor::empty(std::vector<int64_t> shape, DType dtype, Device device) {
    for (int64_t d : shape) {
        if (d < 0) return absl::InvalidArgumentError("negative dimension in tensor shape");
    }
    Tensor t;
    auto storage = allocate(static_cast<size_t>(count(shape)) * dtype_size(dtype), device);
    if (!storage.ok()) return storage.status();
    t.storage_ = *std::move(storage);
    t.strides_ = contiguous_strides(shape);
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    return t;
}

Tensor Tensor::cpu(std::vector<int64_t> shape, DType dtype) {
    auto t = empty(std::move(shape), dtype, Device::cpu());
    DT_CHECK(t.ok()) << t.status().ToString();
    std::memset(t->raw_data(), 0, t->nbytes());
    return *std::move(t);
}

Tensor Tensor::cpu_from(std::vector<int64_t> shape, std::span<const float> values) {
    Tensor t = cpu(std::move(shape), DType::kF32);
    DT_CHECK(static_cast<int64_t>(values.size()) == t.numel());
    std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));
    return t;
}

Tensor Tensor::wrap(std::shared_ptr<Storage> storage, size_t byte_offset,
                    std::vector<int64_t> shape, DType dtype) {
    Tensor t;
    t.storage_ = std::move(storage);
    t.offset_ = byte_offset;
    t.strides_ = contiguous_strides(shape);
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    DT_CHECK(byte_offset + t.nbytes() <= t.storage_->bytes());
    return t;
}

int64_t Tensor::size(int64_t d) const {
    if (d < 0) d += dim();
    DT_CHECK(d >= 0 && d < dim()) << "dim " << d << " of a " << dim() << "-d tensor";
    return shape_[static_cast<size_t>(d)];
}

int64_t Tensor::numel() const {
    return count(shape_);
}

bool Tensor::is_contiguous() const {
    int64_t acc = 1;
    for (size_t i = shape_.size(); i-- > 0;) {
        if (shape_[i] != 1 && strides_[i] != acc) return false;
        acc *= shape_[i];
    }
    return true;
}

std::string Tensor::shape_string() const {
    return absl::StrCat("[", absl::StrJoin(shape_, ", "), "]");
}

void* Tensor::raw_data() const {
    DT_CHECK(storage_ != nullptr) << "undefined tensor";
    return static_cast<char*>(storage_->data()) + offset_;
}

Tensor Tensor::view(std::vector<int64_t> shape) const {
    DT_CHECK(is_contiguous()) << "view of a non-contiguous tensor";
    DT_CHECK(count(shape) == numel())
        << "view " << absl::StrJoin(shape, "x") << " of " << shape_string();
    Tensor t = *this;
    t.strides_ = contiguous_strides(shape);
    t.shape_ = std::move(shape);
    return t;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
    if (d < 0) d += dim();
    DT_CHECK(d >= 0 && d < dim());
    const auto ud = static_cast<size_t>(d);
    DT_CHECK(start >= 0 && length >= 0 && start + length <= shape_[ud])
        << "narrow [" << start << ", " << start + length << ") of size " << shape_[ud];
    Tensor t = *this;
    t.offset_ += static_cast<size_t>(start * strides_[ud]) * dtype_size(dtype_);
    t.shape_[ud] = length;
    return t;
}

Tensor Tensor::contiguous() const {
    if (is_contiguous()) return *this;
    DT_CHECK(device().is_cpu()) << "strided copy on " << device().to_string();
    Tensor out = cpu(shape_, dtype_);
    gather_strided(*this, static_cast<char*>(out.raw_data()));
    return out;
}

absl::StatusOr<Tensor> Tensor::to_dtype(DType to) const {
    if (!device().is_cpu()) return absl::UnimplementedError("dtype conversion runs on CPU tensors");
    const Tensor src = contiguous();
    Tensor out = cpu(shape_, to);
    const int64_t n = numel();
    auto load = [&](int64_t i) -> double {
        switch (dtype_) {
            case DType::kF32:
                return static_cast<const float*>(src.raw_data())[i];
            case DType::kBF16:
                return bf16_bits_to_float(static_cast<const uint16_t*>(src.raw_data())[i]);
            case DType::kF16:
                return f16_bits_to_float(static_cast<const uint16_t*>(src.raw_data())[i]);
            case DType::kI32:
                return static_cast<const int32_t*>(src.raw_data())[i];
            case DType::kI64:
                return static_cast<double>(static_cast<const int64_t*>(src.raw_data())[i]);
        }
        return 0;
    };
    const bool src_int = dtype_ == DType::kI32 || dtype_ == DType::kI64;
    const bool dst_int = to == DType::kI32 || to == DType::kI64;
    if (src_int != dst_int) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot convert ", dtype_name(dtype_), " to ", dtype_name(to)));
    }
    for (int64_t i = 0; i < n; ++i) {
        switch (to) {
            case DType::kF32: {
                // fp32 -> fp32 through double is exact; 16-bit sources are exact in fp32.
                static_cast<float*>(out.raw_data())[i] = static_cast<float>(load(i));
                break;
            }
            case DType::kBF16:
                static_cast<uint16_t*>(out.raw_data())[i] =
                    float_to_bf16_bits(static_cast<float>(load(i)));
                break;
            case DType::kF16:
                static_cast<uint16_t*>(out.raw_data())[i] =
                    float_to_f16_bits(static_cast<float>(load(i)));
                break;
            case DType::kI32:
                static_cast<int32_t*>(out.raw_data())[i] =
                    dtype_ == DType::kI64
                        ? static_cast<int32_t>(static_cast<const int64_t*>(src.raw_data())[i])
                        : static_cast<const int32_t*>(src.raw_data())[i];
                break;
            case DType::kI64:
                static_cast<int64_t*>(out.raw_data())[i] =
                    dtype_ == DType::kI64 ? static_cast<const int64_t*>(src.raw_data())[i]
                                          : static_cast<const int32_t*>(src.raw_data())[i];
                break;
        }
    }
    return out;
}

absl::StatusOr<Tensor> Tensor::to_device(Device device) const {
    if (device == this->device()) return contiguous();
#if DELTATUNE_HAVE_CUDA
    const Tensor src = this->device().is_cpu() ? contiguous() : *this;
    if (!src.is_contiguous()) return absl::UnimplementedError("strided device copy");
    auto out = empty(shape_, dtype_, device);
    if (!out.ok()) return out.status();
    const cudaError_t err =
        cudaMemcpy(out->raw_data(), src.raw_data(), nbytes(), cudaMemcpyDefault);
    if (err != cudaSuccess) {
        return absl::InternalError(
            absl::StrCat("cudaMemcpy to ", device.to_string(), ": ", cudaGetErrorString(err)));
    }
    return out;
#else
    return absl::UnimplementedError("this build has no CUDA support (DELTATUNE_CUDA=OFF)");
#endif
}

absl::StatusOr<Tensor> Tensor::to_cpu_f32() const {
    auto host = to_device(Device::cpu());
    if (!host.ok()) return host.status();
    if (host->dtype() == DType::kF32) return host;
    return host->to_dtype(DType::kF32);
}

void Tensor::fill_zero() {
    DT_CHECK(is_contiguous());
    if (device().is_cpu()) {
        std::memset(raw_data(), 0, nbytes());
        return;
    }
#if DELTATUNE_HAVE_CUDA
    DT_CHECK(cudaMemset(raw_data(), 0, nbytes()) == cudaSuccess);
#endif
}

}  // namespace deltatune
