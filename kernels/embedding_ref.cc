// CPU reference for the token embedding: row gather forward, scatter-add backward.
#include <cstring>

#include "kernels/embedding.h"

namespace deltatune {

template <typename T>
void embedding_forward_ref(T* out, const T* table, const int32_t* ids, int64_t tokens,
                           int64_t hidden) {
    for (int64_t t = 0; t < tokens; ++t) {
        const T* row = table + static_cast<int64_t>(ids[t]) * hidden;
        std::memcpy(out + t * hidden, row, sizeof(T) * static_cast<size_t>(hidden));
    }
}

template <typename T>
void embedding_backward_ref(T* dtable, const T* dout, const int32_t* ids, int64_t tokens,
                            int64_t hidden) {
    // Tokens in order, so repeated ids accumulate in a fixed, reproducible order.
    for (int64_t t = 0; t < tokens; ++t) {
        T* row = dtable + static_cast<int64_t>(ids[t]) * hidden;
        const T* d = dout + t * hidden;
        for (int64_t c = 0; c < hidden; ++c) {
            row[c] += d[c];
        }
    }
}

template void embedding_forward_ref<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void embedding_forward_ref<double>(double*, const double*, const int32_t*, int64_t,
                                            int64_t);
template void embedding_backward_ref<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void embedding_backward_ref<double>(double*, const double*, const int32_t*, int64_t,
                                             int64_t);

}  // namespace deltatune
