// The regex pre-tokenizer split (Split with behavior Isolated, and ByteLevel with use_regex), on
// PCRE2 in UTF + UCP mode with JIT. The library compiles these patterns with Oniguruma, whose
// Unicode `\s` is White_Space and `\w` is letters, marks, decimal digits and connector
// punctuation; PCRE2's differ (its `\s` also takes U+180E, its `\w` takes all numbers and no
// marks), and Oniguruma's Unicode data is newer, so these classes are rewritten into explicit
// ones before compiling. Case-insensitive groups agree (both fold with Unicode simple folding).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune::tok {

// GPT-2's pattern, used by ByteLevel when use_regex is set.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Rewrites `\s`, `\w`, `\p{L}`, `\p{N}`, `\p{M}` (and their negations) into Oniguruma's meaning;
// fails on the forms a PCRE2 class cannot express (a negated one inside a bracket class).
absl::StatusOr<std::string> onig_compatible_pattern(std::string_view pattern);

class SplitRegex {
  public:
    // `literal`: the pattern is a plain string (tokenizer.json {"String": ...}).
    static absl::StatusOr<std::unique_ptr<SplitRegex>> compile(std::string_view pattern,
                                                               bool literal);
    ~SplitRegex();

    // The Isolated split of `s`: every match and every gap between matches, in order, as
    // [begin, end) ranges; empty ranges are left out. Appends to `out`.
    absl::Status split(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

  private:
    SplitRegex() = default;
    struct Code;
    std::unique_ptr<Code> code_;
};

}  // namespace deltatune::tok
