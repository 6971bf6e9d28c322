// The projections of the CPU reference blocks: the base linear layer and, when an adapter is
// attached (model/lora.h), its LoRA branch.
#include "kernels/mlp/linear.h"
#include "runtime/model/cpu_blocks.h"

namespace deltatune {

void proj_forward(const LayerView& w, Proj p, float* y, const float* x, int64_t rows, int64_t in,
                  int64_t out) {
    linear_forward_ref(y, x, ptr(w.weight(p)), rows, in, out);
    const LoraPair& l = w.lora[static_cast<size_t>(p)];
    if (l.on()) {
        lora_forward_ref(y, x, ptr(l.a), ptr(l.b), rows, in, out, l.a.shape()[0], w.lora_scale);
    }
}

void proj_backward(const LayerView& w, const LayerView& grad, Proj p, float* dx, const float* dy,
                   const float* x, int64_t rows, int64_t in, int64_t out) {
    const Tensor& dw = grad.weight(p);
    linear_backward_ref(dx, dw.defined() ? ptr(dw) : nullptr, dy, x, ptr(w.weight(p)), rows, in,
                        out);
    const LoraPair& l = w.lora[static_cast<size_t>(p)];
    if (!l.on()) return;
    const LoraPair& g = grad.lora[static_cast<size_t>(p)];
    lora_backward_ref(dx, g.on() ? ptr(g.a) : nullptr, g.on() ? ptr(g.b) : nullptr, dy, x, ptr(l.a),
                      ptr(l.b), rows, in, out, l.a.shape()[0], w.lora_scale);
}

}  // namespace deltatune
