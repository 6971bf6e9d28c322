// NFC normalisation (utf8proc) that also maps every normalised byte back to the original span it
// came from. The text is cut at NFC boundaries (before a starter that nothing can compose with
// backwards) into segments that normalise independently, so a changed segment maps as a whole
// to its original span and everything else maps character by character. Text that NFC leaves
// unchanged, by far the common case, is detected with a per-code-point table and never copied.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltatune::tok {

using Span = std::pair<size_t, size_t>;

// Returns false when `in` is already in NFC (nothing written). Otherwise writes NFC(in) to `out`
// and, when `align` is not null, for each byte of `out` the [begin, end) span of `in` it came
// from (a whole character when unchanged, the whole segment when changed), and returns true.
bool nfc_normalize(std::string_view in, std::string* out, std::vector<Span>* align);

// The Unicode version of utf8proc's data, and the one the table of code points the library does
// not normalise (normalizer.cc) was generated against; a test checks that they agree.
const char* nfc_unicode_version();
inline constexpr std::string_view kNfcTableUnicode = "15.0.0";

}  // namespace deltatune::tok
