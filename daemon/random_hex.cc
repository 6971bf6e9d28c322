#include "daemon/random_hex.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace deltatune::daemon {

std::string random_hex(int digits) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::vector<unsigned char> bytes((static_cast<size_t>(digits) + 1) / 2);
    for (size_t got = 0; got < bytes.size();) {
        const ssize_t n = getrandom(bytes.data() + got, bytes.size() - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {  // no entropy source at all: nothing safe to hand out
            std::perror("deltatuned: getrandom");
            std::abort();
        }
        got += static_cast<size_t>(n);
    }
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) {
        out.push_back(kHex[b >> 4]);
        out.push_back(kHex[b & 15]);
    }
    out.resize(static_cast<size_t>(digits));
    return out;
}

bool is_random_hex(const std::string& id, size_t max_digits) {
    if (id.empty() || id.size() > max_digits) return false;
    for (char c : id) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
}

}  // namespace deltatune::daemon
