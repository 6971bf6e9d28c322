#include "daemon/random_hex.h"

#include <catch2/catch.hpp>

namespace deltatune::daemon {
namespace {

TEST_CASE("ids from random_hex are recognised, nothing else", "[daemon]") {
    for (int digits : {1, 12, 16, 32}) {
        const std::string id = random_hex(digits);
        CHECK(id.size() == static_cast<size_t>(digits));
        CHECK(is_random_hex(id, 32));
    }
    CHECK_FALSE(is_random_hex(random_hex(33), 32));  // too long
    for (const char* bad : {"", "ABC123", "abc-12", "../etc", "abc 12", "g00d"}) {
        CHECK_FALSE(is_random_hex(bad, 32));
    }
}

}  // namespace
}  // namespace deltatune::daemon
