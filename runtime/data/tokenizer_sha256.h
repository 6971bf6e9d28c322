// SHA-256 (FIPS 180-4), self-contained so the tokenizer's fingerprint needs no crypto library.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace deltatune::tok {

class Sha256 {
  public:
    Sha256();
    Sha256& update(std::string_view data);
    // Hashes a length-prefixed field so that field boundaries are part of the digest.
    Sha256& field(std::string_view data);
    std::string hex_digest();  // finalises; the object is spent afterwards

  private:
    void block(const uint8_t* p);
    std::array<uint32_t, 8> h_;
    std::array<uint8_t, 64> buf_{};
    size_t buf_len_ = 0;
    uint64_t total_ = 0;
};

}  // namespace deltatune::tok
