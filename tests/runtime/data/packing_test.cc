// The packing sampler: efficiency and the 2D-padding baseline on the benchmark's length
// distribution, budgets, exactly-once per epoch across ranks, rank balance, determinism, resume
// from a serialised cursor, the over-long policies, PackedBatch output and flattened_labels.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "nlohmann/json.hpp"
#include "runtime/data/packing.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

// lognormal(mu, sigma) clipped to [16, 8192] (the benchmark's), from mt19937_64 with our own
// Box-Muller, so the figures do not depend on the standard library's distributions.
std::vector<int64_t> lognormal_lengths(size_t n, uint64_t seed, double mu = 7.0,
                                       double sigma = 0.5) {
    std::mt19937_64 gen(seed);
    auto uniform = [&] { return (static_cast<double>(gen() >> 11) + 0.5) * 0x1.0p-53; };
    std::vector<int64_t> out(n);
    for (int64_t& len : out) {
        const double z = std::sqrt(-2 * std::log(uniform())) * std::cos(2 * M_PI * uniform());
        len = std::clamp<int64_t>(std::llround(std::exp(mu + sigma * z)), 16, 8192);
    }
    return out;
}

Packer make(const std::vector<int64_t>& lengths, PackingOptions opt) {
    auto p = Packer::create(lengths, opt);
    REQUIRE(p.ok());
    return *std::move(p);
}

// The next whole epoch: from an epoch's start, or from the end of the previous one.
std::vector<std::vector<PackedBin>> one_epoch(Packer& p) {
    std::vector<std::vector<PackedBin>> steps{p.next_step()};  // may roll into the next epoch
    REQUIRE(p.step_in_epoch() == 1);
    while (p.step_in_epoch() < p.steps_in_epoch()) steps.push_back(p.next_step());
    return steps;
}

// Checks budgets, one batch per rank, and that the segments tile every document exactly once.
void check_epoch(const std::vector<std::vector<PackedBin>>& steps,
                 const std::vector<int64_t>& lengths, const PackingOptions& opt) {
    std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> pieces;
    for (size_t s = 0; s < steps.size(); ++s) {
        REQUIRE(steps[s].size() == static_cast<size_t>(opt.world_size));
        for (const PackedBin& b : steps[s]) {
            int64_t sum = 0;
            for (const Segment& seg : b.segments) {
                sum += seg.tokens();
                pieces[seg.doc].emplace_back(seg.begin, seg.end);
            }
            REQUIRE(sum == b.tokens);
            REQUIRE(b.tokens <= opt.tokens_per_batch);
            // Only the epoch's last step may leave a rank without a batch.
            if (b.segments.empty()) REQUIRE(s + 1 == steps.size());
        }
    }
    const bool drop = opt.overlong == OverlongPolicy::kDrop;
    const auto kept_docs = std::count_if(lengths.begin(), lengths.end(), [&](int64_t len) {
        return !drop || len <= opt.tokens_per_batch;
    });
    REQUIRE(static_cast<int64_t>(pieces.size()) == kept_docs);
    for (auto& [doc, ranges] : pieces) {
        std::sort(ranges.begin(), ranges.end());
        const int64_t len = lengths[static_cast<size_t>(doc)];
        const int64_t kept =
            opt.overlong == OverlongPolicy::kTruncate ? std::min(len, opt.tokens_per_batch) : len;
        int64_t at = 0;
        for (const auto& [b, e] : ranges) {
            REQUIRE(b == at);  // no gap, no overlap, no repeat
            at = e;
        }
        REQUIRE(at == kept);
    }
}

