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

}  // namespace deltatune::daemon
