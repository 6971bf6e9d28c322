// Embedding CUDA kernels against the fp32 reference ([cuda]; skipped with a printed reason where
// no GPU is present): the gather is an exact copy, and the sorted scatter-add adds in token order
// exactly as the reference does wherever an id's rows are summed in one piece (within the fp32
// summation bound elsewhere), and bit for bit the same on every run, sorting on the device or
// given the host's order.
#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/embedding/embedding.h"
#include "tests/kernels/common/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

TEST_CASE("embedding CUDA forward and backward match the reference", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(11);
    struct Case {
        int64_t hidden, tokens, vocab;
        int top_share = 2;  // 1 in top_share tokens takes its id anywhere, the rest from the top 7
    };
    std::vector<Case> cases;
    // 5120 and 9000: rows of 640 and 1125 16-byte groups, one and three per thread (row_threads).
    for (int64_t hidden : {8, 77, 136, 2048, 5120, 9000}) {
        for (int64_t tokens : {1, 3, 300, 2049}) cases.push_back({hidden, tokens, 1000});
    }
    // The sort's three paths and their edges: one block of 8 and of 16 keys per thread (up to
    // 8192 and 16384 tokens), CUB's device sort past that; a power-of-two vocabulary, where the
    // padding key equals the largest id.
    for (int64_t tokens : {8192, 8193, 16384, 16385}) cases.push_back({136, tokens, 1024});
    // The top 7 ids on 63 of 64 positions: each id's run crosses ~72 chunks of 32, more than the
    // 32 lanes that count them in one step of the pieces' pass.
    cases.push_back({136, 16384, 1024, 64});
    for (const Case& k : cases) {
        const int64_t hidden = k.hidden, tokens = k.tokens, vocab = k.vocab;
        INFO("hidden = " << hidden << ", tokens = " << tokens << ", vocab = " << vocab);
        // Most ids from the top 7 (many repeats, and the largest id); 1 in top_share anywhere.
        std::vector<int32_t> ids(static_cast<size_t>(tokens));
        for (size_t t = 0; t < ids.size(); ++t) {
            ids[t] = static_cast<int32_t>(
                t % static_cast<size_t>(k.top_share) != 0 ? vocab - 1 - rng() % 7 : rng() % vocab);
        }
        const Bf16Data table = random_bf16(static_cast<size_t>(vocab * hidden), rng);
        DeviceBuffer<uint16_t> d_table(table.bits);
        DeviceBuffer<int32_t> d_ids(ids);
        DeviceBuffer<uint16_t> d_out(static_cast<size_t>(tokens * hidden));
        d_out.poison();
        REQUIRE(embedding_forward(bf16_ptr(d_out), bf16_ptr(d_table), d_ids.get(), tokens, hidden,
                                  nullptr) == cudaSuccess);
        const auto out = d_out.download();
        int64_t mismatches = 0;
        for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t c = 0; c < hidden; ++c) {
                mismatches += out[static_cast<size_t>(t * hidden + c)] !=
                              table.bits[static_cast<size_t>(ids[t] * hidden + c)];
            }
        }
        CHECK(mismatches == 0);

        const Bf16Data dout = random_bf16(static_cast<size_t>(tokens * hidden), rng);
        const std::vector<float> dtable0 = random_f32(static_cast<size_t>(vocab * hidden), rng);
        std::vector<float> ref = dtable0;
        embedding_backward_ref(ref.data(), dout.f.data(), ids.data(), tokens, hidden);
        // The kernel sums an id's rows in the reference's order when its sorted positions (start
        // = how many tokens have a smaller id) lie in one chunk of 32; otherwise in pieces, whose
        // rounding the fp32 summation bound covers: terms * 2^-24 * (sum of the terms' magnitudes).
        std::vector<int64_t> count(static_cast<size_t>(vocab)), start(static_cast<size_t>(vocab));
        for (int32_t id : ids) ++count[static_cast<size_t>(id)];
        for (size_t id = 1; id < start.size(); ++id) start[id] = start[id - 1] + count[id - 1];
        std::vector<float> magnitude(dtable0.size()), dout_abs(dout.f.size());
        for (size_t i = 0; i < dtable0.size(); ++i) magnitude[i] = std::fabs(dtable0[i]);
        for (size_t i = 0; i < dout_abs.size(); ++i) dout_abs[i] = std::fabs(dout.f[i]);
        embedding_backward_ref(magnitude.data(), dout_abs.data(), ids.data(), tokens, hidden);
        DeviceBuffer<uint16_t> d_dout(dout.bits);
        const size_t ws_bytes = embedding_backward_workspace_bytes(tokens, hidden);
        DeviceBuffer<char> ws(ws_bytes);
        // The order the GPU model computes on the host, for embedding_backward_sorted.
        std::vector<int32_t> sorted_ids(ids.size()), sorted_tokens(ids.size());
        embedding_id_order(ids.data(), tokens, sorted_ids.data(), sorted_tokens.data());
        DeviceBuffer<int32_t> d_sorted_ids(sorted_ids), d_sorted_tokens(sorted_tokens);
        std::vector<float> first;
        // Twice sorting on the device (the result must not move), then given the host's order
        // (bit for bit the same).
        for (int rep = 0; rep < 3; ++rep) {
            INFO((rep < 2 ? "device sort" : "host order"));
            DeviceBuffer<float> d_dtable(dtable0);
            ws.poison();
            if (rep < 2) {
                REQUIRE(embedding_backward(d_dtable.get(), bf16_ptr(d_dout), d_ids.get(), tokens,
                                           hidden, vocab, ws.get(), ws_bytes,
                                           nullptr) == cudaSuccess);
            } else {
                REQUIRE(embedding_backward_sorted(
                            d_dtable.get(), bf16_ptr(d_dout), d_sorted_ids.get(),
                            d_sorted_tokens.get(), tokens, hidden, ws.get(),
                            embedding_backward_sorted_workspace_bytes(tokens, hidden),
                            nullptr) == cudaSuccess);
            }
            const auto got = d_dtable.download();
            int64_t inexact = 0, out_of_bound = 0, split_ids = 0;
            for (size_t id = 0; id < count.size(); ++id) {
                const bool one_chunk =
                    count[id] == 0 || start[id] / 32 == (start[id] + count[id] - 1) / 32;
                split_ids += !one_chunk;
                const double bound = static_cast<double>(count[id] + 1) * std::ldexp(1.0, -24);
                for (int64_t c = 0; c < hidden; ++c) {
                    const size_t i = id * static_cast<size_t>(hidden) + static_cast<size_t>(c);
                    inexact += one_chunk && !(got[i] == ref[i]);
                    out_of_bound += !(std::fabs(got[i] - ref[i]) <= bound * magnitude[i]);
                }
            }
            CHECK(inexact == 0);
            CHECK(out_of_bound == 0);
            if (tokens >= 2049) CHECK(split_ids > 0);  // the pieces' pass is exercised
            if (rep == 0) {
                first = got;
            } else {
                CHECK(got == first);
            }
        }
    }
}
#else
TEST_CASE("embedding CUDA forward and backward match the reference", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
