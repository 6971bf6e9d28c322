// Bearer-token authentication for the public FineTuningService. Tokens are read once from a
// file (one per line; blank lines and lines starting with '#' ignored). Each handler calls
// check() first: a missing or wrong "authorization: Bearer <token>" is UNAUTHENTICATED.
// Checked per handler rather than in an AuthMetadataProcessor because processors only run on
// secure (TLS) credentials, and the loopback default is plaintext.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/server_context.h>

#include <memory>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deltatune::daemon {

// The tokens of a token file: one per line, surrounding whitespace (a CR too) trimmed, blank
// lines and lines starting with '#' skipped. The daemon and the CLI read token files with this.
std::vector<std::string> parse_token_lines(std::string_view text);
// A bearer token travels in a header: printable ASCII, no spaces. `where` names its source.
absl::Status check_token(std::string_view token, std::string_view where);
// A token file's tokens (parse_token_lines), each checked, at least one: the daemon's
// auth.token_file and the CLI's --token-file are read the same way. `where` ("auth.token_file",
// "--token-file") starts every error: NotFound when the file cannot be opened, InvalidArgument
// for a bad token or none. Warns on stderr when the file is world-readable.
absl::StatusOr<std::vector<std::string>> read_token_file(const std::string& path,
                                                         const std::string& where);

// A client's channel credentials (the CLI's, a node agent's): TLS when `tls`, a `ca_file`,
// $DELTATUNE_TLS=1 or $DELTATUNE_CA_FILE say so, the server's certificate checked against the
// CA file or else the system's roots; plaintext otherwise. InvalidArgument, naming `ca_flag`, for
// a CA file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> client_channel_credentials(
    std::string ca_file, bool tls, const std::string& ca_flag = "--ca-file");
// Whether client_channel_credentials(ca_file, tls) speaks TLS.
bool client_uses_tls(const std::string& ca_file, bool tls);

class Authenticator {
  public:
    Authenticator() = default;  // disabled: every call passes
    // Empty `path` = disabled. A configured but unreadable or empty file is an error, never
    // a silent fallback to no auth.
    static absl::StatusOr<Authenticator> from_token_file(const std::string& path);
    static Authenticator with_tokens(std::vector<std::string> tokens);

    bool enabled() const { return !tokens_.empty(); }
    absl::Status check(const grpc::ServerContextBase& ctx) const;
    // The value of an HTTP `Authorization` header (empty when absent).
    absl::Status check_header(std::string_view authorization) const;

  private:
    std::vector<std::string> tokens_;
};

}  // namespace deltatune::daemon
