#include "runtime/data/normalizer.h"

#include <utf8proc.h>

#include <cstdint>
#include <memory>

#include "runtime/data/utf8.h"

namespace deltatune::tok {
namespace {

constexpr uint8_t kBoundary = 1;  // an NFC boundary lies before this code point
constexpr uint8_t kStable = 2;    // NFC never changes this code point nor composes it backwards
constexpr uint8_t kOpaque = 4;    // a plain starter to the library (see kLibraryUnknown)

// The Hugging Face library normalises with Unicode 9.0 data (its unicode-normalization-alignments
// crate), utf8proc with newer data (kNfcTableUnicode): these code points have a combining class
// or a canonical composition in utf8proc's data but none in the library's, so they are kept as
// starters that nothing reorders or composes. Found by probing both normalisers with every code
// point (scripts/fixtures/make_tokenizer_fixtures.py --nfc-table); regenerate when utf8proc's
// version moves.
constexpr std::pair<char32_t, char32_t> kLibraryUnknown[] = {
    {0x7FD, 0x7FD},     {0x898, 0x89F},     {0x8CA, 0x8D3},     {0x9FE, 0x9FE},
    {0xC3C, 0xC3C},     {0xD3B, 0xD3C},     {0xEBA, 0xEBA},     {0x1715, 0x1715},
    {0x1ABF, 0x1ACE},   {0x1DF6, 0x1DFA},   {0xA82C, 0xA82C},   {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85},
    {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A},
    {0x11930, 0x11930}, {0x11938, 0x11938}, {0x1193D, 0x1193E}, {0x11943, 0x11943},
    {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47}, {0x11A99, 0x11A99},
    {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97}, {0x11F41, 0x11F42},
    {0x16FF0, 0x16FF1}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE},
    {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
};
constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr auto kNfcOptions = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);

bool has_decomposition(char32_t cp) {
    if (cp >= 0xAC00 && cp <= 0xD7A3) return true;  // Hangul syllables decompose algorithmically
    return utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->decomp_seqindex != UINT16_MAX;
}

// Per-code-point flags, built once from utf8proc's data (about 1 MiB).
struct Tables {
    std::unique_ptr<uint8_t[]> flags{new uint8_t[kMaxCodePoint + 1]()};

    Tables() {
        // A code point that occurs after the first position of any canonical decomposition may
        // compose with what precedes it (combining marks, but also starters such as Hangul
        // vowel and trailing jamo, or Indic length marks); this over-approximates the set.
        std::vector<bool> second(kMaxCodePoint + 1, false);
        std::vector<char32_t> first(kMaxCodePoint + 1, 0);
        std::vector<bool> stable_alone(kMaxCodePoint + 1, true);
        utf8proc_int32_t buf[8];
        for (char32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
            first[cp] = cp;
            if (!has_decomposition(cp)) continue;
            utf8proc_int32_t bc = 0;
            const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp),
                                                               buf, 8, UTF8PROC_DECOMPOSE, &bc);
            if (n <= 1 && (n < 1 || buf[0] == static_cast<utf8proc_int32_t>(cp))) continue;
            first[cp] = static_cast<char32_t>(buf[0]);
            for (utf8proc_ssize_t k = 1; k < n && k < 8; ++k)
                second[static_cast<size_t>(buf[k])] = true;
            const utf8proc_ssize_t m = utf8proc_normalize_utf32(buf, n, kNfcOptions);
            stable_alone[cp] = m == 1 && buf[0] == static_cast<utf8proc_int32_t>(cp);
        }
        auto ccc = [](char32_t c) {
            return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
        };
        for (char32_t cp = 0; cp <= kMaxCodePoint; ++cp) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            if (ccc(cp) != 0 || second[cp]) continue;
            const char32_t f = first[cp];
            uint8_t v = 0;
            if (ccc(f) == 0 && !second[f]) v |= kBoundary;
            if (stable_alone[cp]) v |= kStable;
            flags[cp] = v;
        }
        for (const auto& [lo, hi] : kLibraryUnknown) {
            for (char32_t cp = lo; cp <= hi; ++cp) flags[cp] = kBoundary | kStable | kOpaque;
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

// NFC of one segment, appended to `out`.
void normalize_segment(std::string_view seg, std::string& out) {
    thread_local std::vector<utf8proc_int32_t> buf(256);
    auto decompose = [&] {
        return utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(seg.data()),
                                  static_cast<utf8proc_ssize_t>(seg.size()), buf.data(),
                                  static_cast<utf8proc_ssize_t>(buf.size()), kNfcOptions);
    };
    utf8proc_ssize_t n = decompose();
    if (n > static_cast<utf8proc_ssize_t>(buf.size())) {
        buf.resize(static_cast<size_t>(n));
        n = decompose();
    }
    if (n < 0) {  // cannot happen on valid UTF-8; keep the text rather than lose it
        out.append(seg);
        return;
    }
    n = utf8proc_normalize_utf32(buf.data(), n, kNfcOptions);
    for (utf8proc_ssize_t k = 0; k < n; ++k) append_utf8(out, static_cast<char32_t>(buf[k]));
}

