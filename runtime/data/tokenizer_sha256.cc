// tok::Sha256 over OpenSSL's EVP digest (linked for checkpoints' checksums already).
#include "runtime/data/tokenizer_sha256.h"

#include <openssl/evp.h>

#include <cstdint>

#include "runtime/base/check.h"

namespace deltatune::tok {

struct Sha256::Ctx {
    EVP_MD_CTX* md = EVP_MD_CTX_new();
    ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
    DT_CHECK(ctx_->md != nullptr && EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() = default;

Sha256& Sha256::update(std::string_view data) {
    DT_CHECK(EVP_DigestUpdate(ctx_->md, data.data(), data.size()) == 1);
    return *this;
}

Sha256& Sha256::field(std::string_view data) {
    // The length as 8 little-endian bytes, then the bytes: the framing the fingerprint has always
    // had, so fingerprints (and the token caches keyed by them) stay the same.
    const uint64_t n = data.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    update(std::string_view(reinterpret_cast<const char*>(len), 8));
    return update(data);
}

std::string Sha256::hex_digest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    DT_CHECK(EVP_DigestFinal_ex(ctx_->md, digest, &size) == 1);
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < size; ++i) {
        out += kHex[digest[i] >> 4];
        out += kHex[digest[i] & 15];
    }
    return out;
}

}  // namespace deltatune::tok
