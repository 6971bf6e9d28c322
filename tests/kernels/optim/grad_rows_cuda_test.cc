// Gradient rows known to be zero: marking and zeroing them against the CPU references, and the
// gradient norm and AdamW under a RowMask, which must give the bits of the unmasked kernels on
// zeroed rows without reading those rows (they hold NaN here) ([cuda]).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/optim/adamw.h"
#include "kernels/optim/grad_norm.h"
#include "kernels/optim/grad_rows.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

std::vector<uint32_t> bits(const std::vector<float>& v) {
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
}

TEST_CASE("marking and zeroing gradient rows match the reference", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(71);
    for (int64_t row_len : {12, 4100, 7}) {  // 7: the scalar path
        INFO("row_len " << row_len);
        const int64_t rows = 1000, n = 300;
        std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(rows) - 1);
        std::vector<int32_t> ids(n);
        for (auto& x : ids) x = id(rng);
        ids[1] = ids[0];  // a repeated id
        std::vector<uint8_t> touched(rows, 0);
        mark_rows_ref(touched.data(), ids.data(), n);
        DeviceBuffer<int32_t> d_ids(ids);
        DeviceBuffer<uint8_t> d_touched(std::vector<uint8_t>(rows, 0));
        REQUIRE(mark_rows(d_touched.get(), d_ids.get(), n, nullptr) == cudaSuccess);
        CHECK(d_touched.download() == touched);

        std::vector<float> grad = random_f32(static_cast<size_t>(rows * row_len), rng);
        DeviceBuffer<float> d_grad(grad);
        zero_marked_rows_ref(grad.data(), touched.data(), rows, row_len);
        REQUIRE(zero_marked_rows(d_grad.get(), d_touched.get(), rows, row_len, nullptr) ==
                cudaSuccess);
        CHECK(bits(d_grad.download()) == bits(grad));
        CHECK(d_touched.download() == std::vector<uint8_t>(rows, 0));
    }
}

// One tensor: a head of unmasked values, masked rows (every third one touched), a tail. Rows at
// least a chunk long take the kernels' per-chunk path, shorter ones the per-access lookup.
struct MaskedTensor {
    int64_t begin, rows, row_len, n;
    std::vector<float> zeroed, poisoned;  // untouched rows 0 / NaN
    std::vector<uint8_t> touched;

    MaskedTensor(std::mt19937& rng, int64_t begin_, int64_t rows_, int64_t row_len_)
        : begin(begin_), rows(rows_), row_len(row_len_), n(begin_ + rows_ * row_len_ + 333) {
        zeroed = random_f32(static_cast<size_t>(n), rng, 0.1f);
        touched.assign(static_cast<size_t>(rows), 0);
        for (int64_t r = 1; r < rows; r += 3) touched[static_cast<size_t>(r)] = 1;
        poisoned = zeroed;
        for (int64_t r = 0; r < rows; ++r) {
            if (touched[static_cast<size_t>(r)]) continue;
            for (int64_t i = 0; i < row_len; ++i) {
                const auto at = static_cast<size_t>(begin + r * row_len + i);
                zeroed[at] = 0.0f;
                poisoned[at] = std::numeric_limits<float>::quiet_NaN();
            }
        }
    }
    RowMask mask(const uint8_t* d_touched) const {
        RowMask m;
        m.touched = d_touched, m.begin = begin, m.rows = rows, m.row_len = row_len;
        REQUIRE(row_mask_valid(m));
        return m;
    }
};

// Rows of 4100 from mid-chunk (a chunk meets two rows), and rows of 100 (many per chunk).
std::vector<MaskedTensor> masked_tensors(std::mt19937& rng) {
    std::vector<MaskedTensor> ts;
    ts.emplace_back(rng, 4100, 7, 4100);
    ts.emplace_back(rng, 4000, 90, 100);
    return ts;
}

// AdamW's starting master, moments (v from squares: non-negative) for n values.
struct AdamWStart {
    std::vector<float> p, m, v;
    AdamWStart(size_t n, std::mt19937& rng)
        : p(random_f32(n, rng)), m(random_f32(n, rng, 0.01f)), v(random_f32(n, rng, 1e-3f)) {
        for (auto& x : v) x = x * x;
    }
};

