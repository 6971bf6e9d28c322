// ParamSet: the model's named parameters (Hugging Face text-layout names, e.g.
// "model.layers.3.mlp.up_proj.weight") as fp32 CPU tensors, with the dtype each is stored in on
// disk so an export writes it back unchanged. Gradients and optimizer moments are ParamSets with
// the same names and shapes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace deltatune {

struct NamedParam {
    std::string name;
    Tensor value;  // fp32, CPU, contiguous
    DType stored_dtype = DType::kBF16;
};

class ParamSet {
  public:
    // Adds a zero-filled fp32 parameter (left unwritten with zero_fill false: its pages stay
    // untouched, for sets used only for their names, shapes and distinct addresses). Names must
    // be unique.
    Tensor& add(const std::string& name, std::vector<int64_t> shape, DType stored_dtype,
                bool zero_fill = true);
    bool contains(const std::string& name) const { return index_.count(name) != 0; }
    Tensor& get(const std::string& name);
    const Tensor& get(const std::string& name) const;
    std::vector<NamedParam>& all() { return params_; }
    const std::vector<NamedParam>& all() const { return params_; }
    int64_t numel() const;

    // Same names, shapes and stored dtypes, zero-filled.
    ParamSet zeros_like() const;
    // Deep copy of the values.
    ParamSet clone() const;

  private:
    std::vector<NamedParam> params_;
    std::map<std::string, size_t> index_;
};

}  // namespace deltatune
