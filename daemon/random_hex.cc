#include "daemon/random_hex.h"

#include <mutex>
#include <random>

#include "absl/strings/str_cat.h"

namespace deltatune::daemon {

std::string random_hex(int digits) {
    static std::mutex mu;
    static std::mt19937_64 rng(std::random_device{}());
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    while (static_cast<int>(out.size()) < digits) absl::StrAppend(&out, absl::Hex(rng() >> 4));
    return out.substr(0, digits);
}

bool is_random_hex(const std::string& id, size_t max_digits) {
    if (id.empty() || id.size() > max_digits) return false;
    for (char c : id) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
}

}  // namespace deltatune::daemon
