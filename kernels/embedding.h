// Token embedding: gather rows of the table (forward) and scatter-add into them (backward).
// CPU references (T = float or double); the CUDA kernels will join them here.
#pragma once
#include <cstdint>

namespace deltatune {

// out: (tokens, hidden) = table[ids[t], :]; table: (vocab, hidden). ids must be in [0, vocab).
template <typename T>
void embedding_forward_ref(T* out, const T* table, const int32_t* ids, int64_t tokens,
                           int64_t hidden);
// dtable (vocab, hidden) += dout rows scattered by ids (repeated ids accumulate).
template <typename T>
void embedding_backward_ref(T* dtable, const T* dout, const int32_t* ids, int64_t tokens,
                            int64_t hidden);

}  // namespace deltatune
