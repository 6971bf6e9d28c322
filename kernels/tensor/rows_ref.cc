// CPU reference of the row gather.
#include <algorithm>
#include <cstdint>

#include "kernels/tensor/rows.h"

namespace deltatune {

template <typename T>
void gather_rows_ref(T* out, const T* in, const int32_t* idx, int64_t n, int64_t cols) {
    for (int64_t i = 0; i < n; ++i) {
        T* row = out + i * cols;
        if (idx[i] < 0) {
            std::fill(row, row + cols, T{0});
        } else {
            std::copy(in + idx[i] * cols, in + (idx[i] + 1) * cols, row);
        }
    }
}

template void gather_rows_ref<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void gather_rows_ref<double>(double*, const double*, const int32_t*, int64_t, int64_t);
template void gather_rows_ref<uint16_t>(uint16_t*, const uint16_t*, const int32_t*, int64_t,
                                        int64_t);

}  // namespace deltatune
