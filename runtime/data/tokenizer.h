// Tokenizer: a Hugging Face tokenizer.json of the byte-level BPE kind (Qwen's), encoding and
// decoding exactly as the Hugging Face `tokenizers` library does: NFC normaliser (utf8proc), Split
// pre-tokenizer regex (PCRE2, Unicode classes and look-ahead), ByteLevel pre-tokenizer and
// decoder, BPE merges by rank (honouring `ignore_merges`), and added tokens with their
// special / lstrip / rstrip / normalized / single_word flags recognised inside text.
// Thread safety: a loaded Tokenizer is immutable; encode/decode may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune {

struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool single_word = false;
};

class Tokenizer {
  public:
    // `path` is a tokenizer.json file or a directory containing one. Unsupported models,
    // normalisers or pre-tokenizers are InvalidArgument naming the file and the JSON field.
    static absl::StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& path);
    ~Tokenizer();

    // Encodes UTF-8 text (added tokens recognised, as `tokenizers` does by default).
    // Invalid UTF-8 is InvalidArgument naming the byte offset (see sanitize_utf8).
    absl::StatusOr<std::vector<int32_t>> encode(std::string_view text) const;
    // As encode, plus each token's byte range [begin, end) in `text` (the original, not the
    // normalised text; a token inside a normalisation change maps to the changed span).
    struct Encoding {
        std::vector<int32_t> ids;
        std::vector<std::pair<size_t, size_t>> offsets;
    };
    absl::StatusOr<Encoding> encode_with_offsets(std::string_view text) const;
    // Decodes ids back to text (ByteLevel decoder); special tokens are kept unless
    // `skip_special_tokens`. Ids outside the vocabulary are InvalidArgument.
    absl::StatusOr<std::string> decode(const std::vector<int32_t>& ids,
                                       bool skip_special_tokens = false) const;

    int64_t vocab_size() const;  // including added tokens (max id + 1)
    std::optional<int32_t> token_to_id(std::string_view token) const;
    const std::vector<AddedToken>& added_tokens() const;
    // A stable digest of the tokenizer's behaviour-defining content (cache keys).
    const std::string& fingerprint() const;

  private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Replaces every ill-formed UTF-8 subsequence with U+FFFD, exactly as Python's
// bytes.decode("utf-8", errors="replace") does (maximal subparts, Unicode 6.0+ practice).
std::string sanitize_utf8(std::string_view bytes);
// Offset of the first ill-formed byte, or nullopt when `bytes` is valid UTF-8.
std::optional<size_t> first_invalid_utf8(std::string_view bytes);

}  // namespace deltatune
