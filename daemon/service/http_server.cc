#include "daemon/service/http_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <regex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/config/daemon_config.h"
#include "runtime/base/status_macros.h"

namespace deltatune::daemon {

std::string HttpRequest::param(const std::string& key) const {
    auto it = params.find(key);
    return it == params.end() ? std::string() : it->second;
}

std::vector<std::string> HttpRequest::param_values(const std::string& key) const {
    std::vector<std::string> out;
    for (auto [it, end] = params.equal_range(key); it != end; ++it) out.push_back(it->second);
    return out;
}

std::string HttpRequest::header(std::string_view name) const {
    auto it = headers.find(absl::AsciiStrToLower(std::string(name)));
    return it == headers.end() ? std::string() : it->second;
}

// The routes, the libmicrohttpd daemon, and the connections a sweeper cuts when their headers
// take too long (libmicrohttpd's own timeout restarts with every byte, so a client trickling a
// byte a second would otherwise hold its connection for hours).
struct HttpServer::Impl {
    using Clock = std::chrono::steady_clock;
    struct Route {
        std::regex pattern;
        HttpHandler handler;
    };
    struct Connection {
        int fd = -1;
        Clock::time_point since;  // connected, or last answered
        bool in_request = false;  // headers complete, answer not yet sent
        bool cut = false;
    };

    Options options;
    std::vector<Route> routes;
    MHD_Daemon* daemon = nullptr;
    std::mutex mu;
    std::condition_variable wake;
    bool stopping = false;
    std::unordered_map<MHD_Connection*, Connection> connections;
    std::thread sweeper;

    void answer(HttpRequest req, HttpResponse& res) const;  // fills req.matches
    void cut_slow_headers();
};

namespace {

using Impl = HttpServer::Impl;

MHD_Result collect_param(void* cls, MHD_ValueKind, const char* key, const char* value) {
    static_cast<HttpRequest*>(cls)->params.emplace(key, value == nullptr ? "" : value);
    return MHD_YES;
}

MHD_Result collect_header(void* cls, MHD_ValueKind, const char* key, const char* value) {
    static_cast<HttpRequest*>(cls)->headers[absl::AsciiStrToLower(key)] =
        value == nullptr ? "" : value;
    return MHD_YES;
}

MHD_Result send(MHD_Connection* connection, const HttpResponse& res,
                const std::vector<std::pair<std::string, std::string>>& default_headers) {
    MHD_Response* response = MHD_create_response_from_buffer(
        res.body.size(), const_cast<char*>(res.body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, res.content_type.c_str());
    for (const auto& [name, value] : default_headers) {
        MHD_add_response_header(response, name.c_str(), value.c_str());
    }
    for (const auto& [name, value] : res.headers) {
        MHD_add_response_header(response, name.c_str(), value.c_str());
    }
    const MHD_Result queued =
        MHD_queue_response(connection, static_cast<unsigned>(res.status), response);
    MHD_destroy_response(response);
    return queued;
}

// Called once per request when its headers are in: every route answers at once, so a body
// (none is expected) is never read and the connection closes after the answer.
MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url, const char* method,
                      const char*, const char*, size_t*, void** request_state) {
    auto* impl = static_cast<Impl*>(cls);
    if (*request_state == nullptr) {
        std::lock_guard lock(impl->mu);
        auto it = impl->connections.find(connection);
        if (it != impl->connections.end()) it->second.in_request = true;
    }
    *request_state = impl;  // the answer goes out on this first call
    HttpRequest req;
    req.method = method;
    req.path = url;
    HttpResponse res;
    if (req.method != MHD_HTTP_METHOD_GET && req.method != MHD_HTTP_METHOD_HEAD) {
        res.status = MHD_HTTP_METHOD_NOT_ALLOWED;
        res.set_header(MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
        res.set_content("only GET and HEAD\n", "text/plain");
    } else {
        MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, collect_param, &req);
        MHD_get_connection_values(connection, MHD_HEADER_KIND, collect_header, &req);
        impl->answer(std::move(req), res);
    }
    return send(connection, res, impl->options.default_headers);
}

void on_connection(void* cls, MHD_Connection* connection, void**,
                   MHD_ConnectionNotificationCode code) {
    auto* impl = static_cast<Impl*>(cls);
    std::lock_guard lock(impl->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const MHD_ConnectionInfo* info =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        impl->connections[connection] = {info == nullptr ? -1 : info->connect_fd,
                                         Impl::Clock::now()};
    } else {
        // libmicrohttpd closes the socket after this returns: the sweeper, which holds the same
        // lock, never shuts down a descriptor that was closed and reused.
        impl->connections.erase(connection);
    }
}

void on_completed(void* cls, MHD_Connection* connection, void**, MHD_RequestTerminationCode) {
    auto* impl = static_cast<Impl*>(cls);
    std::lock_guard lock(impl->mu);
    auto it = impl->connections.find(connection);
    if (it == impl->connections.end()) return;
    it->second.in_request = false;
    it->second.since = Impl::Clock::now();  // a kept-alive connection's next headers start now
}

// A listening socket on `address`: SO_REUSEADDR (a quick restart rebinds) but never
// SO_REUSEPORT, which would let a second daemon share the port.
absl::StatusOr<int> listen_on(const std::string& address) {
    absl::StatusOr<HostPort> parsed = parse_host_port(address);
    if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("listen.http ", parsed.status().message()));
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(parsed->port);
    if (::getaddrinfo(parsed->host.empty() ? nullptr : parsed->host.c_str(), port.c_str(), &hints,
                      &found) != 0 ||
        found == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("listen.http: cannot resolve host '", parsed->host, "'"));
    }
    int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
    int yes = 1;
    const bool ok = fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes)) == 0 &&
                    ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 128) == 0;
    ::freeaddrinfo(found);
    if (!ok) {
        if (fd >= 0) ::close(fd);
        return absl::UnavailableError(absl::StrCat("listen.http: cannot bind ", address));
    }
    return fd;
}