void align_chars(std::string_view in, size_t begin, size_t end, std::vector<Span>* align) {
    if (!align) return;
    size_t i = begin;
    while (i < end) {
        const size_t c = i;
        i += static_cast<size_t>(utf8_length(static_cast<unsigned char>(in[i])));
        align->insert(align->end(), i - c, Span{c, i});
    }
}

}  // namespace

const char* nfc_unicode_version() {
    return utf8proc_unicode_version();
}

bool nfc_normalize(std::string_view in, std::string* out, std::vector<Span>* align) {
    const uint8_t* flags = tables().flags.get();
    // Find the first code point that may change; the segment holding it starts at the last
    // boundary before it.
    size_t seg_start = 0, i = 0;
    bool found = false;
    while (i < in.size()) {
        const auto b = static_cast<unsigned char>(in[i]);
        if (b < 0x80) {
            seg_start = i++;  // ASCII: always a stable boundary
            continue;
        }
        const size_t at = i;
        const uint8_t f = flags[next_code_point(in, i)];
        if (f & kBoundary) seg_start = at;
        if (!(f & kStable)) {
            found = true;
            break;
        }
    }
    if (!found) return false;

    std::string result;
    std::vector<Span> spans;
    result.reserve(in.size() + 16);
    result.append(in.data(), seg_start);
    if (align) {
        spans.reserve(in.size() + 16);
        align_chars(in, 0, seg_start, &spans);
    }
    bool changed = false;
    size_t s = seg_start;
    while (s < in.size()) {
        size_t e = s;
        const uint8_t first = flags[next_code_point(in, e)];
        // An opaque starter is copied as is; only what follows it may change.
        const size_t head = (first & kOpaque) ? e : s;
        bool stable = first & kStable;
        while (e < in.size()) {
            size_t j = e;
            const uint8_t f = flags[next_code_point(in, j)];
            if (f & kBoundary) break;
            stable = stable && (f & kStable);
            e = j;
        }
        const std::string_view seg = in.substr(s, e - s);
        const size_t before = result.size();
        if (!stable) {
            result.append(in.data() + s, head - s);
            normalize_segment(in.substr(head, e - head), result);
        }
        if (stable || std::string_view(result).substr(before) == seg) {
            if (!stable) result.resize(before);
            result.append(seg);
            align_chars(in, s, e, align ? &spans : nullptr);
        } else {
            changed = true;
            if (align) spans.insert(spans.end(), result.size() - before, Span{s, e});
        }
        s = e;
    }
    if (!changed) return false;
    *out = std::move(result);
    if (align) *align = std::move(spans);
    return true;
}

}  // namespace deltatune::tok
