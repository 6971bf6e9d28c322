// Helpers shared by the runtime tests: temporary directories, running the CLI, tensor errors.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>

#include "runtime/tensor/tensor.h"

namespace deltatune::testing {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
  public:
    TempDir() {
        std::random_device rd;
        path_ = std::filesystem::temp_directory_path() / ("deltatune_test_" + std::to_string(rd()));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    std::string str() const { return path_.string(); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    std::filesystem::path path_;
};

// Sets (or, with a null value, unsets) an environment variable for a scope, restoring its value
// or its absence after.
class ScopedEnv {
  public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) saved_ = old;
        if (value) {
            setenv(name, value, 1);
        } else {
            unsetenv(name);
        }
    }
    ~ScopedEnv() {
        if (saved_) {
            setenv(name_, saved_->c_str(), 1);
        } else {
            unsetenv(name_);
        }
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

  private:
    const char* name_;
    std::optional<std::string> saved_;
};

// The source and build trees, baked in at compile time; DELTATUNE_SOURCE_DIR and
// DELTATUNE_BINARY_DIR override them where the binaries run elsewhere (the GPU machine).
inline std::string tree_dir(const char* env, const char* built_in) {
    const char* v = std::getenv(env);
    return v && *v ? v : built_in;
}
inline std::string source_path(const std::string& rel) {
    return tree_dir("DELTATUNE_SOURCE_DIR", DT_SOURCE_DIR) + "/" + rel;
}
inline std::string cli_path() {
    return tree_dir("DELTATUNE_BINARY_DIR", DT_BINARY_DIR) + "/daemon/deltatune";
}

// Runs a shell command, returns its exit status and fills `out` with its stdout.
inline int run_command(const std::string& cmd, std::string& out) {
    out.clear();
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ||a - b|| / ||b|| over two fp32 CPU tensors of equal size (0 when both are zero).
inline double relative_error(const Tensor& a, const Tensor& b) {
    const float* x = a.data<float>();
    const float* y = b.data<float>();
    double num = 0, den = 0;
    for (int64_t i = 0; i < b.numel(); ++i) {
        const double d = static_cast<double>(x[i]) - y[i];
        num += d * d;
        den += static_cast<double>(y[i]) * y[i];
    }
    if (den == 0) return std::sqrt(num);
    return std::sqrt(num / den);
}

}  // namespace deltatune::testing
