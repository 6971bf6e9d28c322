// CPU reference for the token embedding: row gather forward, scatter-add backward.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "kernels/embedding/embedding.h"

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

void embedding_id_order(const int32_t* ids, int64_t tokens, int32_t* sorted_ids,
                        int32_t* sorted_tokens) {
    // LSD radix sort on 11-bit digits (stable per pass), as many passes as the largest id needs.
    constexpr int kBits = 11;
    constexpr int32_t kMask = (1 << kBits) - 1;
    const auto n = static_cast<size_t>(tokens);
    int32_t largest = 0;
    for (size_t t = 0; t < n; ++t) largest = std::max(largest, ids[t]);
    std::vector<int32_t> keys(ids, ids + n), order(n), keys_tmp(n), order_tmp(n);
    for (size_t t = 0; t < n; ++t) order[t] = static_cast<int32_t>(t);
    for (int shift = 0; shift == 0 || (shift < 31 && (largest >> shift) > 0); shift += kBits) {
        std::array<size_t, kMask + 2> at{};
        for (size_t t = 0; t < n; ++t) ++at[static_cast<size_t>((keys[t] >> shift) & kMask) + 1];
        for (size_t d = 1; d < at.size(); ++d) at[d] += at[d - 1];
        for (size_t t = 0; t < n; ++t) {
            const size_t to = at[static_cast<size_t>((keys[t] >> shift) & kMask)]++;
            keys_tmp[to] = keys[t];
            order_tmp[to] = order[t];
        }
        keys.swap(keys_tmp);
        order.swap(order_tmp);
    }
    std::copy(keys.begin(), keys.end(), sorted_ids);
    std::copy(order.begin(), order.end(), sorted_tokens);
}

template void embedding_forward_ref<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void embedding_forward_ref<double>(double*, const double*, const int32_t*, int64_t,
                                            int64_t);
template void embedding_backward_ref<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void embedding_backward_ref<double>(double*, const double*, const int32_t*, int64_t,
                                             int64_t);

}  // namespace deltatune
