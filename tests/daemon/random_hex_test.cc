#include "daemon/random_hex.h"

#include <catch2/catch.hpp>

#include <set>

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

TEST_CASE("random_hex draws every digit and never repeats a secret", "[daemon]") {
    std::set<std::string> secrets;
    std::set<char> digits;
    for (int i = 0; i < 1000; ++i) {
        const std::string s = random_hex(32);
        secrets.insert(s);
        digits.insert(s.begin(), s.end());
    }
    CHECK(secrets.size() == 1000);
    CHECK(digits.size() == 16);
    CHECK(random_hex(7).size() == 7);  // an odd count: half a byte dropped
}

}  // namespace
}  // namespace deltatune::daemon