TEST_CASE("packing efficiency and 2D padding on lognormal(7.0, 0.5) lengths", "[data]") {
    const auto lengths = lognormal_lengths(20000, 0);
    for (int world : {1, 2, 3, 8}) {
        PackingOptions opt;  // the defaults: 8192 tokens, window 1024
        opt.world_size = world;
        Packer p = make(lengths, opt);
        const PackingStats& s = p.epoch_stats();
        const double reduction =
            1.0 - static_cast<double>(s.batches) / static_cast<double>(s.padded_2d_batches);
        std::printf(
            "packing world %d: %lld docs, %lld tokens, %lld batches (2D padding %lld, %.1f%% "
            "fewer), efficiency %.4f, rank max/min worst %.3f mean %.4f, %lld steps, %lld empty\n",
            world, static_cast<long long>(s.documents), static_cast<long long>(s.tokens),
            static_cast<long long>(s.batches), static_cast<long long>(s.padded_2d_batches),
            100 * reduction, s.efficiency, s.rank_balance_worst, s.rank_balance_mean,
            static_cast<long long>(s.steps), static_cast<long long>(s.empty_batches));
        CHECK(s.efficiency >= 0.97);
        CHECK(reduction >= 0.35);
        CHECK(s.rank_balance_mean < 1.01);
        CHECK(s.rank_balance_worst < 1.15);
        CHECK(s.empty_batches < world);
        CHECK(s.batches + s.empty_batches == s.steps * world);
    }
}

TEST_CASE("every document exactly once per epoch, batches within budget", "[data]") {
    const auto lengths = lognormal_lengths(3001, 5);
    for (int world : {1, 2, 3}) {
        for (int64_t window : {1, 100, 5000}) {
            PackingOptions opt;
            opt.world_size = world;
            opt.window = window;
            opt.seed = 11;
            Packer p = make(lengths, opt);
            for (int epoch = 0; epoch < 2; ++epoch) {
                INFO("world " << world << " window " << window << " epoch " << epoch);
                check_epoch(one_epoch(p), lengths, opt);
                REQUIRE(p.epoch() == epoch);
            }
        }
    }
}

TEST_CASE("the last incomplete group gives the remaining ranks an empty batch", "[data]") {
    // Seven documents of 8192 tokens are seven full bins: two steps of three, then one bin.
    PackingOptions opt;
    opt.world_size = 3;
    Packer p = make(std::vector<int64_t>(7, 8192), opt);
    const auto steps = one_epoch(p);
    REQUIRE(steps.size() == 3);
    check_epoch(steps, std::vector<int64_t>(7, 8192), opt);
    int empty = 0;
    for (const PackedBin& b : steps[2]) empty += b.segments.empty();
    CHECK(empty == 2);
    CHECK(p.epoch_stats().empty_batches == 2);
    CHECK(p.epoch_stats().batches == 7);
    TokenStore store;
    for (int i = 0; i < 7; ++i)
        store.append(Document{std::vector<int32_t>(8192, 1), std::vector<int32_t>(8192, 1)});
    const auto data = TokenizedDataset::from_store(std::move(store), {});
    for (const PackedBin& b : steps[2]) {
        auto batch = make_packed_batch(data, b, 10);
        REQUIRE(batch.ok());
        CHECK(batch->tokens() == b.tokens);
        CHECK(batch->num_docs() == static_cast<int64_t>(b.segments.size()));
    }
}

TEST_CASE("the last group is spread over every rank when it has enough segments", "[data]") {
    // Four full bins and one of 300 tokens: one step of three, then [8192, 300] over three ranks.
    const std::vector<int64_t> lengths = {8192, 100, 8192, 100, 8192, 100, 8192};
    PackingOptions opt;
    opt.world_size = 3;
    Packer p = make(lengths, opt);
    const auto steps = one_epoch(p);
    REQUIRE(steps.size() == 2);
    check_epoch(steps, lengths, opt);
    std::vector<int64_t> last;
    for (const PackedBin& b : steps[1]) last.push_back(b.tokens);
    std::sort(last.begin(), last.end());
    CHECK(last == std::vector<int64_t>{100, 200, 8192});
    CHECK(p.epoch_stats().empty_batches == 0);
}

TEST_CASE("packing is deterministic from the seed", "[data]") {
    const auto lengths = lognormal_lengths(2000, 1);
    PackingOptions opt;
    opt.world_size = 2;
    opt.window = 300;
    Packer a = make(lengths, opt), b = make(lengths, opt);
    const auto ea = one_epoch(a);
    CHECK(ea == one_epoch(b));
    CHECK(one_epoch(a) != ea);  // the next epoch is shuffled anew
    opt.seed = 1;
    Packer c = make(lengths, opt);
    CHECK(one_epoch(c) != ea);
}

