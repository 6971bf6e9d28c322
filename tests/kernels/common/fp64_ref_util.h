// fp32 <-> fp64 vector conversions for the [cuda] tests that check against the fp64 references.
#pragma once
#include <vector>

namespace deltatune::cudatest {

inline std::vector<double> to_double(const std::vector<float>& f) {
    return {f.begin(), f.end()};
}
inline std::vector<float> to_single(const std::vector<double>& d) {
    return {d.begin(), d.end()};
}

}  // namespace deltatune::cudatest
