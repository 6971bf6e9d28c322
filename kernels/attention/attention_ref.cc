// CPU reference for varlen causal GQA softmax attention (saving the log-sum-exp for backward) and
// the sigmoid output gate of Qwen3.5's full-attention layers. Every sum (dot products, softmax
// denominators, the outputs and gradients summed over keys or queries) accumulates in double
// whatever T is, so the reference's own rounding stays at its outputs'.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention/attention.h"

namespace deltatune {
namespace {

template <typename T>
T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
double dot(const T* a, const T* b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
        s += static_cast<double>(a[i]) * b[i];
    }
    return s;
}

}  // namespace

template <typename T>
void attention_forward_ref(T* out, T* lse, const T* q, const T* k, const T* v,
                           const int32_t* cu_seqlens, int64_t num_docs, int64_t q_heads,
                           int64_t kv_heads, int64_t head_dim, T scale) {
    const int64_t group = q_heads / kv_heads;
    const int64_t q_stride = q_heads * head_dim;
    const int64_t kv_stride = kv_heads * head_dim;
    std::vector<double> scores, acc(static_cast<size_t>(head_dim));
    for (int64_t d = 0; d < num_docs; ++d) {
        const int64_t begin = cu_seqlens[d];
        const int64_t end = cu_seqlens[d + 1];
        scores.resize(static_cast<size_t>(end - begin));
        for (int64_t h = 0; h < q_heads; ++h) {
            const int64_t kvh = h / group;
            for (int64_t i = begin; i < end; ++i) {
                const T* qi = q + i * q_stride + h * head_dim;
                // Scores of the keys begin..i (causal, never leaving the document).
                double max_score = -INFINITY;
                for (int64_t j = begin; j <= i; ++j) {
                    const double s = dot(qi, k + j * kv_stride + kvh * head_dim, head_dim) * scale;
                    scores[static_cast<size_t>(j - begin)] = s;
                    max_score = s > max_score ? s : max_score;
                }
                double sum = 0;
                for (int64_t j = begin; j <= i; ++j) {
                    double& s = scores[static_cast<size_t>(j - begin)];
                    s = std::exp(s - max_score);
                    sum += s;
                }
                lse[i * q_heads + h] = static_cast<T>(max_score + std::log(sum));
                std::fill(acc.begin(), acc.end(), 0.0);
                for (int64_t j = begin; j <= i; ++j) {
                    const double p = scores[static_cast<size_t>(j - begin)] / sum;
                    const T* vj = v + j * kv_stride + kvh * head_dim;
                    for (int64_t c = 0; c < head_dim; ++c) {
                        acc[c] += p * vj[c];
                    }
                }
                T* oi = out + i * q_stride + h * head_dim;
                for (int64_t c = 0; c < head_dim; ++c) {
                    oi[c] = static_cast<T>(acc[c]);
                }
            }
        }
    }
}

template <typename T>
void attention_backward_ref(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                            const T* out, const T* lse, const int32_t* cu_seqlens, int64_t num_docs,
                            int64_t q_heads, int64_t kv_heads, int64_t head_dim, T scale) {
    const int64_t group = q_heads / kv_heads;
    const int64_t q_stride = q_heads * head_dim;
    const int64_t kv_stride = kv_heads * head_dim;
    const int64_t tokens = cu_seqlens[num_docs];
    // dq sums over keys; dk and dv over queries and every query head of their group.
    std::vector<double> dq_acc(static_cast<size_t>(tokens * q_stride), 0.0);
    std::vector<double> dk_acc(static_cast<size_t>(tokens * kv_stride), 0.0);
    std::vector<double> dv_acc(dk_acc.size(), 0.0);
    for (int64_t d = 0; d < num_docs; ++d) {
        const int64_t begin = cu_seqlens[d];
        const int64_t end = cu_seqlens[d + 1];
        for (int64_t h = 0; h < q_heads; ++h) {
            const int64_t kvh = h / group;
            for (int64_t i = begin; i < end; ++i) {
                const T* qi = q + i * q_stride + h * head_dim;
                const T* doi = dout + i * q_stride + h * head_dim;
                double* dqi = dq_acc.data() + i * q_stride + h * head_dim;
                // rowsum(dO * O) is the softmax Jacobian's correction term sum_j P_j dP_j.
                const double delta = dot(doi, out + i * q_stride + h * head_dim, head_dim);
                const double row_lse = lse[i * q_heads + h];
                for (int64_t j = begin; j <= i; ++j) {
                    const T* kj = k + j * kv_stride + kvh * head_dim;
                    const T* vj = v + j * kv_stride + kvh * head_dim;
                    double* dkj = dk_acc.data() + j * kv_stride + kvh * head_dim;
                    double* dvj = dv_acc.data() + j * kv_stride + kvh * head_dim;
                    const double p = std::exp(dot(qi, kj, head_dim) * scale - row_lse);
                    const double dp = dot(doi, vj, head_dim);
                    const double ds = p * (dp - delta);
                    for (int64_t c = 0; c < head_dim; ++c) {
                        dqi[c] += scale * ds * kj[c];
                        dkj[c] += scale * ds * qi[c];
                        dvj[c] += p * doi[c];
                    }
                }
            }
        }
    }
    for (size_t n = 0; n < dq_acc.size(); ++n) dq[n] = static_cast<T>(dq_acc[n]);
    for (size_t n = 0; n < dk_acc.size(); ++n) {
        dk[n] = static_cast<T>(dk_acc[n]);
        dv[n] = static_cast<T>(dv_acc[n]);
    }
}

template <typename T>
void output_gate_forward_ref(T* y, const T* o, const T* gate, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        y[i] = o[i] * sigmoid(gate[i]);
    }
}

template <typename T>
void output_gate_backward_ref(T* d_o, T* dgate, const T* dy, const T* o, const T* gate, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const T sig = sigmoid(gate[i]);
        d_o[i] = dy[i] * sig;
        dgate[i] = dy[i] * o[i] * sig * (T(1) - sig);
    }
}

template void attention_forward_ref<float>(float*, float*, const float*, const float*, const float*,
                                           const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                           float);
template void attention_forward_ref<double>(double*, double*, const double*, const double*,
                                            const double*, const int32_t*, int64_t, int64_t,
                                            int64_t, int64_t, double);
template void attention_backward_ref<float>(float*, float*, float*, const float*, const float*,
                                            const float*, const float*, const float*, const float*,
                                            const int32_t*, int64_t, int64_t, int64_t, int64_t,
                                            float);
template void attention_backward_ref<double>(double*, double*, double*, const double*,
                                             const double*, const double*, const double*,
                                             const double*, const double*, const int32_t*, int64_t,
                                             int64_t, int64_t, int64_t, double);
template void output_gate_forward_ref<float>(float*, const float*, const float*, int64_t);
template void output_gate_forward_ref<double>(double*, const double*, const double*, int64_t);
template void output_gate_backward_ref<float>(float*, float*, const float*, const float*,
                                              const float*, int64_t);
template void output_gate_backward_ref<double>(double*, double*, const double*, const double*,
                                               const double*, int64_t);

}  // namespace deltatune
