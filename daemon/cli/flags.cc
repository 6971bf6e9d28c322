// Flag parsing for the deltatune CLI.
#include "daemon/cli/flags.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace deltatune::cli {

absl::StatusOr<Flags> Flags::parse(const std::vector<std::string>& args,
                                   const std::set<std::string>& known,
                                   const std::set<std::string>& boolean) {
    Flags f;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a.rfind("--", 0) != 0) {
            f.positional_.push_back(a);
            continue;
        }
        std::string name = a.substr(2), value;
        const size_t eq = name.find('=');
        const bool inline_value = eq != std::string::npos;
        if (inline_value) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
        }
        if (!known.count(name) && !boolean.count(name)) {
            return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
        }
        if (boolean.count(name)) {
            f.values_[name] = inline_value ? value : "true";
            continue;
        }
        if (!inline_value) {
            if (i + 1 >= args.size())
                return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
            value = args[++i];
        }
        f.values_[name] = value;
        f.all_[name].push_back(value);
    }
    return f;
}

std::string Flags::get(const std::string& name, const std::string& fallback) const {
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
}

std::vector<std::string> Flags::get_all(const std::string& name) const {
    auto it = all_.find(name);
    return it == all_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<std::string> Flags::require(const std::string& name) const {
    auto it = values_.find(name);
    if (it == values_.end())
        return absl::InvalidArgumentError(absl::StrCat("missing required flag --", name));
    return it->second;
}

absl::StatusOr<double> Flags::get_double(const std::string& name, double fallback) const {
    if (!has(name)) return fallback;
    const std::string s = get(name);
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || errno != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, ": '", s, "' is not a number"));
    }
    return v;
}

absl::StatusOr<uint64_t> Flags::get_uint(const std::string& name, uint64_t fallback) const {
    if (!has(name)) return fallback;
    const std::string s = get(name);
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0 || s[0] == '-') {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, ": '", s, "' is not a non-negative integer"));
    }
    return static_cast<uint64_t>(v);
}

}  // namespace deltatune::cli
