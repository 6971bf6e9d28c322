// The admin port's HTTP server (daemon/service/http_server.h) over real sockets: routes and their
// captures, repeated query parameters, headers in any case, the default headers, GET/HEAD only,
// one server per port, and the per-client connection cap.
#include "daemon/service/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace deltatune::daemon {
namespace {

int connect_to(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    return fd;
}

// Sends `request` on a fresh connection and reads until the server closes it.
std::string http_exchange(int port, const std::string& request) {
    const int fd = connect_to(port);
    REQUIRE(::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
        out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
}

std::string get(int port, const std::string& target, const std::string& headers = "") {
    return http_exchange(
        port, "GET " + target + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + headers + "\r\n");
}

std::unique_ptr<HttpServer> serve(HttpServer::Limits limits = {}) {
    HttpServer::Options options;
    options.address = "127.0.0.1:0";
    options.limits = limits;
    options.default_headers = {{"X-Content-Type-Options", "nosniff"}};
    std::vector<std::pair<std::string, HttpHandler>> routes;
    routes.emplace_back("/items/([a-z]+)", [](const HttpRequest& req, HttpResponse& res) {
        res.set_content(absl::StrCat("item ", req.matches[1], " tags ",
                                     absl::StrJoin(req.param_values("tag"), ","), " token ",
                                     req.header("AUTHORIZATION"), "\n"),
                        "text/plain");
    });
    routes.emplace_back(
        "/fails", [](const HttpRequest&, HttpResponse&) { throw std::runtime_error("boom"); });
    auto server = HttpServer::start(std::move(options), std::move(routes));
    REQUIRE(server.ok());
    return std::move(*server);
}

TEST_CASE("routes answer GET with captures, parameters and headers", "[daemon][http]") {
    auto server = serve();
    const std::string ok =
        get(server->port(), "/items/abc?tag=x&tag=y%20z", "authorization: Bearer t\r\n");
    CHECK_THAT(ok, Catch::StartsWith("HTTP/1.1 200"));
    CHECK_THAT(ok, Catch::Contains("item abc tags x,y z token Bearer t"));
    CHECK_THAT(ok, Catch::Contains("X-Content-Type-Options: nosniff"));
    CHECK_THAT(get(server->port(), "/items/ABC"), Catch::StartsWith("HTTP/1.1 404"));
    CHECK_THAT(get(server->port(), "/nothing"), Catch::StartsWith("HTTP/1.1 404"));
    CHECK_THAT(get(server->port(), "/fails"),
               Catch::StartsWith("HTTP/1.1 500") && Catch::Contains("boom"));
    const std::string head = http_exchange(
        server->port(), "HEAD /items/abc HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    CHECK_THAT(head, Catch::StartsWith("HTTP/1.1 200") && !Catch::Contains("item abc"));
    const std::string post =
        http_exchange(server->port(),
                      "POST /items/abc HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                      "Connection: close\r\n\r\nhello");
    CHECK_THAT(post, Catch::StartsWith("HTTP/1.1 405") && Catch::Contains("Allow: GET, HEAD"));
}

TEST_CASE("a second server on a bound port fails to start", "[daemon][http]") {
    auto first = serve();
    HttpServer::Options options;
    options.address = "127.0.0.1:" + std::to_string(first->port());
    auto second = HttpServer::start(std::move(options), {});
    REQUIRE(!second.ok());
    CHECK(second.status().code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(second.status().message()), Catch::Contains("cannot bind"));
}

TEST_CASE("connections past the per-client cap are closed at once", "[daemon][http]") {
    HttpServer::Limits limits;
    limits.max_connections_per_client = 2;
    auto server = serve(limits);
    // Two idle connections hold the client's share; a third is accepted and closed unanswered.
    const int a = connect_to(server->port()), b = connect_to(server->port());
    CHECK(get(server->port(), "/items/abc").empty());
    ::close(a);
    ::close(b);
    // Once they are gone, the same client is served again.
    std::string answer;
    for (int i = 0; i < 50 && answer.empty(); ++i) {
        answer = get(server->port(), "/items/abc");
        if (answer.empty()) ::usleep(20000);
    }
    CHECK_THAT(answer, Catch::StartsWith("HTTP/1.1 200"));
}

TEST_CASE("TLS files that are not PEM are refused by name", "[daemon][http]") {
    HttpServer::Options options;
    options.address = "127.0.0.1:0";
    options.tls_cert_file = "/dev/null";
    options.tls_key_file = "/dev/null";
    auto server = HttpServer::start(std::move(options), {});
    REQUIRE(!server.ok());
    CHECK_THAT(std::string(server.status().message()),
               Catch::Contains("tls.cert_file /dev/null") && Catch::Contains("not valid PEM"));
}

}  // namespace
}  // namespace deltatune::daemon
