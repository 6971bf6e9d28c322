// Collectives of the two engines against plain sums: Gloo between threads of this process over
// a rendezvous folder (world sizes 1 to 3, uneven values), NCCL between the GPUs present ([cuda]),
// and both engines' timeouts: a peer that never comes is an error within the timeout, not a hang.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "runtime/distributed/gloo_communicator.h"
#include "runtime/distributed/nccl_communicator.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

std::vector<float> values(int rank, size_t n) {
    std::mt19937 rng(1234 + rank);
    std::uniform_real_distribution<float> u(-2, 2);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
}

// Runs `fn(rank)` on `world` threads and returns once all have finished.
void on_ranks(int world, const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
    for (auto& t : threads) t.join();
}

// A KeyValueStore in memory, shared by the threads (the daemon's is the supervisor's).
class MemoryStore final : public KeyValueStore {
  public:
    absl::Status set(const std::string& key, const std::string& value) override {
        std::lock_guard<std::mutex> lock(mu_);
        map_[key] = value;
        return absl::OkStatus();
    }
    absl::StatusOr<std::optional<std::string>> get(const std::string& key) override {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = map_.find(key);
        if (it == map_.end()) return std::optional<std::string>();
        return std::optional<std::string>(it->second);
    }

  private:
    std::mutex mu_;
    std::map<std::string, std::string> map_;
};

TEST_CASE("Gloo all-reduce, all-gather and reduce-scatter equal plain sums", "[dist]") {
    for (int trial = 0; trial < 6; ++trial) {
        const int world = 1 + trial % 3;
        const bool memory = trial >= 3;  // rendezvous through a KeyValueStore, else a folder
        auto store = std::make_shared<MemoryStore>();
        testing::TempDir tmp;
        const size_t shard = 37;
        std::vector<std::vector<float>> reduced(world), gathered(world), scattered(world);
        std::vector<double> dsum(world);
        std::vector<absl::Status> status(world);
        on_ranks(world, [&](int r) {
            auto comm =
                make_gloo_communicator({r, world, memory ? store : nullptr, tmp.file("rdv"), "t",
                                        "127.0.0.1", std::chrono::milliseconds(20000)});
            if (!comm.ok()) {
                status[r] = comm.status();
                return;
            }
            std::vector<float> v = values(r, shard * world);
            reduced[r] = v;
            absl::Status s = (*comm)->all_reduce_sum(reduced[r].data(), v.size());
            gathered[r].resize(shard * world);
            if (s.ok()) s = (*comm)->all_gather(v.data() + r * shard, shard, gathered[r].data());
            scattered[r].resize(shard);
            if (s.ok()) s = (*comm)->reduce_scatter_sum(v.data(), shard, scattered[r].data());
            dsum[r] = r + 0.5;
            if (s.ok()) s = (*comm)->all_reduce_sum(&dsum[r], 1);
            if (s.ok()) s = (*comm)->barrier();
            status[r] = s;
        });
        for (int r = 0; r < world; ++r) REQUIRE(status[r].ok());
        for (int r = 0; r < world; ++r) {
            INFO("world " << world << " rank " << r << (memory ? " (store)" : " (folder)"));
            CHECK(dsum[r] == Approx(world * (world - 1) / 2.0 + 0.5 * world));
            for (size_t i = 0; i < shard * world; ++i) {
                double want = 0;
                for (int q = 0; q < world; ++q) want += values(q, shard * world)[i];
                REQUIRE(reduced[r][i] == Approx(want).margin(1e-5));
                REQUIRE(gathered[r][i] == values(static_cast<int>(i / shard), shard * world)[i]);
            }
            for (size_t i = 0; i < shard; ++i) {
                double want = 0;
                for (int q = 0; q < world; ++q) want += values(q, shard * world)[r * shard + i];
                REQUIRE(scattered[r][i] == Approx(want).margin(1e-5));
            }
        }
    }
}

