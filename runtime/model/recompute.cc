// Recompute policy names.
#include "runtime/model/recompute.h"

#include "absl/strings/str_cat.h"

namespace deltatune {

absl::StatusOr<Recompute> parse_recompute(const std::string& name) {
    if (name == "none") return Recompute::kNone;
    if (name == "layer") return Recompute::kLayer;
    return absl::InvalidArgumentError(
        absl::StrCat("recompute policy: expected none or layer, got '", name, "'"));
}

const char* recompute_name(Recompute r) {
    return r == Recompute::kNone ? "none" : "layer";
}

}  // namespace deltatune
