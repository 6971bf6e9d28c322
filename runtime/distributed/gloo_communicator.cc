#include "runtime/distributed/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"

namespace deltatune {
namespace {

class GlooCommunicator final : public Communicator {
  public:
    GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> ctx,
                     std::chrono::milliseconds timeout)
        : ctx_(std::move(ctx)), timeout_(timeout) {}

    int rank() const override { return ctx_->rank; }
    int world_size() const override { return ctx_->size; }

    absl::Status all_reduce_sum(float* data, size_t n) override { return reduce(data, n); }
    absl::Status all_reduce_sum(double* data, size_t n) override { return reduce(data, n); }

    absl::Status all_gather(const float* shard, size_t n, float* full) override {
        return guarded("all_gather", [&] {
            gloo::AllgatherOptions opts(ctx_);
            opts.setInput(const_cast<float*>(shard), n);
            opts.setOutput(full, n * static_cast<size_t>(ctx_->size));
            opts.setTag(next_tag());
            opts.setTimeout(timeout_);
            gloo::allgather(opts);
        });
    }

    // Gloo's options API has no reduce-scatter: an all-reduce then this rank's slice. Twice the
    // traffic of a ring reduce-scatter, identical result; the CPU engine is for correctness.
    absl::Status reduce_scatter_sum(const float* full, size_t n, float* shard) override {
        scratch_.assign(full, full + n * static_cast<size_t>(ctx_->size));
        if (absl::Status s = reduce(scratch_.data(), scratch_.size()); !s.ok()) return s;
        const size_t off = static_cast<size_t>(ctx_->rank) * n;
        std::copy(scratch_.begin() + static_cast<std::ptrdiff_t>(off),
                  scratch_.begin() + static_cast<std::ptrdiff_t>(off + n), shard);
        return absl::OkStatus();
    }

    absl::Status barrier() override {
        return guarded("barrier", [&] {
            gloo::BarrierOptions opts(ctx_);
            opts.setTag(next_tag());
            opts.setTimeout(timeout_);
            gloo::barrier(opts);
        });
    }

  private:
    template <typename T>
    absl::Status reduce(T* data, size_t n) {
        if (n == 0) return absl::OkStatus();
        return guarded("all_reduce", [&] {
            gloo::AllreduceOptions opts(ctx_);
            opts.setOutput(data, n);
            opts.setTag(next_tag());
            opts.setTimeout(timeout_);
            opts.setReduceFunction(
                static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
            gloo::allreduce(opts);
        });
    }

    template <typename Fn>
    absl::Status guarded(const char* what, Fn&& fn) {
        try {
            fn();
            return absl::OkStatus();
        } catch (const gloo::IoException& e) {
            return absl::DeadlineExceededError(absl::StrCat("gloo ", what, ": ", e.what()));
        } catch (const std::exception& e) {
            return absl::UnavailableError(absl::StrCat("gloo ", what, ": ", e.what()));
        }
    }
    uint32_t next_tag() { return tag_++; }

    std::shared_ptr<gloo::rendezvous::Context> ctx_;
    std::chrono::milliseconds timeout_;
    uint32_t tag_ = 0;
    std::vector<float> scratch_;
};

// Gloo's store interface over a KeyValueStore (errors become the exceptions Gloo expects).
class StoreAdapter final : public gloo::rendezvous::Store {
  public:
    StoreAdapter(std::shared_ptr<KeyValueStore> kv, std::chrono::milliseconds timeout)
        : kv_(std::move(kv)), timeout_(timeout) {}
    void set(const std::string& key, const std::vector<char>& data) override {
        const absl::Status s = kv_->set(key, std::string(data.begin(), data.end()));
        if (!s.ok()) throw std::runtime_error(std::string(s.message()));
    }
    std::vector<char> get(const std::string& key) override {
        absl::StatusOr<std::string> v = kv_->wait(key, timeout_);
        if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
        return std::vector<char>(v->begin(), v->end());
    }
    void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
    void wait(const std::vector<std::string>& keys,
              const std::chrono::milliseconds& timeout) override {
        for (const auto& k : keys) {
            absl::StatusOr<std::string> v = kv_->wait(k, timeout);
            if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
        }
    }

  private:
    std::shared_ptr<KeyValueStore> kv_;
    std::chrono::milliseconds timeout_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> make_gloo_communicator(const GlooOptions& o) {
    if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", o.rank, " of world size ", o.world_size));
    }
    std::error_code ec;
    if (!o.store) std::filesystem::create_directories(o.store_dir, ec);
    if (ec) {
        return absl::PermissionDeniedError(
            absl::StrCat(o.store_dir, ": cannot create the rendezvous folder: ", ec.message()));
    }
    try {
        gloo::transport::tcp::attr attr;
        attr.hostname = o.host;
        auto device = gloo::transport::tcp::CreateDevice(attr);
        std::unique_ptr<gloo::rendezvous::Store> base;
        if (o.store) {
            base = std::make_unique<StoreAdapter>(o.store, o.timeout);
        } else {
            base = std::make_unique<gloo::rendezvous::FileStore>(o.store_dir);
        }
        gloo::rendezvous::PrefixStore store(o.prefix.empty() ? "deltatune" : o.prefix, *base);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
        ctx->setTimeout(o.timeout);
        ctx->connectFullMesh(store, device);
        return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(ctx), o.timeout));
    } catch (const std::exception& e) {
        return absl::DeadlineExceededError(absl::StrCat(
            "gloo rendezvous in ", o.store ? std::string("the supervisor's store") : o.store_dir,
            " (rank ", o.rank, " of ", o.world_size, "): ", e.what()));
    }
}

}  // namespace deltatune