TEST_CASE("the gradient norm under a row mask skips the zero rows, same bits", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(72);
    for (const MaskedTensor& t : masked_tensors(rng)) {
        INFO("row_len " << t.row_len);
        DeviceBuffer<float> zeroed(t.zeroed), poisoned(t.poisoned);
        DeviceBuffer<uint8_t> d_touched(t.touched);
        auto norm = [&](const float* g, RowMask mask) {
            std::vector<GradNormTensor> ts = {{g, t.n, 0, mask}};
            const int64_t chunks = grad_norm_plan_chunks(ts.data(), 1);
            DeviceBuffer<GradNormTensor> d_ts(ts);
            const size_t wsb = grad_norm_workspace_bytes(chunks);
            DeviceBuffer<char> ws(wsb);
            DeviceBuffer<float> out(2);
            REQUIRE(global_grad_norm(out.get(), out.get() + 1, d_ts.get(), 1, chunks, 1.0f,
                                     ws.get(), wsb, nullptr) == cudaSuccess);
            return out.download();
        };
        const auto dense = norm(zeroed.get(), RowMask{});
        const auto masked = norm(poisoned.get(), t.mask(d_touched.get()));
        CHECK(std::isfinite(dense[0]));
        CHECK(bits(masked) == bits(dense));
    }
}

TEST_CASE("AdamW under a row mask updates the zero rows unread, same bits", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(73);
    AdamWHyper hyper;
    hyper.lr = 1e-3;
    hyper.weight_decay = 0.1;
    DeviceBuffer<float> scale(std::vector<float>{0.5f});
    struct Out {
        std::vector<float> p, m, v;
        std::vector<uint16_t> half;
    };
    for (const MaskedTensor& t : masked_tensors(rng)) {
        INFO("row_len " << t.row_len);
        const size_t n = static_cast<size_t>(t.n);
        const AdamWStart start(n, rng);
        auto run = [&](const std::vector<float>& grad, RowMask mask) {
            DeviceBuffer<float> p(start.p), m(start.m), v(start.v), g(grad);
            DeviceBuffer<uint16_t> half(n);
            half.poison();
            std::vector<AdamWTensorArgs> ts = {
                {p.get(), m.get(), v.get(), g.get(), bf16_ptr(half), t.n, 0, mask}};
            const int64_t chunks = adamw_plan_chunks(ts.data(), 1);
            DeviceBuffer<AdamWTensorArgs> d_ts(ts);
            for (int64_t step = 1; step <= 2; ++step) {
                REQUIRE(adamw_multi_tensor_step(d_ts.get(), 1, chunks, hyper, step, scale.get(),
                                                nullptr) == cudaSuccess);
            }
            return Out{p.download(), m.download(), v.download(), half.download()};
        };
        DeviceBuffer<uint8_t> d_touched(t.touched);
        const Out dense = run(t.zeroed, RowMask{});
        const Out masked = run(t.poisoned, t.mask(d_touched.get()));
        CHECK(bits(masked.p) == bits(dense.p));
        CHECK(bits(masked.m) == bits(dense.m));
        CHECK(bits(masked.v) == bits(dense.v));
        CHECK(masked.half == dense.half);
        CHECK(std::isfinite(dense.p[static_cast<size_t>(t.begin)]));
    }
}

