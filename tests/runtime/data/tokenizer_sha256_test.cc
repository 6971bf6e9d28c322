// The tokenizer fingerprint's SHA-256: FIPS 180-4's vectors, and fields framed by their length.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/data/tokenizer_sha256.h"

namespace deltatune::tok {
namespace {

TEST_CASE("SHA-256 gives FIPS 180-4's digests; fields carry their length", "[tokenizer]") {
    CHECK(Sha256().update("abc").hex_digest() ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(Sha256().hex_digest() ==
          "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const std::string framed = std::string("\x03\0\0\0\0\0\0\0", 8) + "abc";
    CHECK(Sha256().field("abc").hex_digest() == Sha256().update(framed).hex_digest());
    CHECK(Sha256().field("ab").field("c").hex_digest() !=
          Sha256().field("a").field("bc").hex_digest());
}

}  // namespace
}  // namespace deltatune::tok
