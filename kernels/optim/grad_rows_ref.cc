#include <algorithm>

#include "kernels/optim/grad_rows.h"

namespace deltatune {

void mark_rows_ref(uint8_t* touched, const int32_t* ids, int64_t n) {
    for (int64_t i = 0; i < n; ++i) touched[ids[i]] = 1;
}

void zero_marked_rows_ref(float* grad, uint8_t* touched, int64_t rows, int64_t row_len) {
    for (int64_t r = 0; r < rows; ++r) {
        if (!touched[r]) continue;
        std::fill(grad + r * row_len, grad + (r + 1) * row_len, 0.0f);
        touched[r] = 0;
    }
}

void set_marked_rows_ref(int32_t* dst, const uint8_t* touched, int64_t rows, int32_t value) {
    for (int64_t r = 0; r < rows; ++r) {
        if (touched[r]) dst[r] = value;
    }
}

}  // namespace deltatune
