// ParamSet storage and copies.
#include "runtime/model/param_set.h"

#include <cstring>

namespace deltatune {

Tensor& ParamSet::add(const std::string& name, std::vector<int64_t> shape, DType stored_dtype,
                      bool zero_fill) {
    DT_CHECK(!contains(name)) << "duplicate parameter " << name;
    index_[name] = params_.size();
    Tensor t;
    if (zero_fill) {
        t = Tensor::cpu(std::move(shape), DType::kF32);
    } else {
        auto e = Tensor::empty(std::move(shape), DType::kF32, Device::cpu());
        DT_CHECK(e.ok()) << e.status().ToString();
        t = *std::move(e);
    }
    params_.push_back({name, std::move(t), stored_dtype});
    return params_.back().value;
}

Tensor& ParamSet::get(const std::string& name) {
    auto it = index_.find(name);
    DT_CHECK(it != index_.end()) << "no parameter " << name;
    return params_[it->second].value;
}

const Tensor& ParamSet::get(const std::string& name) const {
    auto it = index_.find(name);
    DT_CHECK(it != index_.end()) << "no parameter " << name;
    return params_[it->second].value;
}

int64_t ParamSet::numel() const {
    int64_t n = 0;
    for (const auto& p : params_) n += p.value.numel();
    return n;
}

ParamSet ParamSet::zeros_like() const {
    ParamSet out;
    for (const auto& p : params_) out.add(p.name, p.value.shape(), p.stored_dtype);
    return out;
}

ParamSet ParamSet::clone() const {
    ParamSet out = zeros_like();
    for (size_t i = 0; i < params_.size(); ++i) {
        std::memcpy(out.params_[i].value.raw_data(), params_[i].value.raw_data(),
                    params_[i].value.nbytes());
    }
    return out;
}

}  // namespace deltatune
