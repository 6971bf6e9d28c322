// Added tokens recognised inside text, as the Hugging Face AddedVocabulary does: two token sets
// (normalized=false tokens matched against the original text, normalized=true ones against the
// normalised text), leftmost-longest matching (the library's Aho-Corasick mode), then the
// single_word / lstrip / rstrip rules applied to each match in order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/tokenizer.h"

namespace deltatune::tok {

// One piece of a split sentence: an added token (id >= 0) or plain text (id == -1), as the byte
// range [begin, end) of the sentence. Pieces of plain text are never empty.
struct AddedPiece {
    int32_t id;
    size_t begin, end;
};

class AddedVocabulary {
  public:
    // `tokens` in the library's matching order (special tokens first); `patterns[i]` is the text
    // token i is matched as (its content, or its normalised content when normalized is set).
    void build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);

    bool empty(bool normalized) const { return sets_[normalized].nodes.size() <= 1; }
    // Splits `sentence` with the normalized or the non-normalized token set; `out` is cleared.
    void split(std::string_view sentence, bool normalized, std::vector<AddedPiece>& out) const;

  private:
    struct Node {
        std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
        int32_t token = -1;                                       // index into tokens_
    };
    struct Trie {
        std::vector<Node> nodes{1};
        std::array<bool, 256> first{};
    };
    // Leftmost-longest match at or after `from`: token index, and [*begin, *end); -1 if none.
    int32_t find(const Trie& t, std::string_view s, size_t from, size_t* begin, size_t* end) const;

    std::vector<AddedToken> tokens_;
    std::array<Trie, 2> sets_;
};

}  // namespace deltatune::tok
