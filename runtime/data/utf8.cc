#include "runtime/data/utf8.h"

#include <utf8proc.h>

#include <cstring>

#include "runtime/data/tokenizer.h"

namespace deltatune {
namespace {

// Length n > 0 of the well-formed sequence at s[i], or -n for its maximal subpart: the longest
// prefix of a well-formed sequence (Unicode 6.0+ "best practice", Table 3-7 ranges), at least 1.
int check_sequence(std::string_view s, size_t i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) return 1;
    int need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
    } else if (b0 == 0xE0) {
        need = 2, lo = 0xA0;
    } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
        need = 2;
    } else if (b0 == 0xED) {
        need = 2, hi = 0x9F;  // no surrogates
    } else if (b0 == 0xF0) {
        need = 3, lo = 0x90;  // no overlongs
    } else if (b0 >= 0xF1 && b0 <= 0xF3) {
        need = 3;
    } else if (b0 == 0xF4) {
        need = 3, hi = 0x8F;  // nothing above U+10FFFF
    } else {
        return -1;
    }
    for (int k = 1; k <= need; ++k) {
        if (i + static_cast<size_t>(k) >= s.size()) return -k;
        const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
        if (b < lo || b > hi) return -k;
        lo = 0x80, hi = 0xBF;
    }
    return need + 1;
}

// Skips a run of ASCII bytes eight at a time; returns the offset of the first non-ASCII byte.
size_t skip_ascii(std::string_view s, size_t i) {
    while (i + 8 <= s.size()) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        if (w & 0x8080808080808080ull) break;
        i += 8;
    }
    while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
    return i;
}

}  // namespace

std::optional<size_t> first_invalid_utf8(std::string_view bytes) {
    size_t i = 0;
    while (true) {
        i = skip_ascii(bytes, i);
        if (i >= bytes.size()) return std::nullopt;
        const int n = check_sequence(bytes, i);
        if (n < 0) return i;
        i += static_cast<size_t>(n);
    }
}

std::string sanitize_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    size_t i = 0;
    while (i < bytes.size()) {
        const size_t j = skip_ascii(bytes, i);
        out.append(bytes.data() + i, j - i);
        i = j;
        if (i >= bytes.size()) break;
        const int n = check_sequence(bytes, i);
        if (n > 0) {
            out.append(bytes.data() + i, static_cast<size_t>(n));
            i += static_cast<size_t>(n);
        } else {
            out.append("\xEF\xBF\xBD");  // U+FFFD for the whole maximal subpart
            i += static_cast<size_t>(-n);
        }
    }
    return out;
}

namespace tok {

char32_t prev_code_point(std::string_view s, size_t end, size_t* start) {
    size_t b = end - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    *start = b;
    size_t i = b;
    return next_code_point(s, i);
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool is_white_space(char32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_word_char(char32_t cp) {
    if (cp < 0x80) {
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
               cp == '_';
    }
    if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
    // Other_Alphabetic symbols outside the letter and mark categories: circled and squared
    // Latin letters.
    if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
        (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189)) {
        return true;
    }
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_MN:
        case UTF8PROC_CATEGORY_MC:
        case UTF8PROC_CATEGORY_ME:
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_PC:
            return true;
        default:
            return false;
    }
}

const ByteLevelTable& byte_level_table() {
    static const ByteLevelTable table = [] {
        ByteLevelTable t;
        t.char_to_byte.fill(-1);
        // Printable Latin-1 bytes stand for themselves; the rest get 256, 257, ... in order.
        char32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const char32_t c = printable ? static_cast<char32_t>(b) : next++;
            t.byte_to_char[static_cast<size_t>(b)] = c;
            tok::append_utf8(t.byte_to_utf8[static_cast<size_t>(b)], c);
            t.char_to_byte[c] = static_cast<int16_t>(b);
        }
        return t;
    }();
    return table;
}

std::optional<std::string> byte_level_decode(std::string_view token) {
    const ByteLevelTable& t = byte_level_table();
    std::string out;
    out.reserve(token.size());
    size_t i = 0;
    while (i < token.size()) {
        const char32_t cp = next_code_point(token, i);
        if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) return std::nullopt;
        out.push_back(static_cast<char>(t.char_to_byte[cp]));
    }
    return out;
}

}  // namespace tok
}  // namespace deltatune
