// The Gloo engine (Debian's libgloo) for CPU ranks over TCP. Ranks meet through a rendezvous
// store: a folder every rank can reach (gloo's FileStore) for tests and single-node jobs.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/distributed/communicator.h"
#include "runtime/distributed/kv_store.h"

namespace deltatune {

struct GlooOptions {
    int rank = 0;
    int world_size = 1;
    std::shared_ptr<KeyValueStore> store;  // the rendezvous store; else a folder:
    std::string store_dir;                 // rendezvous folder (created if missing)
    std::string prefix;  // keys of this attempt (stale keys of older attempts are ignored)
    std::string host = "127.0.0.1";            // interface the ranks listen on
    std::chrono::milliseconds timeout{60000};  // per collective and for the rendezvous
};

absl::StatusOr<std::unique_ptr<Communicator>> make_gloo_communicator(const GlooOptions& options);

}  // namespace deltatune
