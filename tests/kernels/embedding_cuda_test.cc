// Embedding CUDA kernels against the fp32 reference ([cuda]; skipped with a printed reason where
// no GPU is present): the gather is an exact copy, and the sorted scatter-add adds in token order
// exactly as the reference does, so both must match bit for bit.
#include <catch2/catch.hpp>

#include "kernels/embedding.h"
#include "tests/kernels/cuda_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
using namespace cudatest;

TEST_CASE("embedding CUDA forward and backward match the reference exactly", "[kernels][cuda]") {
    if (!have_gpu()) return;
    std::mt19937 rng(11);
    const int64_t vocab = 1000;
    for (int64_t hidden : {8, 77, 136, 2048}) {
        for (int64_t tokens : {1, 3, 300, 2049}) {
            INFO("hidden = " << hidden << ", tokens = " << tokens);
            // Half the ids from a tiny range so many repeat; the rest anywhere in the vocabulary.
            std::vector<int32_t> ids(static_cast<size_t>(tokens));
            for (size_t t = 0; t < ids.size(); ++t) {
                ids[t] = static_cast<int32_t>(t % 2 ? rng() % 7 : rng() % vocab);
            }
            const Bf16Data table = random_bf16(static_cast<size_t>(vocab * hidden), rng);
            DeviceBuffer<uint16_t> d_table(table.bits);
            DeviceBuffer<int32_t> d_ids(ids);
            DeviceBuffer<uint16_t> d_out(static_cast<size_t>(tokens * hidden));
            d_out.poison();
            REQUIRE(embedding_forward(bf16_ptr(d_out), bf16_ptr(d_table), d_ids.get(), tokens,
                                      hidden, nullptr) == cudaSuccess);
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
            DeviceBuffer<uint16_t> d_dout(dout.bits);
            const size_t ws_bytes = embedding_backward_workspace_bytes(tokens);
            DeviceBuffer<char> ws(ws_bytes);
            for (int rep = 0; rep < 2; ++rep) {  // twice: the result must not move
                DeviceBuffer<float> d_dtable(dtable0);
                ws.poison();
                REQUIRE(embedding_backward(d_dtable.get(), bf16_ptr(d_dout), d_ids.get(), tokens,
                                           hidden, vocab, ws.get(), ws_bytes,
                                           nullptr) == cudaSuccess);
                const auto got = d_dtable.download();
                int64_t bad = 0;
                for (size_t i = 0; i < got.size(); ++i) bad += !(got[i] == ref[i]);
                CHECK(bad == 0);
            }
        }
    }
}
#else
TEST_CASE("embedding CUDA forward and backward match the reference exactly", "[kernels][cuda]") {
    WARN("skipped: built without CUDA");
}
#endif

}  // namespace
}  // namespace deltatune
