// Test helpers for the kernel references: seeded random inputs, float/double comparisons and a
// central-finite-difference gradient checker run in double.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace deltatune::test {

using Vec = std::vector<double>;

// Seeded normal/uniform draws. Draws are never exactly zero, so no gradient term can vanish (and
// no bug hide) because an input happened to be 0.
class Rng {
  public:
    explicit Rng(uint64_t seed) : gen_(seed) {}

    Vec normal(int64_t n, double stddev = 1.0, double mean = 0.0) {
        std::normal_distribution<double> dist(mean, stddev);
        Vec out(static_cast<size_t>(n));
        for (double& x : out) {
            do {
                x = dist(gen_);
            } while (x == 0.0);
        }
        return out;
    }

    Vec uniform(int64_t n, double lo, double hi) {
        std::uniform_real_distribution<double> dist(lo, hi);
        Vec out(static_cast<size_t>(n));
        for (double& x : out) {
            do {
                x = dist(gen_);
            } while (x == 0.0);
        }
        return out;
    }

  private:
    std::mt19937_64 gen_;
};

// NaN-filled buffers for "=" outputs: an element the kernel forgets to write stays NaN.
template <typename T = double>
std::vector<T> nans(int64_t n) {
    return std::vector<T>(static_cast<size_t>(n), std::numeric_limits<T>::quiet_NaN());
}

// The same values in T (float inputs are the double inputs rounded once).
template <typename T>
std::vector<T> cast(const Vec& v) {
    return std::vector<T>(v.begin(), v.end());
}

inline double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        s += a[i] * b[i];
    }
    return s;
}

inline Vec minus(const Vec& a, const Vec& b) {
    Vec out(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
        out[i] = a[i] - b[i];
    }
    return out;
}

inline double max_abs(const Vec& v) {
    double m = 0;
    for (double x : v) {
        m = std::max(m, std::abs(x));
    }
    return m;
}

template <typename T>
bool all_finite(const std::vector<T>& v) {
    return std::all_of(v.begin(), v.end(), [](T x) { return std::isfinite(x); });
}

// Normwise relative difference max|a - ref| / max|ref|: the yardstick for float vs double.
template <typename T>
double rel_diff(const std::vector<T>& a, const Vec& ref) {
    REQUIRE(a.size() == ref.size());
    double num = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::abs(static_cast<double>(a[i]) - ref[i]);
        num = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(num, d);
    }
    const double den = max_abs(ref);
    return den > 0 ? num / den : num;
}

// One differentiable input of an op: the values the loss reads (perturbed in place and restored
// by the checker) and the analytic gradient the op's backward produced for them.
struct FdInput {
    std::string name;
    Vec* values;
    Vec analytic;
};

// Checks every analytic gradient against (L(x + h) - L(x - h)) / 2h, element by element, where
// loss() re-runs the double forward on the current inputs and returns sum(weights * outputs). The
// error of an input is max |analytic - fd| / max |analytic|; each must stay under tol. Returns the
// largest error over all inputs (printed per input when DT_FD_REPORT is set).
inline double check_gradients(const std::string& op, const std::function<double()>& loss,
                              const std::vector<FdInput>& inputs, double tol = 1e-6,
                              double h = 1e-6) {
    double worst = 0;
    for (const FdInput& in : inputs) {
        Vec& x = *in.values;
        REQUIRE(in.analytic.size() == x.size());
        REQUIRE(all_finite(in.analytic));
        double max_err = 0;
        size_t worst_i = 0;
        double worst_fd = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double saved = x[i];
            x[i] = saved + h;
            const double loss_up = loss();
            x[i] = saved - h;
            const double loss_down = loss();
            x[i] = saved;
            const double fd = (loss_up - loss_down) / (2 * h);
            const double err = std::abs(fd - in.analytic[i]);
            if (!(err <= max_err)) {  // a NaN error counts as the worst
                max_err = err;
                worst_i = i;
                worst_fd = fd;
            }
        }
        const double scale = std::max(max_abs(in.analytic), 1e-300);
        const double rel = max_err / scale;
        if (std::getenv("DT_FD_REPORT") != nullptr) {
            std::printf("fd %-28s %-10s n=%-5zu max rel err %.3e\n", op.c_str(), in.name.c_str(),
                        x.size(), rel);
        }
        INFO(op << " d" << in.name << "[" << worst_i << "]: analytic " << in.analytic[worst_i]
                << " vs fd " << worst_fd << " (grad max " << scale << ")");
        CHECK(rel < tol);
        worst = std::max(worst, rel);
    }
    return worst;
}

// Rows [begin, end) of a row-major buffer with `width` values per row, e.g. one document's tokens.
inline Vec rows_of(const Vec& v, int64_t begin, int64_t end, int64_t width) {
    return Vec(v.begin() + begin * width, v.begin() + end * width);
}

// Document boundaries (cu_seqlens) from document lengths.
inline std::vector<int32_t> cu_seqlens_of(const std::vector<int32_t>& lengths) {
    std::vector<int32_t> cu{0};
    for (int32_t len : lengths) {
        cu.push_back(cu.back() + len);
    }
    return cu;
}

}  // namespace deltatune::test