TEST_CASE("a restored cursor yields exactly the remaining batches", "[data]") {
    const auto lengths = lognormal_lengths(1500, 2);
    for (int world : {1, 3}) {
        PackingOptions opt;
        opt.world_size = world;
        opt.window = 200;  // several windows per epoch
        opt.seed = 42;
        Packer reference = make(lengths, opt);
        const int64_t per_epoch = reference.steps_in_epoch();
        std::vector<std::vector<PackedBin>> run;
        for (int64_t s = 0; s < 2 * per_epoch + 5; ++s) run.push_back(reference.next_step());
        // At the start, mid-window, at a window edge, just before, at and after an epoch edge.
        for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{17}, per_epoch / 2, per_epoch - 1,
                          per_epoch, per_epoch + 1, 2 * per_epoch}) {
            INFO("world " << world << " stop after " << k);
            Packer original = make(lengths, opt);
            for (int64_t s = 0; s < k; ++s) original.next_step();
            const std::string cursor = original.cursor();
            REQUIRE(cursor.size() < 400);
            Packer resumed = make(lengths, opt);
            REQUIRE(resumed.restore(cursor).ok());
            for (size_t s = static_cast<size_t>(k); s < run.size(); ++s)
                REQUIRE(resumed.next_step() == run[s]);
        }
    }
}

TEST_CASE("a cursor for other options or data is refused", "[data]") {
    const auto lengths = lognormal_lengths(500, 3);
    PackingOptions opt;
    opt.world_size = 2;
    Packer p = make(lengths, opt);
    p.next_step();
    const std::string cursor = p.cursor();
    PackingOptions other = opt;
    other.world_size = 3;
    Packer q = make(lengths, other);
    absl::Status s = q.restore(cursor);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(s.message()) ==
          "packing cursor was saved with world_size = 2, this run has 3");
    auto changed = lengths;
    changed[7] += 1;
    Packer r = make(changed, opt);
    CHECK(r.restore(cursor).code() == absl::StatusCode::kFailedPrecondition);
    CHECK(r.restore("{}").code() == absl::StatusCode::kInvalidArgument);
    CHECK(r.restore("not json").code() == absl::StatusCode::kInvalidArgument);
    std::string far = cursor;
    far.replace(far.find("\"step\":1"), 8, "\"step\":9999");
    CHECK(p.restore(far).code() == absl::StatusCode::kInvalidArgument);
    CHECK(p.step_in_epoch() == 1);  // a refused cursor leaves the packer where it was
}

TEST_CASE("over-long documents are truncated, split or dropped, and counted", "[data]") {
    const std::vector<int64_t> lengths = {100, 250, 1000, 99, 1};
    for (OverlongPolicy policy :
         {OverlongPolicy::kTruncate, OverlongPolicy::kSplit, OverlongPolicy::kDrop}) {
        PackingOptions opt;
        opt.tokens_per_batch = 128;
        opt.overlong = policy;
        opt.window = 3;
        Packer p = make(lengths, opt);
        const auto steps = one_epoch(p);
        check_epoch(steps, lengths, opt);
        const PackingStats& s = p.epoch_stats();
        CHECK(s.overlong_documents == 2);
        if (policy == OverlongPolicy::kDrop) {
            CHECK(s.segments == 3);
            CHECK(s.tokens == 100 + 99 + 1);
            CHECK(s.dropped_tokens == 250 + 1000);
        } else if (policy == OverlongPolicy::kTruncate) {
            CHECK(s.segments == 5);
            CHECK(s.tokens == 100 + 128 + 128 + 99 + 1);
            CHECK(s.truncated_tokens == (250 - 128) + (1000 - 128));
        } else {
            CHECK(s.segments == 3 + 2 + 8);  // 250 = 128 + 122, 1000 = 7 x 128 + 104
            CHECK(s.tokens == 100 + 250 + 1000 + 99 + 1);
            CHECK(s.truncated_tokens == 0);
        }
    }
    CHECK(*parse_overlong_policy("split") == OverlongPolicy::kSplit);
    CHECK(*parse_overlong_policy("drop") == OverlongPolicy::kDrop);
    CHECK(parse_overlong_policy("cut").status().message() ==
          "over-long policy: expected split, truncate or drop, got 'cut'");
    PackingOptions all_long;
    all_long.tokens_per_batch = 10;
    all_long.overlong = OverlongPolicy::kDrop;
    CHECK(Packer::create({11, 12}, all_long).status().message() ==
          "packing: all 2 documents are longer than tokens_per_batch (10) and overlong: drop "
          "leaves none");
    CHECK(!Packer::create({}, PackingOptions{}).ok());
    CHECK(!Packer::create({5, 0}, PackingOptions{}).ok());
}

