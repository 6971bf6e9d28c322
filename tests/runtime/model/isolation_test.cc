// Packing isolation: a packed batch yields the same per-document logits as each document run
// alone, and changing one document never changes another's outputs. This is what transformers'
// torch fallback gets wrong (conv window and recurrent state leak across documents).
#include <catch2/catch.hpp>

#include <cmath>

#include "runtime/model/hf_model_io.h"
#include "runtime/model/qwen35_cpu_model.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

double max_relative_error(const float* a, const float* b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
        num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / den);
}

std::vector<Document> documents(int64_t vocab, std::vector<int> lengths, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<Document> docs;
    for (int n : lengths) {
        Document d;
        for (int i = 0; i < n; ++i) d.input_ids.push_back(static_cast<int32_t>(rng() % vocab));
        d.labels = d.input_ids;
        docs.push_back(d);
    }
    return docs;
}

void check_isolation(const std::string& fixture) {
    auto model = load_hf_model(testing::source_path("tests/fixtures/parity/" + fixture));
    REQUIRE(model.ok());
    const int64_t V = model->config.vocab_size;
    // One-token documents, a document shorter than the conv kernel, lengths off any tile size.
    const auto docs = documents(V, {1, 3, 70, 2, 33, 1, 5}, 7);
    auto packed = pack_documents(docs, V);
    REQUIRE(packed.ok());
    Qwen35CpuModel net(model->config, model->params);
    auto all = net.logits(*packed);
    REQUIRE(all.ok());
    for (size_t d = 0; d < docs.size(); ++d) {
        auto alone = pack_documents({docs[d]}, V);
        REQUIRE(alone.ok());
        auto single = net.logits(*alone);
        REQUIRE(single.ok());
        const int64_t start = packed->cu_seqlens[d];
        const double err =
            max_relative_error(all->data() + start * V, single->data(), alone->tokens() * V);
        INFO(fixture << " document " << d << " of length " << alone->tokens());
        CHECK(err < 1e-6);
    }
    // Changing the first document's tokens must leave every later document's logits untouched.
    auto changed = docs;
    for (auto& id : changed[2].input_ids) id = static_cast<int32_t>((id + 1) % V);
    auto repacked = pack_documents(changed, V);
    REQUIRE(repacked.ok());
    auto other = net.logits(*repacked);
    REQUIRE(other.ok());
    const int64_t after = packed->cu_seqlens[3];
    for (int64_t i = after * V; i < packed->tokens() * V; ++i) REQUIRE((*other)[i] == (*all)[i]);
    bool differs = false;
    for (int64_t i = packed->cu_seqlens[2] * V; i < after * V; ++i)
        differs |= (*other)[i] != (*all)[i];
    CHECK(differs);
}

TEST_CASE("packed logits equal per-document logits (tiny-a)", "[model][isolation]") {
    check_isolation("tiny-a");
}
TEST_CASE("packed logits equal per-document logits (tiny-b)", "[model][isolation]") {
    check_isolation("tiny-b");
}

TEST_CASE("labels shift inside each document and never across a boundary", "[model]") {
    std::vector<Document> docs = {{{5, 6, 7}, {-100, 6, 7}}, {{8}, {8}}, {{9, 10}, {9, 10}}};
    auto b = pack_documents(docs, 20);
    REQUIRE(b.ok());
    CHECK(b->targets == std::vector<int32_t>{6, 7, -100, -100, 10, -100});
    CHECK(b->position_ids == std::vector<int32_t>{0, 1, 2, 0, 0, 1});
    CHECK(b->cu_seqlens == std::vector<int32_t>{0, 3, 4, 6});
    CHECK(b->label_tokens() == 3);
}

TEST_CASE("bad batches are rejected with the document and position", "[model]") {
    auto out_of_vocab = pack_documents({{{1, 99}, {1, 99}}}, 50);
    REQUIRE_FALSE(out_of_vocab.ok());
    CHECK(out_of_vocab.status().message() ==
          "document 0 position 1: token id 99 outside the vocabulary [0, 50)");
    auto mismatch = pack_documents({{{1, 2}, {1}}}, 50);
    REQUIRE_FALSE(mismatch.ok());
    CHECK(std::string(mismatch.status().message()).find("1 labels for 2 input_ids") !=
          std::string::npos);
    auto parsed = parse_batch_json(R"({"documents": [{"input_ids": [1, "x"]}]})", "b.json");
    REQUIRE_FALSE(parsed.ok());
    CHECK(std::string(parsed.status().message()).find("b.json: documents[0].input_ids[1]") !=
          std::string::npos);
}

}  // namespace
}  // namespace deltatune
