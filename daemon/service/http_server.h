// A small GET-only HTTP/1.1 server for the admin port, on libmicrohttpd. Connections are events
// on a few epoll threads, not threads, so slow clients cost a socket each, never a worker; and
// every connection is bounded: per client address, in total, in header time and in idle time.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace deltatune::daemon {

struct HttpRequest {
    std::string method, path;
    std::vector<std::string> matches;                // the route's captures; [0] is the whole path
    std::multimap<std::string, std::string> params;  // the query, decoded; keys may repeat
    std::map<std::string, std::string> headers;      // names in lower case

    bool has_param(const std::string& key) const { return params.count(key) > 0; }
    // The first value of `key`, or "".
    std::string param(const std::string& key) const;
    std::vector<std::string> param_values(const std::string& key) const;
    // The header's value, or "" (name in any case).
    std::string header(std::string_view name) const;
};

struct HttpResponse {
    int status = 200;
    std::string body, content_type = "text/plain";
    std::vector<std::pair<std::string, std::string>> headers;

    void set_content(std::string text, std::string type) {
        body = std::move(text);
        content_type = std::move(type);
    }
    void set_header(std::string name, std::string value) {
        headers.emplace_back(std::move(name), std::move(value));
    }
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

class HttpServer {
  public:
    struct Limits {
        int threads = 4;                       // epoll threads answering requests
        int max_connections = 256;             // in total; more are refused at accept
        int max_connections_per_client = 16;   // per source address
        std::chrono::seconds header_time{10};  // from connect (or the last answer) to headers
        std::chrono::seconds idle_time{30};    // no bytes either way
        size_t header_bytes = 32 << 10;        // the request line and headers
    };
    struct Options {
        std::string address;  // host:port; port 0 picks one
        // PEM files (both or neither): HTTPS with them.
        std::string tls_cert_file, tls_key_file;
        Limits limits;
        // Sent with every answer.
        std::vector<std::pair<std::string, std::string>> default_headers;
    };

    // `routes`: full-match regular expressions over the path, tried in order, each answering
    // GET (and HEAD). Binds (SO_REUSEADDR only: a second server on a bound port fails) and serves
    // from background threads.
    static absl::StatusOr<std::unique_ptr<HttpServer>> start(
        Options options, std::vector<std::pair<std::string, HttpHandler>> routes);
    ~HttpServer();  // stops serving; requests in flight finish first
    int port() const { return port_; }

    // What the libmicrohttpd callbacks reach; public so they can, opaque to everyone else.
    struct Impl;

  private:
    HttpServer() = default;
    std::unique_ptr<Impl> impl_;
    int port_ = 0;
};

}  // namespace deltatune::daemon