// Three steps whose touched rows change (and whose learning rate does), once updating every row
// each step and once deferring the untouched rows: caught up before the rows are used, as
// FsdpGpuParams does, and all at the end. Same bits.
TEST_CASE("AdamW's deferred zero-gradient steps, caught up, equal every step's",
          "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(74);
    DeviceBuffer<float> scale(std::vector<float>{0.5f});
    for (const MaskedTensor& t : masked_tensors(rng)) {
        INFO("row_len " << t.row_len);
        const size_t n = static_cast<size_t>(t.n);
        const AdamWStart start(n, rng);
        const auto g_all = random_f32(n, rng, 0.1f);
        // The rows each step touches: all, then two, then one.
        const std::vector<std::vector<int32_t>> touched_by_step = {
            [&] {
                std::vector<int32_t> all(static_cast<size_t>(t.rows));
                for (int32_t r = 0; r < static_cast<int32_t>(t.rows); ++r) all[r] = r;
                return all;
            }(),
            {1, 4},
            {2}};
        auto hyper_of = [](int64_t step) {
            AdamWHyper h;
            h.lr = 1e-3 / static_cast<double>(step);
            h.weight_decay = 0.1;
            return h;
        };
        DeviceBuffer<float> pe(start.p), me(start.m), ve(start.v), pl(start.p), ml(start.m),
            vl(start.v);
        DeviceBuffer<uint16_t> he(n), hl(n);
        DeviceBuffer<AdamWStepScalars> table(touched_by_step.size());
        DeviceBuffer<int32_t> row_pos(std::vector<int32_t>(static_cast<size_t>(t.rows), 0));
        int32_t len = 0;
        for (size_t k = 0; k < touched_by_step.size(); ++k) {
            const int64_t step = static_cast<int64_t>(k) + 1;
            std::vector<uint8_t> touched(static_cast<size_t>(t.rows), 0);
            for (int32_t r : touched_by_step[k]) touched[static_cast<size_t>(r)] = 1;
            std::vector<float> g = g_all;  // zero in the untouched rows
            for (int64_t r = 0; r < t.rows; ++r) {
                if (touched[static_cast<size_t>(r)]) continue;
                for (int64_t i = 0; i < t.row_len; ++i) {
                    g[static_cast<size_t>(t.begin + r * t.row_len + i)] = 0.0f;
                }
            }
            DeviceBuffer<float> d_g(g);
            DeviceBuffer<uint8_t> d_touched(touched);
            std::vector<AdamWTensorArgs> eager = {
                {pe.get(), me.get(), ve.get(), d_g.get(), bf16_ptr(he), t.n, 0}};
            std::vector<AdamWTensorArgs> lazy = {{pl.get(), ml.get(), vl.get(), d_g.get(),
                                                  bf16_ptr(hl), t.n, 0, t.mask(d_touched.get()),
                                                  /*defer_unmarked=*/true}};
            const int64_t chunks = adamw_plan_chunks(eager.data(), 1);
            adamw_plan_chunks(lazy.data(), 1);
            DeviceBuffer<AdamWTensorArgs> d_eager(eager), d_lazy(lazy);
            REQUIRE(adamw_multi_tensor_step(d_eager.get(), 1, chunks, hyper_of(step), step,
                                            scale.get(), nullptr) == cudaSuccess);
            DeviceBuffer<int32_t> ids(touched_by_step[k]);  // ascending
            REQUIRE(adamw_catch_up_rows(lazy[0], ids.get(), ids.size(), row_pos.get(), table.get(),
                                        len, nullptr) == cudaSuccess);
            REQUIRE(adamw_record_scalars(table.get(), len, hyper_of(step), step, nullptr) ==
                    cudaSuccess);
            REQUIRE(adamw_multi_tensor_step(d_lazy.get(), 1, chunks, hyper_of(step), step,
                                            scale.get(), nullptr) == cudaSuccess);
            ++len;
            REQUIRE(set_marked_rows(row_pos.get(), d_touched.get(), t.rows, len, nullptr) ==
                    cudaSuccess);
        }
        DeviceBuffer<uint8_t> unused(static_cast<size_t>(t.rows));  // catch-up reads no marks
        const AdamWTensorArgs all = {pl.get(),     ml.get(), vl.get(), nullptr,
                                     bf16_ptr(hl), t.n,      0,        t.mask(unused.get())};
        REQUIRE(adamw_catch_up_rows(all, nullptr, 0, row_pos.get(), table.get(), len, nullptr) ==
                cudaSuccess);
        CHECK(bits(pl.download()) == bits(pe.download()));
        CHECK(bits(ml.download()) == bits(me.download()));
        CHECK(bits(vl.download()) == bits(ve.download()));
        const auto half_e = he.download(), half_l = hl.download();
        // The bf16 copy: every element the eager steps wrote (all of them: step 1 touched all).
        CHECK(half_l == half_e);
        CHECK(row_pos.download() == std::vector<int32_t>(static_cast<size_t>(t.rows), len));
    }
}
#else
TEST_CASE("marking and zeroing gradient rows match the reference", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