// Times each document appears in one epoch.
std::map<int64_t, int> doc_counts(const std::vector<std::vector<PackedBin>>& steps) {
    std::map<int64_t, int> n;
    for (const auto& step : steps) {
        for (const PackedBin& b : step) {
            for (const Segment& seg : b.segments) ++n[seg.doc];
        }
    }
    return n;
}

TEST_CASE("a mixture takes each group's documents weight times per epoch", "[data]") {
    // Three files of 200, 300 and 100 documents at weights 2, 0.5 and 1.
    const auto lengths = lognormal_lengths(600, 8);
    PackingOptions opt;
    opt.world_size = 2;
    opt.window = 128;
    opt.seed = 3;
    opt.mixture = {{0, 2.0}, {200, 0.5}, {500, 1.0}};
    Packer p = make(lengths, opt);
    std::set<int64_t> halves[2];
    for (int epoch = 0; epoch < 2; ++epoch) {
        INFO("epoch " << epoch);
        const auto steps = one_epoch(p);
        const auto n = doc_counts(steps);
        int64_t second = 0;
        for (int64_t d = 0; d < 600; ++d) {
            const int c = n.count(d) ? n.at(d) : 0;
            if (d < 200) CHECK(c == 2);
            if (d >= 200 && d < 500) {
                CHECK((c == 0 || c == 1));
                if (c) halves[epoch].insert(d), ++second;
            }
            if (d >= 500) CHECK(c == 1);
        }
        CHECK(second == 150);
        CHECK(p.epoch_stats().segments == 400 + 150 + 100);
        for (const auto& step : steps) {
            for (const PackedBin& b : step) CHECK(b.tokens <= opt.tokens_per_batch);
        }
    }
    CHECK(halves[0] != halves[1]);  // a different half each epoch
    // A cursor carries the mixture: another mixture's run refuses it, the same one resumes.
    const std::string cursor = p.cursor();
    PackingOptions other = opt;
    other.mixture[1].weight = 0.25;
    Packer q = make(lengths, other);
    CHECK(q.restore(cursor).code() == absl::StatusCode::kFailedPrecondition);
    Packer r = make(lengths, opt);
    REQUIRE(r.restore(cursor).ok());
    CHECK(r.next_step() == p.next_step());
}

TEST_CASE("all weights 1 plan as no mixture; bad mixtures are refused", "[data]") {
    const auto lengths = lognormal_lengths(300, 9);
    PackingOptions plain;
    plain.seed = 5;
    PackingOptions ones = plain;
    ones.mixture = {{0, 1.0}, {100, 1.0}};
    Packer a = make(lengths, plain), b = make(lengths, ones);
    CHECK(one_epoch(a) == one_epoch(b));
    for (const std::vector<MixtureGroup>& bad :
         {std::vector<MixtureGroup>{{1, 1.0}}, std::vector<MixtureGroup>{{0, 1.0}, {400, 1.0}},
          std::vector<MixtureGroup>{{0, 0.0}}, std::vector<MixtureGroup>{{0, -1.0}},
          std::vector<MixtureGroup>{{0, 0.001}}}) {
        PackingOptions o = plain;
        o.mixture = bad;
        CHECK(Packer::create(lengths, o).status().code() == absl::StatusCode::kInvalidArgument);
    }
}

