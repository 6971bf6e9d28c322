// Work planning for multi-tensor kernels: every tensor is cut into fixed-size chunks, numbered
// consecutively across tensors; a block takes chunks and finds its tensor by binary search.
#pragma once

#include <cstdint>

namespace deltatune {

inline constexpr int64_t kMultiTensorChunk = 4096;  // elements per chunk

// T has fields `n` and `chunk_begin`. Returns the total number of chunks.
template <typename T>
int64_t plan_chunks(T* tensors, int num_tensors) {
    int64_t next = 0;
    for (int i = 0; i < num_tensors; ++i) {
        tensors[i].chunk_begin = next;
        next += (tensors[i].n + kMultiTensorChunk - 1) / kMultiTensorChunk;
    }
    return next;
}

// Rows of a flat fp32 gradient known to be zero: elements [begin, begin + rows * row_len) form
// `rows` rows, and a row whose `touched` byte is 0 holds exact zeros (an embedding's rows that no
// token of the step used). The multi-tensor kernels take such a row's gradient as zero without
// reading it; elements outside the rows are read as usual. touched == nullptr: no mask.
struct RowMask {
    const uint8_t* touched = nullptr;
    int64_t begin = 0, rows = 0, row_len = 0;
};

// What chunk_read relies on: rows starting on 4-element boundaries, so a 16-byte access never
// straddles two.
inline bool row_mask_valid(const RowMask& m) {
    return m.touched && m.begin >= 0 && m.rows > 0 && m.row_len > 0 && m.begin % 4 == 0 &&
           m.row_len % 4 == 0;
}

#ifdef __CUDACC__
// Which elements of a chunk a kernel reads. Rows at least a chunk long (the embedding of a real
// model): those before `split` where `first`, the rest where `second`, one division per chunk.
// Shorter rows (small models): each access looks its row up (`touched` set).
struct ChunkRead {
    const uint8_t* touched;
    int64_t begin, end, row_len;
    int64_t split;
    bool first, second;
    __device__ bool at(int64_t i) const {
        if (touched) return i < begin || i >= end || touched[(i - begin) / row_len] != 0;
        return i < split ? first : second;
    }
};

// The chunk starting at element `chunk_begin`, under mask m.
__device__ __forceinline__ ChunkRead chunk_read(const RowMask& m, int64_t chunk_begin) {
    const int64_t end = m.begin + m.rows * m.row_len;
    if (!m.touched || chunk_begin >= end) return {nullptr, 0, 0, 1, 0, true, true};
    if (m.row_len < kMultiTensorChunk) return {m.touched, m.begin, end, m.row_len, 0, true, true};
    if (chunk_begin < m.begin) return {nullptr, 0, 0, 1, m.begin, true, m.touched[0] != 0};
    const int64_t row = (chunk_begin - m.begin) / m.row_len;
    const bool next = row + 1 < m.rows ? m.touched[row + 1] != 0 : true;
    return {nullptr, 0, 0, 1, m.begin + (row + 1) * m.row_len, m.touched[row] != 0, next};
}

// Index of the last tensor whose chunk_begin <= chunk (tensors with n = 0 own no chunk).
template <typename T>
__device__ __forceinline__ int find_tensor(const T* tensors, int num_tensors, int64_t chunk) {
    int lo = 0;
    int hi = num_tensors - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (tensors[mid].chunk_begin <= chunk) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}
#endif

}  // namespace deltatune
