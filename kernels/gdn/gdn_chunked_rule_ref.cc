// CPU reference for the gated delta rule in its per-token recurrent form (the same recurrence as
// transformers' torch_recurrent_gated_delta_rule), with a state-replaying backward. The state is
// kept in T; every reduction (state-vector products, dg, dbeta) accumulates in double.
#include <cmath>
#include <vector>

#include "kernels/gdn/gdn_chunked_rule.h"

namespace deltatune {
namespace {

// The per-(token, value head) operands of one step of the recurrence. The state S is (dk x dv),
// row-major, so S[a * dv + b] couples key channel a with value channel b.
template <typename T>
struct Step {
    const T* q;  // (dk)
    const T* k;  // (dk)
    const T* v;  // (dv)
    T g;
    T beta;
};

// out[b] = sum_a S[a * dv + b] x[a] for a (dk x dv) state: a product over dk, summed in double
// in `acc` (dv) and rounded to T once.
template <typename T>
void state_t_times(T* out, std::vector<double>& acc, const T* S, const T* x, int64_t dk,
                   int64_t dv) {
    acc.assign(static_cast<size_t>(dv), 0.0);
    for (int64_t a = 0; a < dk; ++a) {
        const double xa = x[a];
        for (int64_t b = 0; b < dv; ++b) {
            acc[b] += S[a * dv + b] * xa;
        }
    }
    for (int64_t b = 0; b < dv; ++b) {
        out[b] = static_cast<T>(acc[b]);
    }
}

// Runs one step on S in place: S' = exp(g) S; p = S'^T k; delta = beta (v - p); S = S' + k delta^T.
// Leaves p and delta (both dv) behind for the backward.
template <typename T>
void step_state(T* S, T* p, T* delta, std::vector<double>& acc, const Step<T>& s, int64_t dk,
                int64_t dv) {
    const T decay = std::exp(s.g);
    for (int64_t n = 0; n < dk * dv; ++n) {
        S[n] *= decay;
    }
    state_t_times(p, acc, S, s.k, dk, dv);
    for (int64_t b = 0; b < dv; ++b) {
        delta[b] = (s.v[b] - p[b]) * s.beta;
    }
    for (int64_t a = 0; a < dk; ++a) {
        for (int64_t b = 0; b < dv; ++b) {
            S[a * dv + b] += s.k[a] * delta[b];
        }
    }
}

// Gathers the step operands of token t for value head j (key head kh).
template <typename T>
Step<T> step_at(const T* q, const T* k, const T* v, const T* g, const T* beta, int64_t t, int64_t j,
                int64_t kh, int64_t k_heads, int64_t v_heads, int64_t dk, int64_t dv) {
    return Step<T>{q + (t * k_heads + kh) * dk, k + (t * k_heads + kh) * dk,
                   v + (t * v_heads + j) * dv, g[t * v_heads + j], beta[t * v_heads + j]};
}

}  // namespace

template <typename T>
void gated_delta_rule_forward_ref(T* out, const T* q, const T* k, const T* v, const T* g,
                                  const T* beta, const int32_t* cu_seqlens, int64_t num_docs,
                                  int64_t k_heads, int64_t v_heads, int64_t dk, int64_t dv,
                                  T scale) {
    const int64_t ratio = v_heads / k_heads;
    std::vector<T> S(static_cast<size_t>(dk * dv));
    std::vector<T> p(static_cast<size_t>(dv));
    std::vector<T> delta(static_cast<size_t>(dv));
    std::vector<T> qs(static_cast<size_t>(dk));
    std::vector<double> acc;
    for (int64_t d = 0; d < num_docs; ++d) {
        for (int64_t j = 0; j < v_heads; ++j) {
            const int64_t kh = j / ratio;
            for (T& x : S) {
                x = 0;
            }
            for (int64_t t = cu_seqlens[d]; t < cu_seqlens[d + 1]; ++t) {
                const Step<T> s = step_at(q, k, v, g, beta, t, j, kh, k_heads, v_heads, dk, dv);
                step_state(S.data(), p.data(), delta.data(), acc, s, dk, dv);
                // transformers scales q before reading the state: o = S^T (scale * q).
                for (int64_t a = 0; a < dk; ++a) {
                    qs[a] = s.q[a] * scale;
                }
                state_t_times(out + (t * v_heads + j) * dv, acc, S.data(), qs.data(), dk, dv);
            }
        }
    }
}

template <typename T>
void gated_delta_rule_backward_ref(T* dq, T* dk_out, T* dv_out, T* dg, T* dbeta, const T* dout,
                                   const T* q, const T* k, const T* v, const T* g, const T* beta,
                                   const int32_t* cu_seqlens, int64_t num_docs, int64_t k_heads,
                                   int64_t v_heads, int64_t dk, int64_t dv, T scale) {
    const int64_t ratio = v_heads / k_heads;
    const int64_t tokens = cu_seqlens[num_docs];
    const int64_t state_size = dk * dv;
    // dq and dk sum over the `ratio` value heads reading each key head.
    for (int64_t n = 0; n < tokens * k_heads * dk; ++n) {
        dq[n] = 0;
        dk_out[n] = 0;
    }
    std::vector<T> states;  // states[t - begin] = S_{t-1}, the state entering token t
    std::vector<T> S_dec(static_cast<size_t>(state_size));  // S'_t = exp(g_t) S_{t-1}
    std::vector<T> S(static_cast<size_t>(state_size));      // S_t
    std::vector<T> G(static_cast<size_t>(state_size));      // dL/dS_t
    std::vector<T> p(static_cast<size_t>(dv));
    std::vector<T> delta(static_cast<size_t>(dv));
    std::vector<T> ddelta(static_cast<size_t>(dv));
    std::vector<T> dp(static_cast<size_t>(dv));
    std::vector<double> acc;
    for (int64_t d = 0; d < num_docs; ++d) {
        const int64_t begin = cu_seqlens[d];
        const int64_t end = cu_seqlens[d + 1];
        states.resize(static_cast<size_t>((end - begin) * state_size));
        for (int64_t j = 0; j < v_heads; ++j) {
            const int64_t kh = j / ratio;
            // Replay the forward, keeping every entering state.
            for (T& x : S) {
                x = 0;
            }
            for (int64_t t = begin; t < end; ++t) {
                T* saved = states.data() + (t - begin) * state_size;
                for (int64_t n = 0; n < state_size; ++n) {
                    saved[n] = S[n];
                }
                const Step<T> s = step_at(q, k, v, g, beta, t, j, kh, k_heads, v_heads, dk, dv);
                step_state(S.data(), p.data(), delta.data(), acc, s, dk, dv);
            }
            // Nothing after the document's last token depends on its final state.
            for (T& x : G) {
                x = 0;
            }
            for (int64_t t = end - 1; t >= begin; --t) {
                const Step<T> s = step_at(q, k, v, g, beta, t, j, kh, k_heads, v_heads, dk, dv);
                const T* S_prev = states.data() + (t - begin) * state_size;
                const T decay = std::exp(s.g);
                for (int64_t n = 0; n < state_size; ++n) {
                    S_dec[n] = decay * S_prev[n];
                    S[n] = S_prev[n];
                }
                step_state(S.data(), p.data(), delta.data(), acc, s, dk, dv);

                const T* do_t = dout + (t * v_heads + j) * dv;
                T* dq_t = dq + (t * k_heads + kh) * dk;
                T* dk_t = dk_out + (t * k_heads + kh) * dk;
                // o_t = S_t^T (scale q_t): G += (scale q_t) do_t^T and dq_t += scale S_t do_t.
                for (int64_t a = 0; a < dk; ++a) {
                    const T qs = scale * s.q[a];
                    double s_do = 0;
                    for (int64_t b = 0; b < dv; ++b) {
                        G[a * dv + b] += qs * do_t[b];
                        s_do += static_cast<double>(S[a * dv + b]) * do_t[b];
                    }
                    dq_t[a] += static_cast<T>(scale * s_do);
                }
                // S_t = S'_t + k_t delta^T: ddelta = G^T k_t, dk_t += G delta.
                state_t_times(ddelta.data(), acc, G.data(), s.k, dk, dv);
                for (int64_t a = 0; a < dk; ++a) {
                    double g_delta = 0;
                    for (int64_t b = 0; b < dv; ++b) {
                        g_delta += static_cast<double>(G[a * dv + b]) * delta[b];
                    }
                    dk_t[a] += static_cast<T>(g_delta);
                }
                // delta = beta (v - p).
                T* dv_t = dv_out + (t * v_heads + j) * dv;
                double dbeta_t = 0;
                for (int64_t b = 0; b < dv; ++b) {
                    const T dd = ddelta[b];
                    dv_t[b] = s.beta * dd;
                    dbeta_t += static_cast<double>(dd) * (s.v[b] - p[b]);
                    dp[b] = -s.beta * dd;
                }
                dbeta[t * v_heads + j] = static_cast<T>(dbeta_t);
                // p = S'^T k_t: dk_t += S' dp, and dS' = G + k_t dp^T, held in G from here on.
                double dg_t = 0;
                for (int64_t a = 0; a < dk; ++a) {
                    double s_dp = 0;
                    for (int64_t b = 0; b < dv; ++b) {
                        const int64_t n = a * dv + b;
                        s_dp += static_cast<double>(S_dec[n]) * dp[b];
                        G[n] += s.k[a] * dp[b];
                        dg_t += static_cast<double>(G[n]) * S_dec[n];
                    }
                    dk_t[a] += static_cast<T>(s_dp);
                }
                // S' = exp(g) S_{t-1}: dg = <dS', S'>_F, and exp(g) dS' flows back to S_{t-1}.
                dg[t * v_heads + j] = static_cast<T>(dg_t);
                for (T& x : G) {
                    x *= decay;
                }
            }
        }
    }
}

template void gated_delta_rule_forward_ref<float>(float*, const float*, const float*, const float*,
                                                  const float*, const float*, const int32_t*,
                                                  int64_t, int64_t, int64_t, int64_t, int64_t,
                                                  float);
template void gated_delta_rule_forward_ref<double>(double*, const double*, const double*,
                                                   const double*, const double*, const double*,
                                                   const int32_t*, int64_t, int64_t, int64_t,
                                                   int64_t, int64_t, double);
template void gated_delta_rule_backward_ref<float>(float*, float*, float*, float*, float*,
                                                   const float*, const float*, const float*,
                                                   const float*, const float*, const float*,
                                                   const int32_t*, int64_t, int64_t, int64_t,
                                                   int64_t, int64_t, float);
template void gated_delta_rule_backward_ref<double>(double*, double*, double*, double*, double*,
                                                    const double*, const double*, const double*,
                                                    const double*, const double*, const double*,
                                                    const int32_t*, int64_t, int64_t, int64_t,
                                                    int64_t, int64_t, double);

}  // namespace deltatune
