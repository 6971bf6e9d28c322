// The loaded state of a Tokenizer, shared by its loader (tokenizer_load.cc) and its encoder and
// decoder (tokenizer.cc). Immutable after loading, except the BPE model's word cache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "runtime/data/added_vocabulary.h"
#include "runtime/data/bpe_model.h"
#include "runtime/data/pre_tokenizer.h"
#include "runtime/data/tokenizer.h"

namespace deltatune {

struct Tokenizer::Impl {
    std::string file;  // the tokenizer.json read, for error messages
    bool nfc = false;  // normalizer: NFC, or none
    // Pre-tokenizer: an optional Split regex, then ByteLevel (its prefix space and its regex).
    std::unique_ptr<tok::SplitRegex> split;
    bool add_prefix_space = false;
    std::unique_ptr<tok::SplitRegex> byte_level_regex;
    std::unique_ptr<tok::BpeModel> model;
    tok::AddedVocabulary added;
    std::vector<AddedToken> added_tokens;  // by id
    tok::StringMap<int32_t> added_ids;     // content -> id

    enum IdKind : uint8_t { kNone, kModel, kAdded, kSpecial };
    std::vector<uint8_t> id_kind;                          // by id, up to vocab_size
    std::unordered_map<int32_t, std::string> added_bytes;  // decoder output of added ids
    int64_t vocab_size = 0;
    std::string fingerprint;

    // Appends the ids (and, when `offsets` is not null, their byte ranges in `text`) of `text`.
    absl::Status encode(std::string_view text, std::vector<int32_t>& ids,
                        std::vector<std::pair<size_t, size_t>>* offsets) const;

    class Loader;  // tokenizer_load.cc

  private:
    struct Scratch;
    absl::Status encode_piece(std::string_view piece, size_t base, Scratch& s) const;
    absl::Status pre_tokenize(std::string_view norm, size_t from, size_t to, Scratch& s) const;
};

}  // namespace deltatune
