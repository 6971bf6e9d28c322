// The benchmark's CPU side (runtime/train/benchmark.h): its synthetic steps are the same
// documents per step whatever the world size divides them into, every token trained (or, for the
// chat workload, all but each document's prompt), within the budget; --layers continues the
// published layer pattern. The GPU run itself is checked on the
// GPU machine (`deltatune bench`).
#include <catch2/catch.hpp>

#include "runtime/train/benchmark.h"

namespace deltatune {
namespace {

Qwen35Config tiny_model() {
    Qwen35Config c;
    c.vocab_size = 1000;
    c.num_layers = 4;
    c.layer_types = {LayerType::kLinearAttention, LayerType::kLinearAttention,
                     LayerType::kLinearAttention, LayerType::kFullAttention};
    return c;
}

TEST_CASE("synthetic steps: the same documents per step at any world size", "[train]") {
    const Qwen35Config model = tiny_model();
    constexpr int64_t kSteps = 3, kTokens = 2048;
    auto one = synthetic_steps(model, kSteps, 4, 1, 0, kTokens, 5);
    REQUIRE(one.ok());
    REQUIRE(one->batches.size() == 12);
    REQUIRE(one->doc_lengths.size() == 12);
    REQUIRE(one->global_labels.size() == kSteps);
    for (size_t i = 0; i < one->batches.size(); ++i) {
        const PackedBatch& b = one->batches[i];
        CHECK(b.tokens() <= kTokens);
        // Every token with a next one in its document is trained.
        const auto docs = static_cast<int64_t>(one->doc_lengths[i].size());
        CHECK(b.label_tokens() == b.tokens() - docs);
        int64_t sum = 0;
        for (int64_t len : one->doc_lengths[i]) sum += len;
        CHECK(sum == b.tokens());
    }
    for (int64_t s = 0; s < kSteps; ++s) {
        int64_t labels = 0;
        for (int64_t k = 0; k < 4; ++k) {
            labels += one->batches[static_cast<size_t>(s * 4 + k)].label_tokens();
        }
        CHECK(one->global_labels[static_cast<size_t>(s)] == labels);
    }
    // Two ranks of two micro-batches each: rank r holds micro-batches 2r, 2r+1 of every step.
    for (int rank = 0; rank < 2; ++rank) {
        auto part = synthetic_steps(model, kSteps, 2, 2, rank, kTokens, 5);
        REQUIRE(part.ok());
        CHECK(part->global_labels == one->global_labels);
        REQUIRE(part->batches.size() == 6);
        for (int64_t s = 0; s < kSteps; ++s) {
            for (int64_t k = 0; k < 2; ++k) {
                const auto& mine = part->batches[static_cast<size_t>(s * 2 + k)];
                const auto& all = one->batches[static_cast<size_t>(s * 4 + rank * 2 + k)];
                CHECK(mine.input_ids == all.input_ids);
                CHECK(mine.cu_seqlens == all.cu_seqlens);
            }
        }
    }
    auto other_seed = synthetic_steps(model, kSteps, 4, 1, 0, kTokens, 6);
    REQUIRE(other_seed.ok());
    CHECK(other_seed->batches[0].input_ids != one->batches[0].input_ids);
}

TEST_CASE("synthetic steps, chat workload: the same documents, their prompts unlabeled",
          "[train]") {
    const Qwen35Config model = tiny_model();
    auto all = synthetic_steps(model, 2, 1, 1, 0, 4096, 5);
    auto chat = synthetic_steps(model, 2, 1, 1, 0, 4096, 5, kChatPromptFraction);
    REQUIRE(all.ok());
    REQUIRE(chat.ok());
    int64_t tokens = 0, labels = 0;
    for (size_t i = 0; i < all->batches.size(); ++i) {
        const PackedBatch& a = all->batches[i];
        const PackedBatch& c = chat->batches[i];
        CHECK(c.input_ids == a.input_ids);
        int64_t start = 0;
        for (int64_t len : chat->doc_lengths[i]) {  // prompt: unlabeled; reply: as before
            const auto prompt = static_cast<int64_t>(kChatPromptFraction * len);
            for (int64_t t = 0; t < len; ++t) {
                const size_t at = static_cast<size_t>(start + t);
                // targets[t] is labels[t + 1]: the prompt's tokens are no target
                if (t + 1 < prompt) CHECK(c.targets[at] == -100);
                if (t + 1 >= prompt) CHECK(c.targets[at] == a.targets[at]);
            }
            start += len;
        }
        tokens += c.tokens();
        labels += c.label_tokens();
    }
    const double unlabeled = 1.0 - static_cast<double>(labels) / static_cast<double>(tokens);
    CHECK(unlabeled > 0.29);
    CHECK(unlabeled < 0.32);
}

TEST_CASE("with_layers cuts the list or continues linear x3, full", "[train]") {
    const Qwen35Config c = tiny_model();
    const Qwen35Config cut = with_layers(c, 2);
    CHECK(cut.num_layers == 2);
    CHECK(cut.layer_types.size() == 2);
    const Qwen35Config grown = with_layers(c, 9);
    CHECK(grown.num_layers == 9);
    const auto L = LayerType::kLinearAttention, F = LayerType::kFullAttention;
    CHECK(grown.layer_types == std::vector<LayerType>{L, L, L, F, L, L, L, F, L});
}

}  // namespace
}  // namespace deltatune
