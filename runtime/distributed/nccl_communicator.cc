#include "runtime/distributed/nccl_communicator.h"

#if DELTATUNE_HAVE_CUDA
#include <nccl.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/device/cuda_status.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

ncclComm_t as_comm(void* p) {
    return static_cast<ncclComm_t>(p);
}

// Rank 0 publishes the id (write + rename: readers never see a partial file); the others poll.
absl::StatusOr<ncclUniqueId> exchange_id(const NcclOptions& o) {
    if (o.store) {
        ncclUniqueId id{};
        const std::string key = o.prefix + ".id";
        if (o.rank == 0) {
            if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
                return absl::UnavailableError(
                    absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
            }
            DT_RETURN_IF_ERROR(o.store->set(key, std::string(id.internal, sizeof(id.internal))));
            return id;
        }
        DT_ASSIGN_OR_RETURN(const std::string bytes, o.store->wait(key, o.timeout));
        if (bytes.size() != sizeof(id.internal)) {
            return absl::DataLossError(absl::StrCat("NCCL id of ", bytes.size(), " bytes"));
        }
        std::copy(bytes.begin(), bytes.end(), id.internal);
        return id;
    }
    std::error_code ec;
    fs::create_directories(o.store_dir, ec);
    const fs::path path = fs::path(o.store_dir) / (o.prefix + ".id");
    ncclUniqueId id{};
    if (o.rank == 0) {
        if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
            return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
        }
        const fs::path tmp = path.string() + ".tmp";
        std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof(id.internal));
        fs::rename(tmp, path, ec);
        if (ec) return absl::PermissionDeniedError(absl::StrCat(path.string(), ": ", ec.message()));
        return id;
    }
    const auto deadline = Clock::now() + o.timeout;
    while (Clock::now() < deadline) {
        std::ifstream in(path, std::ios::binary);
        if (in.read(id.internal, sizeof(id.internal))) return id;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::DeadlineExceededError(absl::StrCat("rank ", o.rank, ": no NCCL id from rank 0 at ",
                                                    path.string(), " within ", o.timeout.count(),
                                                    " ms"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const NcclOptions& o) {
    if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", o.rank, " of world size ", o.world_size));
    }
    DT_ASSIGN_OR_RETURN(ncclUniqueId id, exchange_id(o));
    DT_CUDA_RETURN_IF_ERROR(cudaSetDevice(o.device));
    std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
    c->rank_ = o.rank;
    c->world_ = o.world_size;
    c->timeout_ = o.timeout;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, o.world_size, id, o.rank, &config);
    c->comm_ = comm;
    if (r != ncclSuccess && r != ncclInProgress) {
        return absl::UnavailableError(
            absl::StrCat("ncclCommInitRankConfig: ", ncclGetErrorString(r)));
    }
    DT_RETURN_IF_ERROR(c->poll_until_ready("ncclCommInitRankConfig"));
    return c;
}

NcclCommunicator::~NcclCommunicator() {
    if (comm_ == nullptr) return;
    if (aborted_) return;
    ncclCommDestroy(as_comm(comm_));
}

absl::Status NcclCommunicator::poll_until_ready(const char* what) {
    const auto deadline = Clock::now() + timeout_;
    while (true) {
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(as_comm(comm_), &state);
        if (state == ncclSuccess) return absl::OkStatus();
        if (state != ncclInProgress) return check(state, what);
        if (Clock::now() > deadline) {
            ncclCommAbort(as_comm(comm_));
            aborted_ = true;
            return absl::DeadlineExceededError(
                absl::StrCat(what, ": no progress within ", timeout_.count(), " ms; aborted"));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

absl::Status NcclCommunicator::usable() const {
    if (!aborted_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL communicator of rank ", rank_, " was aborted after an earlier error"));
}

absl::Status NcclCommunicator::check(int result, const char* what) {
    const auto r = static_cast<ncclResult_t>(result);
    if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
    ncclCommAbort(as_comm(comm_));
    aborted_ = true;
    return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(r), " (rank ", rank_,
                                               " of ", world_, "; communicator aborted)"));
}

absl::Status NcclCommunicator::all_gather_bf16(const void* shard, void* full, size_t n,
                                               cudaStream_t stream) {
    DT_RETURN_IF_ERROR(usable());
    DT_RETURN_IF_ERROR(check(ncclAllGather(shard, full, n, ncclBfloat16, as_comm(comm_), stream),
                             "ncclAllGather"));
    return poll_until_ready("ncclAllGather");
}

absl::Status NcclCommunicator::all_gather_f32(const float* shard, float* full, size_t n,
                                              cudaStream_t stream) {
    DT_RETURN_IF_ERROR(usable());
    DT_RETURN_IF_ERROR(
        check(ncclAllGather(shard, full, n, ncclFloat32, as_comm(comm_), stream), "ncclAllGather"));
    return poll_until_ready("ncclAllGather");
}

absl::Status NcclCommunicator::reduce_scatter_sum_f32(const float* full, float* shard, size_t n,
                                                      cudaStream_t stream) {
    DT_RETURN_IF_ERROR(usable());
    DT_RETURN_IF_ERROR(
        check(ncclReduceScatter(full, shard, n, ncclFloat32, ncclSum, as_comm(comm_), stream),
              "ncclReduceScatter"));
    return poll_until_ready("ncclReduceScatter");
}

absl::Status NcclCommunicator::all_reduce_sum(void* data, size_t n, int dtype,
                                              cudaStream_t stream) {
    DT_RETURN_IF_ERROR(usable());
    DT_RETURN_IF_ERROR(check(ncclAllReduce(data, data, n, static_cast<ncclDataType_t>(dtype),
                                           ncclSum, as_comm(comm_), stream),
                             "ncclAllReduce"));
    return poll_until_ready("ncclAllReduce");
}

absl::Status NcclCommunicator::all_reduce_sum_f32(float* data, size_t n, cudaStream_t stream) {
    return all_reduce_sum(data, n, ncclFloat32, stream);
}

absl::Status NcclCommunicator::all_reduce_sum_f64(double* data, size_t n, cudaStream_t stream) {
    return all_reduce_sum(data, n, ncclFloat64, stream);
}

absl::Status NcclCommunicator::wait(cudaStream_t stream) {
    DT_RETURN_IF_ERROR(usable());
    const auto deadline = Clock::now() + timeout_;
    while (true) {
        const cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return absl::OkStatus();
        if (e != cudaErrorNotReady) return cuda_status(e, "cudaStreamQuery", __FILE__, __LINE__);
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(as_comm(comm_), &state);
        if (state != ncclSuccess && state != ncclInProgress) return check(state, "NCCL (async)");
        if (Clock::now() > deadline) {
            ncclCommAbort(as_comm(comm_));
            aborted_ = true;
            return absl::DeadlineExceededError(
                absl::StrCat("NCCL collective on rank ", rank_, " did not finish within ",
                             timeout_.count(), " ms (a peer died or hangs); communicator aborted"));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

}  // namespace deltatune
#endif  // DELTATUNE_HAVE_CUDA
