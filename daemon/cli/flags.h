// A small command-line flag parser for the deltatune CLI: `--name value` and `--name=value`,
// with every flag declared up front so a typo is an error that names it.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune::cli {

class Flags {
  public:
    // `known` lists accepted flag names without dashes; `boolean` ones take no value.
    static absl::StatusOr<Flags> parse(const std::vector<std::string>& args,
                                       const std::set<std::string>& known,
                                       const std::set<std::string>& boolean = {});
    bool has(const std::string& name) const { return values_.count(name) != 0; }
    // The last value given for `name` (a repeated flag overrides), or `fallback`.
    std::string get(const std::string& name, const std::string& fallback = "") const;
    // Every value given for `name`, in order (for flags that may repeat, e.g. --label).
    std::vector<std::string> get_all(const std::string& name) const;
    absl::StatusOr<std::string> require(const std::string& name) const;
    absl::StatusOr<double> get_double(const std::string& name, double fallback) const;
    absl::StatusOr<uint64_t> get_uint(const std::string& name, uint64_t fallback) const;
    const std::vector<std::string>& positional() const { return positional_; }

  private:
    std::map<std::string, std::string> values_;
    std::map<std::string, std::vector<std::string>> all_;
    std::vector<std::string> positional_;
};

}  // namespace deltatune::cli
