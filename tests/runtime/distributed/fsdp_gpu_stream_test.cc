// [cuda] FsdpGpuParams to and from checkpoint files without the model in host memory
// (runtime/distributed/fsdp_gpu_stream.cc), on the sharded multimodal fixture with BF16 and F32
// tensors:
//   - load_from (the files' byte ranges through small pinned buffers, so pieces end at odd
//     places) gives the same bf16 shards, replicated fp32 segment and fp32 masters, bit for bit,
//     as load() from the whole model read into host memory; frozen (a LoRA base) too.
//   - The export streamed through write_param writes the same files, byte for byte, as
//     save_hf_model of the model in host memory.
// Skips with a printed reason without a GPU.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/base/file_util.h"
#include "runtime/device/device_context.h"
#include "runtime/distributed/fsdp_gpu.h"
#include "runtime/model/hf_model_io.h"
#include "tests/common/test_util.h"
#include "tests/runtime/model/gpu_test_util.h"

namespace deltatune {
namespace {

#if DELTATUNE_HAVE_CUDA
namespace fs = std::filesystem;
using testing::have_gpu;
using Phase = GpuParamSource::Phase;

std::string fixture() {
    return testing::source_path("tests/fixtures/parity/tiny-b");
}

// Every unit's bf16 weights and the replicated fp32 segment, copied to the host (world size 1:
// acquire hands out the rank's whole buffers).
std::vector<std::vector<unsigned char>> device_values(FsdpGpuParams& f) {
    std::vector<std::vector<unsigned char>> out;
    const GpuParamLayout& l = f.layout();
    for (int u = 0; u < l.num_units; ++u) {
        auto p = f.acquire(u, Phase::kForward, false);
        REQUIRE(p.ok());
        std::vector<unsigned char> bytes(static_cast<size_t>(l.unit_numel[static_cast<size_t>(u)]) *
                                         2);
        REQUIRE(cudaMemcpy(bytes.data(), p->half, bytes.size(), cudaMemcpyDeviceToHost) ==
                cudaSuccess);
        out.push_back(std::move(bytes));
        if (u == 0) {
            std::vector<unsigned char> rep(static_cast<size_t>(l.replicated_numel) * 4);
            REQUIRE(cudaMemcpy(rep.data(), p->rep_master, rep.size(), cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
            out.push_back(std::move(rep));
        }
        REQUIRE(f.release(u, Phase::kForward).ok());
    }
    return out;
}

std::unique_ptr<NcclCommunicator> world_one(const std::string& rendezvous) {
    NcclOptions o;
    o.rank = 0, o.world_size = 1, o.device = 0, o.store_dir = rendezvous, o.prefix = "stream";
    auto comm = NcclCommunicator::create(o);
    REQUIRE(comm.ok());
    return std::move(*comm);
}

TEST_CASE("FSDP shards streamed from the files equal those loaded from host memory",
          "[dist][cuda]") {
    if (!have_gpu()) return;
    auto streamed = open_hf_model(fixture());
    auto whole = load_hf_model(fixture());
    REQUIRE(streamed.ok());
    REQUIRE(whole.ok());
    REQUIRE_FALSE(streamed->materialized);
    auto ctx = DeviceContext::create(Device::cuda(0));
    REQUIRE(ctx.ok());
    testing::TempDir tmp;
    auto comm = world_one(tmp.file("rdv"));
    for (bool frozen : {false, true}) {
        INFO("frozen: " << frozen);
        auto a = FsdpGpuParams::create(**ctx, *comm, whole->config, frozen);
        auto b = FsdpGpuParams::create(**ctx, *comm, whole->config, frozen);
        REQUIRE(a.ok());
        REQUIRE(b.ok());
        REQUIRE((*a)->load(whole->params).ok());
        REQUIRE((*b)->load_from(*streamed->weights, /*staging_bytes=*/4096 + 6).ok());
        CHECK(device_values(**a) == device_values(**b));
        if (frozen) continue;
        auto sa = (*a)->download_sample(1);
        auto sb = (*b)->download_sample(1);
        REQUIRE(sa.ok());
        REQUIRE(sb.ok());
        CHECK(std::memcmp(sa->data(), sb->data(), sa->size() * sizeof(float)) == 0);

        // The export, unit by unit from the device, against the whole-model writer.
        FsdpGpuParams::ExportCursor cursor;
        const ParamBytes values = [&](size_t i, const SafetensorsWrite& write) {
            return (*b)->write_param(cursor, i, streamed->params.all()[i].stored_dtype, write,
                                     /*staging_bytes=*/4096);
        };
        SaveOptions o;
        o.max_shard_bytes = 64 * 1024;
        REQUIRE(save_hf_model(tmp.file("streamed"), *streamed, values, o).ok());
        REQUIRE(save_hf_model(tmp.file("whole"), *whole, o.max_shard_bytes).ok());
        int files = 0;
        for (const auto& e : fs::directory_iterator(tmp.file("whole"))) {
            const std::string name = e.path().filename().string();
            INFO(name);
            auto want = read_file(e.path().string());
            auto got = read_file(tmp.file("streamed/" + name));
            REQUIRE(want.ok());
            REQUIRE(got.ok());
            CHECK(*got == *want);
            ++files;
        }
        CHECK(files > 2);  // shards, the index and config.json
    }
}
#endif

}  // namespace
}  // namespace deltatune
