#include "runtime/distributed/kv_store.h"

#include <thread>

#include "absl/strings/str_cat.h"

namespace deltatune {

absl::StatusOr<std::string> KeyValueStore::wait(const std::string& key,
                                                std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    while (true) {
        absl::StatusOr<std::optional<std::string>> v = get(key);
        if (!v.ok()) return v.status();
        if (v->has_value()) return **v;
        if (std::chrono::steady_clock::now() > deadline) {
            return absl::DeadlineExceededError(absl::StrCat("rendezvous key '", key,
                                                            "' not set within ", timeout.count(),
                                                            " ms (a rank did not arrive)"));
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
}

}  // namespace deltatune
