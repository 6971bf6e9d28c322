// Reporter behind DT_CHECK: one line to stderr naming the broken invariant, then abort.
#include "runtime/base/check.h"

#include <cstdio>
#include <cstdlib>

namespace deltatune {

void check_failed(const char* cond, const char* func, const char* file, int line,
                  const std::string& msg) {
    std::fprintf(stderr, "DT_CHECK failed: %s in %s at %s:%d%s%s\n", cond, func, file, line,
                 msg.empty() ? "" : ": ", msg.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace deltatune
