// Tests of the embedding reference: exact gather, scatter-add with repeated ids, FD gradient.
#include "kernels/embedding/embedding.h"

#include <algorithm>
#include <random>
#include <vector>

#include "tests/common/fd.h"

namespace deltatune::test {
namespace {

constexpr int64_t kVocab = 11;
constexpr int64_t kHidden = 13;
// Repeated ids (3 three times, 7 twice) exercise the accumulation.
const std::vector<int32_t> kIds = {3, 0, 7, 3, 10, 7, 3, 5, 1};
const int64_t kTokens = static_cast<int64_t>(kIds.size());

TEST_CASE("embedding forward gathers table rows", "[kernels][embedding]") {
    Rng rng(11);
    const Vec table = rng.normal(kVocab * kHidden);
    Vec out = nans(kTokens * kHidden);
    embedding_forward_ref(out.data(), table.data(), kIds.data(), kTokens, kHidden);
    for (int64_t t = 0; t < kTokens; ++t) {
        for (int64_t c = 0; c < kHidden; ++c) {
            REQUIRE(out[t * kHidden + c] == table[kIds[t] * kHidden + c]);
        }
    }
}

TEST_CASE("embedding backward accumulates into the table", "[kernels][embedding]") {
    Rng rng(12);
    const Vec dout = rng.normal(kTokens * kHidden);
    const Vec dtable0 = rng.normal(kVocab * kHidden);
    Vec dtable = dtable0;
    embedding_backward_ref(dtable.data(), dout.data(), kIds.data(), kTokens, kHidden);
    for (int64_t r = 0; r < kVocab; ++r) {
        for (int64_t c = 0; c < kHidden; ++c) {
            double expected = dtable0[r * kHidden + c];
            for (int64_t t = 0; t < kTokens; ++t) {
                expected += kIds[t] == r ? dout[t * kHidden + c] : 0.0;
            }
            REQUIRE(dtable[r * kHidden + c] == Approx(expected).epsilon(1e-14));
        }
    }
}

TEST_CASE("embedding backward matches finite differences", "[kernels][embedding][fd]") {
    Rng rng(13);
    Vec table = rng.normal(kVocab * kHidden);
    const Vec weights = rng.normal(kTokens * kHidden);
    auto loss = [&] {
        Vec out(static_cast<size_t>(kTokens * kHidden));
        embedding_forward_ref(out.data(), table.data(), kIds.data(), kTokens, kHidden);
        return dot(weights, out);
    };
    const Vec dtable0 = rng.normal(kVocab * kHidden);
    Vec dtable = dtable0;
    embedding_backward_ref(dtable.data(), weights.data(), kIds.data(), kTokens, kHidden);
    check_gradients("embedding", loss, {{"table", &table, minus(dtable, dtable0)}});
}

TEST_CASE("embedding float agrees with double", "[kernels][embedding]") {
    Rng rng(14);
    const Vec table = rng.normal(kVocab * kHidden);
    const Vec dout = rng.normal(kTokens * kHidden);
    Vec out = nans(kTokens * kHidden);
    Vec dtable(static_cast<size_t>(kVocab * kHidden), 0.0);
    embedding_forward_ref(out.data(), table.data(), kIds.data(), kTokens, kHidden);
    embedding_backward_ref(dtable.data(), dout.data(), kIds.data(), kTokens, kHidden);
    const auto table_f = cast<float>(table);
    const auto dout_f = cast<float>(dout);
    auto out_f = nans<float>(kTokens * kHidden);
    std::vector<float> dtable_f(static_cast<size_t>(kVocab * kHidden), 0.0f);
    embedding_forward_ref(out_f.data(), table_f.data(), kIds.data(), kTokens, kHidden);
    embedding_backward_ref(dtable_f.data(), dout_f.data(), kIds.data(), kTokens, kHidden);
    CHECK(rel_diff(out_f, out) < 1e-6);
    CHECK(rel_diff(dtable_f, dtable) < 1e-6);
}

TEST_CASE("embedding_id_order is a stable sort of the positions by id", "[kernels][embedding]") {
    std::mt19937 rng(5);
    // Vocabularies needing one, two and three 11-bit digits (Qwen3.5's 248,320 needs two);
    // empty, one-token and repeat-heavy batches.
    for (int64_t vocab : {int64_t{7}, int64_t{2048}, int64_t{248320}, (int64_t{1} << 31) - 1}) {
        for (int64_t tokens : {0, 1, 33, 8192}) {
            INFO("vocab " << vocab << ", tokens " << tokens);
            std::vector<int32_t> ids(static_cast<size_t>(tokens));
            for (auto& id : ids) {
                id = static_cast<int32_t>(rng() % 2 ? rng() % 5
                                                    : rng() % static_cast<uint32_t>(vocab));
            }
            std::vector<int32_t> expect(ids.size());
            for (size_t t = 0; t < expect.size(); ++t) expect[t] = static_cast<int32_t>(t);
            std::stable_sort(expect.begin(), expect.end(), [&](int32_t a, int32_t b) {
                return ids[static_cast<size_t>(a)] < ids[static_cast<size_t>(b)];
            });
            std::vector<int32_t> sorted_ids(ids.size(), -1), sorted_tokens(ids.size(), -1);
            embedding_id_order(ids.data(), tokens, sorted_ids.data(), sorted_tokens.data());
            CHECK(sorted_tokens == expect);
            bool ids_match = true;
            for (size_t i = 0; i < ids.size(); ++i) {
                ids_match = ids_match && sorted_ids[i] == ids[static_cast<size_t>(expect[i])];
            }
            CHECK(ids_match);
        }
    }
}

}  // namespace
}  // namespace deltatune::test
