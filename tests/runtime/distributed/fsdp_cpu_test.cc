// FsdpCpuParams between threads of this process (Gloo over a rendezvous folder): world sizes 1, 2
// and 3 (uneven shards) train the model identically from the same micro-batches however they are
// dealt, with and without gradient accumulation; a checkpoint written at one world size loads at
// another; and beyond world size 1 a rank keeps no unit's values or gradients after a step.
#include <sys/mman.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "runtime/distributed/fsdp_cpu.h"
#include "runtime/distributed/gloo_communicator.h"
#include "runtime/model/qwen35_cpu_model.h"
#include "runtime/optim/cpu_update.h"
#include "runtime/train/train_state.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

HfModel fixture_model() {
    auto m = load_hf_model(testing::source_path("tests/fixtures/parity/tiny-b"));
    REQUIRE(m.ok());
    return *std::move(m);
}

// Six micro-batches of random documents (the global batch of every step).
std::vector<PackedBatch> global_batch(int64_t vocab, int step) {
    std::mt19937 rng(77 + step);
    std::vector<PackedBatch> out;
    for (int b = 0; b < 6; ++b) {
        std::vector<Document> docs(2);
        for (Document& d : docs) {
            const int n = 5 + static_cast<int>(rng() % 9);
            for (int i = 0; i < n; ++i) {
                d.input_ids.push_back(static_cast<int32_t>(rng() % vocab));
                d.labels.push_back(i < 2 ? -100 : d.input_ids.back());
            }
        }
        auto packed = pack_documents(docs, vocab);
        REQUIRE(packed.ok());
        out.push_back(*std::move(packed));
    }
    return out;
}

void on_ranks(int world, const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
    for (auto& t : threads) t.join();
}

// Resident pages of the whole pages inside a tensor (mincore).
size_t resident_pages(const Tensor& t) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(t.raw_data());
    const uintptr_t lo = (begin + page - 1) / page * page, hi = (begin + t.nbytes()) / page * page;
    if (hi <= lo) return 0;
    std::vector<unsigned char> in((hi - lo) / page);
    REQUIRE(mincore(reinterpret_cast<void*>(lo), hi - lo, in.data()) == 0);
    size_t n = 0;
    for (unsigned char c : in) n += c & 1;
    return n;
}

struct RankResult {
    ParamSet params;      // gathered after training
    size_t resident = 0;  // pages of values and gradients resident after the last step
    absl::Status status;
};

// Trains `steps` steps at `world` ranks, micro-batch b of each step on rank b % world; with
// `checkpoint_in` loads it first, with `checkpoint_out` saves after training.
std::vector<RankResult> train(int world, int steps, const std::string& rdv,
                              const std::vector<std::string>& checkpoint_in = {},
                              const std::string& checkpoint_out = "") {
    const HfModel base = fixture_model();
    std::vector<RankResult> results(static_cast<size_t>(world));
    on_ranks(world, [&](int r) {
        RankResult& out = results[static_cast<size_t>(r)];
        auto comm = make_gloo_communicator(
            {r, world, nullptr, rdv, "fsdp", "127.0.0.1", std::chrono::milliseconds(60000)});
        out.status = comm.status();
        if (!comm.ok()) return;
        HfModel model = base;
        model.params = base.params.clone();
        ParamSet grads;
        for (const NamedParam& p : model.params.all())
            grads.add(p.name, p.value.shape(), p.stored_dtype, world == 1);
        auto store = FsdpCpuParams::create(model, grads, **comm);
        out.status = store.status();
        if (!store.ok()) return;
        if (!checkpoint_in.empty()) {
            out.status = (*store)->load(checkpoint_in);
            if (!out.status.ok()) return;
        }
        Qwen35CpuModel net(model.config, model.params);
        net.set_param_source(store->get());
        AdamWHyper hyper;
        hyper.lr = 1e-3;
        for (int s = 0; s < steps && out.status.ok(); ++s) {
            const std::vector<PackedBatch> batches = global_batch(model.config.vocab_size, s);
            int64_t labels = 0;
            for (const PackedBatch& b : batches) labels += b.label_tokens();
            std::vector<size_t> mine;
            for (size_t b = static_cast<size_t>(r); b < batches.size(); b += world)
                mine.push_back(b);
            for (size_t k = 0; k < mine.size() && out.status.ok(); ++k) {
                (*store)->begin_micro_batch(k + 1 == mine.size());
                auto loss = net.forward(batches[mine[k]]);
                out.status = loss.status();
                if (out.status.ok()) out.status = net.backward(grads, 1.0 / double(labels));
            }
            if (out.status.ok()) out.status = fsdp_cpu_step(**store, hyper, 1.0).status();
        }
        if (!out.status.ok()) return;
        for (const NamedParam& p : model.params.all()) out.resident += resident_pages(p.value);
        for (const NamedParam& p : grads.all()) out.resident += resident_pages(p.value);
        if (!checkpoint_out.empty()) {
            out.status = (*store)->save_shard(checkpoint_out + "/" + shard_file_name(r, world));
            if (!out.status.ok()) return;
        }
        out.status = (*store)->gather_all();
        out.params = model.params.clone();
    });
    return results;
}

void check_equal(const ParamSet& a, const ParamSet& b) {
    REQUIRE(a.all().size() == b.all().size());
    for (size_t i = 0; i < a.all().size(); ++i) {
        INFO(a.all()[i].name);
        const float* x = a.all()[i].value.data<float>();
        const float* y = b.all()[i].value.data<float>();
        for (int64_t k = 0; k < a.all()[i].value.numel(); ++k) REQUIRE(x[k] == y[k]);
    }
}

TEST_CASE("FSDP on CPU ranks: world sizes 1, 2 and 3 train identically and reshard", "[dist]") {
    testing::TempDir tmp;
    // Six micro-batches a step: 6 on one rank, 3 on each of two, 2 on each of three, one on each
    // of six (no accumulation: the fp64 sum over ranks rounded once).
    const std::vector<RankResult> one = train(1, 2, tmp.file("rdv1"));
    REQUIRE(one[0].status.ok());
    for (int world : {2, 3, 6}) {
        const std::string ckpt = tmp.file("ckpt" + std::to_string(world));
        std::filesystem::create_directories(ckpt);
        const std::vector<RankResult> many =
            train(world, 2, tmp.file("rdv" + std::to_string(world)), {}, ckpt);
        for (int r = 0; r < world; ++r) {
            INFO("world " << world << " rank " << r);
            REQUIRE(many[static_cast<size_t>(r)].status.ok());
            check_equal(many[static_cast<size_t>(r)].params, one[0].params);
            // Only the partial pages at the tensors' ends may stay: no whole page of a unit.
            CHECK(many[static_cast<size_t>(r)].resident == 0);
        }
        // Its checkpoint at the other world sizes: the same parameters.
        std::vector<std::string> files;
        for (int r = 0; r < world; ++r) files.push_back(ckpt + "/" + shard_file_name(r, world));
        for (int to : {1, world == 2 ? 3 : 2}) {
            const std::vector<RankResult> resumed =
                train(to, 0, tmp.file("rdv-" + std::to_string(world) + std::to_string(to)), files);
            for (const RankResult& r : resumed) {
                REQUIRE(r.status.ok());
                check_equal(r.params, one[0].params);
            }
        }
    }
}

}  // namespace
}  // namespace deltatune
