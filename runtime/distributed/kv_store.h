// The rendezvous store ranks meet through: a small key-value map of one job attempt. The daemon's
// ranks use the supervisor's (RankService StoreSet/StoreGet, no shared filesystem); standalone
// runs (`deltatune train`) use a folder. Both engines take one: Gloo exchanges its addresses
// through it, NCCL its unique id.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace deltatune {

class KeyValueStore {
  public:
    virtual ~KeyValueStore() = default;
    virtual absl::Status set(const std::string& key, const std::string& value) = 0;
    // nullopt while the key is not set.
    virtual absl::StatusOr<std::optional<std::string>> get(const std::string& key) = 0;
    // Polls get() until the key is set; DeadlineExceeded naming it after `timeout`.
    absl::StatusOr<std::string> wait(const std::string& key, std::chrono::milliseconds timeout);
};

}  // namespace deltatune