TEST_CASE("Gloo: a peer that never arrives is an error within the timeout", "[dist]") {
    testing::TempDir tmp;
    const auto t0 = std::chrono::steady_clock::now();
    auto comm = make_gloo_communicator({0, 2, std::make_shared<MemoryStore>(), tmp.file("rdv"),
                                        "lonely", "127.0.0.1", std::chrono::milliseconds(1500)});
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE_FALSE(comm.ok());
    CHECK(comm.status().message().find("rank 0 of 2") != std::string_view::npos);
    CHECK(seconds < 10);
}

#if DELTATUNE_HAVE_CUDA
bool gpus(int& n) {
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        WARN("skipped: no CUDA device present");
        return false;
    }
    return true;
}

TEST_CASE("NCCL collectives over every GPU present equal plain sums", "[dist][cuda]") {
    int world = 0;
    if (!gpus(world)) return;
    testing::TempDir tmp;
    const size_t shard = 1000;
    std::vector<std::vector<float>> gathered(world), scattered(world), reduced(world);
    std::vector<absl::Status> status(world);
    on_ranks(world, [&](int r) {
        auto comm = NcclCommunicator::create(
            {r, world, r, nullptr, tmp.file("rdv"), "t", std::chrono::milliseconds(60000)});
        if (!comm.ok()) {
            status[r] = comm.status();
            return;
        }
        cudaStream_t stream;
        cudaStreamCreate(&stream);
        const std::vector<float> v = values(r, shard * world);
        float *d_v, *d_full, *d_shard;
        cudaMalloc(reinterpret_cast<void**>(&d_v), v.size() * 4);
        cudaMalloc(reinterpret_cast<void**>(&d_full), v.size() * 4);
        cudaMalloc(reinterpret_cast<void**>(&d_shard), shard * 4);
        cudaMemcpy(d_v, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
        cudaMemset(d_full, 0xFF, v.size() * 4);  // poisoned: every element must be written
        absl::Status s = (*comm)->all_gather_f32(d_v + r * shard, d_full, shard, stream);
        if (s.ok()) s = (*comm)->reduce_scatter_sum_f32(d_v, d_shard, shard, stream);
        if (s.ok()) s = (*comm)->wait(stream);
        gathered[r].resize(v.size());
        scattered[r].resize(shard);
        cudaMemcpy(gathered[r].data(), d_full, v.size() * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(scattered[r].data(), d_shard, shard * 4, cudaMemcpyDeviceToHost);
        if (s.ok()) s = (*comm)->all_reduce_sum_f32(d_v, v.size(), stream);
        if (s.ok()) s = (*comm)->wait(stream);
        reduced[r].resize(v.size());
        cudaMemcpy(reduced[r].data(), d_v, v.size() * 4, cudaMemcpyDeviceToHost);
        cudaFree(d_v);
        cudaFree(d_full);
        cudaFree(d_shard);
        cudaStreamDestroy(stream);
        status[r] = s;
    });
    for (int r = 0; r < world; ++r) REQUIRE(status[r].ok());
    WARN("NCCL world size " << world);
    for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < shard * world; ++i) {
            const int owner = static_cast<int>(i / shard);
            REQUIRE(gathered[r][i] == values(owner, shard * world)[i]);
            double want = 0;
            for (int q = 0; q < world; ++q) want += values(q, shard * world)[i];
            REQUIRE(reduced[r][i] == Approx(want).margin(1e-5));
        }
        for (size_t i = 0; i < shard; ++i) {
            double want = 0;
            for (int q = 0; q < world; ++q) want += values(q, shard * world)[r * shard + i];
            REQUIRE(scattered[r][i] == Approx(want).margin(1e-5));
        }
    }
}

TEST_CASE("NCCL: a peer that never arrives aborts within the timeout", "[dist][cuda]") {
    int n = 0;
    if (!gpus(n)) return;
    testing::TempDir tmp;
    const auto t0 = std::chrono::steady_clock::now();
    auto comm = NcclCommunicator::create({0, 2, 0, std::make_shared<MemoryStore>(), tmp.file("rdv"),
                                          "lonely", std::chrono::milliseconds(3000)});
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE_FALSE(comm.ok());
    CHECK(comm.status().code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(seconds < 20);
}
#endif

}  // namespace
}  // namespace deltatune
