#include "runtime/data/added_vocabulary.h"

#include <algorithm>

#include "runtime/data/utf8.h"

namespace deltatune::tok {
namespace {

// Start of the run of White_Space that ends `s` (the library's `\s*$`).
size_t trailing_space_start(std::string_view s) {
    size_t end = s.size();
    while (end > 0) {
        size_t start;
        if (!is_white_space(prev_code_point(s, end, &start))) break;
        end = start;
    }
    return end;
}

// Length of the run of White_Space that starts `s` (the library's `^\s*`).
size_t leading_space_length(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        size_t j = i;
        if (!is_white_space(next_code_point(s, j))) break;
        i = j;
    }
    return i;
}

bool ends_with_word(std::string_view s) {
    size_t start;
    return !s.empty() && is_word_char(prev_code_point(s, s.size(), &start));
}

bool starts_with_word(std::string_view s) {
    size_t i = 0;
    return !s.empty() && is_word_char(next_code_point(s, i));
}

}  // namespace

void AddedVocabulary::build(const std::vector<AddedToken>& tokens,
                            const std::vector<std::string>& patterns) {
    tokens_ = tokens;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const std::string& p = patterns[i];
        if (p.empty()) continue;  // the library ignores empty tokens
        Trie& t = sets_[tokens[i].normalized];
        t.first[static_cast<unsigned char>(p[0])] = true;
        int32_t node = 0;
        for (char ch : p) {
            const auto c = static_cast<unsigned char>(ch);
            auto& kids = t.nodes[static_cast<size_t>(node)].children;
            auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1}));
            if (it != kids.end() && it->first == c) {
                node = it->second;
                continue;
            }
            const auto next = static_cast<int32_t>(t.nodes.size());
            kids.insert(it, {c, next});
            t.nodes.emplace_back();
            node = next;
        }
        // A repeated pattern keeps its first token, as the automaton reports the first pattern.
        Node& leaf = t.nodes[static_cast<size_t>(node)];
        if (leaf.token < 0) leaf.token = static_cast<int32_t>(i);
    }
}

int32_t AddedVocabulary::find(const Trie& t, std::string_view s, size_t from, size_t* begin,
                              size_t* end) const {
    for (size_t i = from; i < s.size(); ++i) {
        if (!t.first[static_cast<unsigned char>(s[i])]) continue;
        int32_t node = 0, best = -1;
        size_t best_end = 0;
        for (size_t j = i; j < s.size(); ++j) {
            const auto c = static_cast<unsigned char>(s[j]);
            const auto& kids = t.nodes[static_cast<size_t>(node)].children;
            auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1}));
            if (it == kids.end() || it->first != c) break;
            node = it->second;
            if (t.nodes[static_cast<size_t>(node)].token >= 0) {
                best = t.nodes[static_cast<size_t>(node)].token;
                best_end = j + 1;
            }
        }
        if (best >= 0) {
            *begin = i;
            *end = best_end;
            return best;
        }
    }
    return -1;
}

void AddedVocabulary::split(std::string_view sentence, bool normalized,
                            std::vector<AddedPiece>& out) const {
    out.clear();
    const Trie& trie = sets_[normalized];
    size_t start_offset = 0, from = 0, mbegin = 0, mend = 0;
    while (trie.nodes.size() > 1 && from < sentence.size()) {
        const int32_t k = find(trie, sentence, from, &mbegin, &mend);
        if (k < 0) break;
        // The matcher resumes after the match itself, whatever lstrip / rstrip absorb; that can
        // make pieces overlap (a match inside whitespace that rstrip took), as in the library.
        from = mend;
        const AddedToken& tok = tokens_[static_cast<size_t>(k)];
        size_t start = mbegin, stop = mend;
        if (tok.single_word) {
            const bool start_space = start == 0 || !ends_with_word(sentence.substr(0, start));
            const bool stop_space =
                stop == sentence.size() || !starts_with_word(sentence.substr(stop));
            if (!start_space || !stop_space) continue;
        }
        if (tok.lstrip) {
            start = std::max(trailing_space_start(sentence.substr(0, start)), start_offset);
        }
        if (tok.rstrip) stop += leading_space_length(sentence.substr(stop));
        start = std::min(start, stop);
        if (start_offset < start) out.push_back({-1, start_offset, start});
        if (start < stop) out.push_back({tok.id, start, stop});
        start_offset = stop;
    }
    if (start_offset < sentence.size()) out.push_back({-1, start_offset, sentence.size()});
}

}  // namespace deltatune::tok