TEST_CASE("2D padding batches count rows padded to the longest", "[data]") {
    CHECK(count_padded_2d_batches({}, 100) == 0);
    CHECK(count_padded_2d_batches({10, 10, 10, 10}, 40) == 1);
    CHECK(count_padded_2d_batches({10, 30, 10}, 40) == 3);  // 10+30 pads to 2 x 30 = 60 > 40
    CHECK(count_padded_2d_batches({30, 10, 10}, 40) == 2);
    CHECK(count_padded_2d_batches({50, 5}, 40) == 2);  // over-long rows are clipped to the budget
}

TEST_CASE("packed batches and flattened labels follow the Hugging Face convention", "[data]") {
    TokenStore store;
    store.append(Document{{1, 2, 3, 4, 5}, {-100, -100, 3, 4, 5}});
    store.append(Document{{6, 7}, {6, 7}});
    const auto data = TokenizedDataset::from_store(std::move(store), {});
    PackedBin bin;
    bin.segments = {{1, 0, 2}, {0, 1, 4}};  // all of doc 1, then tokens 1..3 of doc 0
    bin.tokens = 5;
    auto batch = make_packed_batch(data, bin, 10);
    REQUIRE(batch.ok());
    CHECK(batch->input_ids == std::vector<int32_t>{6, 7, 2, 3, 4});
    CHECK(batch->cu_seqlens == std::vector<int32_t>{0, 2, 5});
    CHECK(batch->position_ids == std::vector<int32_t>{0, 1, 0, 1, 2});
    CHECK(batch->targets == std::vector<int32_t>{7, -100, 3, 4, -100});
    CHECK(flattened_labels(*batch) == std::vector<int32_t>{-100, 7, -100, 3, 4});
    bin.segments = {{0, 3, 9}};
    CHECK(!make_packed_batch(data, bin, 10).ok());
    auto empty = make_packed_batch(data, PackedBin{}, 10);
    REQUIRE(empty.ok());
    CHECK(empty->tokens() == 0);
    CHECK(empty->num_docs() == 0);
    CHECK(flattened_labels(*empty).empty());
}

TEST_CASE("deltatune pack-stats prints the packing figures as one JSON line", "[data][cli]") {
    testing::TempDir tmp;
    const std::string path = tmp.file("synth.jsonl");
    const auto lengths = lognormal_lengths(400, 9);
    {
        std::ofstream out(path);
        for (int64_t len : lengths) {
            out << "{\"input_ids\": [0";
            for (int64_t i = 1; i < len; ++i) out << "," << i % 97;
            out << "]}\n";
        }
        out << "{\"input_ids\": []}\n";
    }
    std::string out;
    const std::string cmd = testing::cli_path() + " pack-stats --data " + path +
                            " --tokens-per-batch 8192 --window 128 --seed 5 --world-size 2";
    REQUIRE(testing::run_command(cmd + " --bad-lines skip 2>&1", out) == 0);
    const auto j = nlohmann::json::parse(out);
    PackingOptions opt;
    opt.window = 128;
    opt.seed = 5;
    opt.world_size = 2;
    const PackingStats s = make(lengths, opt).epoch_stats();
    CHECK(j["documents"] == 400);
    CHECK(j["tokens"] == s.tokens);
    CHECK(j["batches"] == s.batches);
    CHECK(j["padded_2d_batches"] == s.padded_2d_batches);
    CHECK(j["efficiency"].get<double>() == Approx(s.efficiency));
    CHECK(j["batch_reduction_vs_2d"].get<double>() ==
          Approx(1.0 - static_cast<double>(s.batches) / static_cast<double>(s.padded_2d_batches)));
    CHECK(j["skipped_by_reason"]["empty input_ids"] == 1);
    REQUIRE(testing::run_command(cmd + " 2>&1", out) == 2);  // bad input: the README's status 2
    CHECK(out == "deltatune pack-stats: " + path + ":401: empty input_ids\n");
    REQUIRE(testing::run_command(testing::cli_path() + " pack-stats --data " + path + " 2>&1",
                                 out) == 2);
    CHECK(out == "deltatune pack-stats: missing required flag --tokens-per-batch\n");
}

}  // namespace
}  // namespace deltatune