int bound_port(int fd) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
    if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

void HttpServer::Impl::answer(HttpRequest req, HttpResponse& res) const {
    for (const Route& route : routes) {
        std::smatch m;
        if (!std::regex_match(req.path, m, route.pattern)) continue;
        for (const auto& group : m) req.matches.push_back(group.str());
        try {
            route.handler(req, res);
        } catch (const std::exception& e) {
            res = HttpResponse{};
            res.status = MHD_HTTP_INTERNAL_SERVER_ERROR;
            res.set_content(absl::StrCat("internal error: ", e.what(), "\n"), "text/plain");
        }
        return;
    }
    res.status = MHD_HTTP_NOT_FOUND;
    res.set_content("not found\n", "text/plain");
}

void HttpServer::Impl::cut_slow_headers() {
    std::unique_lock lock(mu);
    while (!wake.wait_for(lock, std::chrono::milliseconds(250), [&] { return stopping; })) {
        const Clock::time_point deadline = Clock::now() - options.limits.header_time;
        for (auto& [connection, c] : connections) {
            if (c.in_request || c.cut || c.fd < 0 || c.since > deadline) continue;
            // libmicrohttpd reads end-of-file on its next wake-up and closes the connection.
            ::shutdown(c.fd, SHUT_RDWR);
            c.cut = true;
        }
    }
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::start(
    Options options, std::vector<std::pair<std::string, HttpHandler>> routes) {
    std::string cert, key;
    const bool tls = !options.tls_cert_file.empty();
    if (tls) {
        DT_ASSIGN_OR_RETURN(cert, read_tls_file(options.tls_cert_file));
        DT_ASSIGN_OR_RETURN(key, read_tls_file(options.tls_key_file));
    }
    std::unique_ptr<HttpServer> server(new HttpServer());
    server->impl_ = std::make_unique<Impl>();
    Impl& impl = *server->impl_;
    impl.options = std::move(options);
    for (auto& [pattern, handler] : routes) impl.routes.push_back({std::regex(pattern), handler});
    DT_ASSIGN_OR_RETURN(const int fd, listen_on(impl.options.address));
    server->port_ = bound_port(fd);
    const Limits& limits = impl.options.limits;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
    if (tls) flags |= MHD_USE_TLS;
    // Options with pointers (the PEM texts) must outlive this call only; libmicrohttpd copies.
    impl.daemon = MHD_start_daemon(
        flags, 0, nullptr, nullptr, on_request, &impl, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned>(limits.threads),
        MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(limits.max_connections),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        static_cast<unsigned>(limits.max_connections_per_client), MHD_OPTION_CONNECTION_TIMEOUT,
        static_cast<unsigned>(limits.idle_time.count()), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        limits.header_bytes, MHD_OPTION_NOTIFY_CONNECTION, on_connection, &impl,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, &impl,
        tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, key.c_str(), MHD_OPTION_HTTPS_MEM_CERT,
        cert.c_str(), MHD_OPTION_END);
    if (impl.daemon == nullptr) {
        ::close(fd);
        if (tls) {
            return absl::InvalidArgumentError(
                absl::StrCat("listen.http: TLS with tls.cert_file ", impl.options.tls_cert_file,
                             " and tls.key_file ", impl.options.tls_key_file,
                             ": the certificate or key is not valid PEM"));
        }
        return absl::InternalError("listen.http: the HTTP server did not start");
    }
    impl.sweeper = std::thread([&impl] { impl.cut_slow_headers(); });
    return server;
}

HttpServer::~HttpServer() {
    if (impl_ == nullptr) return;
    {
        std::lock_guard lock(impl_->mu);
        impl_->stopping = true;
    }
    impl_->wake.notify_all();
    if (impl_->sweeper.joinable()) impl_->sweeper.join();
    if (impl_->daemon != nullptr) MHD_stop_daemon(impl_->daemon);
}

}  // namespace deltatune::daemon
