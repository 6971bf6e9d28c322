// UTF-8 helpers shared by the tokenizer's parts: decoding code points from text already known to
// be valid, the Unicode White_Space and regex-\w classes the Hugging Face library uses for added
// tokens (Rust's `regex` crate), and the byte <-> character table of GPT-2's byte-level BPE.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deltatune::tok {

// Length of the UTF-8 sequence starting with lead byte `b` (1 for stray continuation bytes,
// which valid text never starts a character with).
inline int utf8_length(unsigned char b) {
    if (b < 0x80) return 1;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    return 4;
}

// Decodes the code point at s[i] (valid UTF-8) and advances i past it.
inline char32_t next_code_point(std::string_view s, size_t& i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
        ++i;
        return b0;
    }
    const int n = utf8_length(b0);
    char32_t cp = b0 & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    i += static_cast<size_t>(n);
    return cp;
}

// The code point that ends at s[end] (exclusive), valid UTF-8; `start` receives its offset.
char32_t prev_code_point(std::string_view s, size_t end, size_t* start);

void append_utf8(std::string& out, char32_t cp);

// Unicode White_Space (Rust char::is_whitespace, `\s` of the `regex` and `onig` crates).
bool is_white_space(char32_t cp);
// `\w` of Rust's `regex` crate: Alphabetic, marks, decimal digits, connector punctuation and
// join controls.
bool is_word_char(char32_t cp);

// GPT-2's bytes_to_unicode: every byte has a printable stand-in character.
struct ByteLevelTable {
    std::array<char32_t, 256> byte_to_char{};
    std::array<std::string, 256> byte_to_utf8{};
    // Inverse, indexed by code point (all stand-ins are below 0x144); -1 where none.
    std::array<int16_t, 0x144> char_to_byte{};
};
const ByteLevelTable& byte_level_table();

// The bytes a byte-level token string stands for, or nullopt when it holds a character that is
// no byte's stand-in.
std::optional<std::string> byte_level_decode(std::string_view token);

}  // namespace deltatune::tok
