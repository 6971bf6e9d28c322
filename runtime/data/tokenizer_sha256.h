// SHA-256 of a stream of fields (OpenSSL's EVP): the tokenizer's fingerprint.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace deltatune::tok {

class Sha256 {
  public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    Sha256& update(std::string_view data);
    // Hashes a length-prefixed field so that field boundaries are part of the digest.
    Sha256& field(std::string_view data);
    std::string hex_digest();  // finalises; the object is spent afterwards

  private:
    struct Ctx;
    std::unique_ptr<Ctx> ctx_;
};

}  // namespace deltatune::tok
