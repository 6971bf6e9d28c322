// DT_CHECK: invariants and programming errors only (never user input: that is a Status). On
// failure it prints the condition, function and file:line plus any streamed message, then aborts.
#pragma once

#include <sstream>
#include <string>

namespace deltatune {

[[noreturn]] void check_failed(const char* cond, const char* func, const char* file, int line,
                               const std::string& msg);

// Collects the streamed message; its destructor reports the failure and never returns.
class CheckFailure {
  public:
    CheckFailure(const char* cond, const char* func, const char* file, int line)
        : cond_(cond), func_(func), file_(file), line_(line) {}
    [[noreturn]] ~CheckFailure() { check_failed(cond_, func_, file_, line_, msg_.str()); }
    template <typename T>
    CheckFailure& operator<<(const T& v) {
        msg_ << v;
        return *this;
    }

  private:
    const char* cond_;
    const char* func_;
    const char* file_;
    int line_;
    std::ostringstream msg_;
};

}  // namespace deltatune

#define DT_CHECK(cond) \
    if (cond) {        \
    } else             \
        ::deltatune::CheckFailure(#cond, __func__, __FILE__, __LINE__)
