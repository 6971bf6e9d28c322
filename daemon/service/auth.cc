// Token comparison is constant-time in the token's content and always walks every configured
// token, so response timing does not reveal a matching prefix.
#include "daemon/service/auth.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace deltatune::daemon {
namespace {

bool same(const std::string& a, std::string_view b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

}  // namespace

absl::StatusOr<Authenticator> Authenticator::from_token_file(const std::string& path) {
    if (path.empty()) return Authenticator();
    std::ifstream in(path);
    if (!in)
        return absl::FailedPreconditionError(
            absl::StrCat("auth.token_file ", path, ": cannot open"));
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH)) {
        std::fprintf(stderr, "deltatuned: warning: %s is world-readable\n", path.c_str());
    }
    std::vector<std::string> tokens;
    for (std::string line; std::getline(in, line);) {
        const std::string token(absl::StripAsciiWhitespace(line));
        if (!token.empty() && token.front() != '#') tokens.push_back(token);
    }
    if (tokens.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("auth.token_file ", path, " has no tokens"));
    }
    return with_tokens(std::move(tokens));
}

Authenticator Authenticator::with_tokens(std::vector<std::string> tokens) {
    Authenticator a;
    a.tokens_ = std::move(tokens);
    return a;
}

absl::Status Authenticator::check(const grpc::ServerContextBase& ctx) const {
    if (!enabled()) return absl::OkStatus();
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) return absl::UnauthenticatedError("missing authorization: Bearer <token>");
    return check_header(std::string_view(it->second.data(), it->second.size()));
}

absl::Status Authenticator::check_header(std::string_view value) const {
    if (!enabled()) return absl::OkStatus();
    if (value.empty()) return absl::UnauthenticatedError("missing authorization: Bearer <token>");
    constexpr std::string_view kBearer = "Bearer ";
    if (!value.starts_with(kBearer)) {
        return absl::UnauthenticatedError("authorization must be 'Bearer <token>'");
    }
    const std::string_view presented = value.substr(kBearer.size());
    bool ok = false;
    for (const std::string& t : tokens_) ok = same(t, presented) || ok;
    return ok ? absl::OkStatus() : absl::UnauthenticatedError("invalid bearer token");
}

}  // namespace deltatune::daemon
