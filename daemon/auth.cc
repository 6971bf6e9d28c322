// Token comparison is constant-time in the token's content and always walks every configured
// token, so response timing does not reveal a matching prefix.
#include "daemon/auth.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/base/file_util.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {
namespace {

bool same(const std::string& a, std::string_view b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

}  // namespace

std::vector<std::string> parse_token_lines(std::string_view text) {
    std::vector<std::string> tokens;
    for (absl::string_view line :
         absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
        const absl::string_view token = absl::StripAsciiWhitespace(line);
        if (!token.empty() && token.front() != '#') tokens.emplace_back(token);
    }
    return tokens;
}

absl::Status check_token(std::string_view token, std::string_view where) {
    for (const char c : token) {
        if (c <= ' ' || c > '~') {
            return absl::InvalidArgumentError(
                absl::StrCat(absl::string_view(where.data(), where.size()),
                             ": a token holds a character that cannot travel in a header (byte ",
                             static_cast<int>(static_cast<unsigned char>(c)),
                             "); tokens are printable ASCII without spaces"));
        }
    }
    return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> read_token_file(const std::string& path,
                                                         const std::string& where) {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat(where, " ", path, ": cannot open"));
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH)) {
        std::fprintf(stderr, "warning: %s is world-readable (chmod 600 it)\n", path.c_str());
    }
    std::stringstream text;
    text << in.rdbuf();
    std::vector<std::string> tokens = parse_token_lines(text.str());
    for (const std::string& t : tokens) {
        DT_RETURN_IF_ERROR(check_token(t, absl::StrCat(where, " ", path)));
    }
    if (tokens.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, " ", path, ": holds no token"));
    }
    return tokens;
}

absl::StatusOr<Authenticator> Authenticator::from_token_file(const std::string& path) {
    if (path.empty()) return Authenticator();
    absl::StatusOr<std::vector<std::string>> tokens = read_token_file(path, "auth.token_file");
    // A daemon that cannot read its configured tokens does not start (never without auth).
    if (!tokens.ok()) return absl::FailedPreconditionError(tokens.status().message());
    return with_tokens(*std::move(tokens));
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

namespace {
std::string ca_file_or_env(std::string ca_file) {
    const char* env_ca = std::getenv("DELTATUNE_CA_FILE");
    return ca_file.empty() && env_ca ? env_ca : ca_file;
}
}  // namespace

bool client_uses_tls(const std::string& ca_file, bool tls) {
    const char* env_tls = std::getenv("DELTATUNE_TLS");
    return tls || !ca_file_or_env(ca_file).empty() || (env_tls && std::string(env_tls) == "1");
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> client_channel_credentials(
    std::string ca_file, bool tls, const std::string& ca_flag) {
    if (!client_uses_tls(ca_file, tls)) return grpc::InsecureChannelCredentials();
    ca_file = ca_file_or_env(ca_file);
    grpc::SslCredentialsOptions options;
    if (!ca_file.empty()) {
        absl::StatusOr<std::string> pem = read_file(ca_file);
        if (!pem.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(ca_flag, " ", ca_file, ": ", pem.status().message()));
        }
        options.pem_root_certs = *std::move(pem);
    }
    return grpc::SslCredentials(options);
}

}  // namespace deltatune::daemon
