#include "rendezvous/metrics_http.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace dgt::rendezvous {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// One request per connection, then close: scrapers open a connection per scrape.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, const MetricsHttpServer::Render& render)
      : stream_(std::move(socket)), render_(render) {}

  void Start() {
    stream_.expires_after(std::chrono::seconds(10));
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (!ec) self->Respond();
                     });
  }

 private:
  void Respond() {
    response_.version(request_.version());
    response_.keep_alive(false);
    if (request_.method() == http::verb::get && request_.target() == "/metrics") {
      response_.result(http::status::ok);
      response_.set(http::field::content_type, "text/plain; version=0.0.4");
      response_.body() = render_();
    } else {
      response_.result(http::status::not_found);
      response_.set(http::field::content_type, "text/plain");
      response_.body() = "only GET /metrics is served\n";
    }
    response_.prepare_payload();
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code, size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  const MetricsHttpServer::Render& render_;
};

}  // namespace

class MetricsHttpServer::Impl {
 public:
  explicit Impl(Render render) : render_(std::move(render)), acceptor_(io_) {}
  ~Impl() { Stop(); }

  absl::Status Start(const std::string& host, int port) {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-listen host must be an IP address, got '", host, "'"));
    }
    tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("metrics cannot listen on ", host, ":", port, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    Accept();
    thread_ = std::thread([this] { io_.run(); });
    return absl::OkStatus();
  }

  void Stop() {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      io_.stop();
    });
    thread_.join();
  }

  int port() const { return port_; }

 private:
  void Accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) std::make_shared<HttpSession>(std::move(socket), render_)->Start();
      Accept();
    });
  }

  Render render_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  int port_ = 0;
};

MetricsHttpServer::MetricsHttpServer(Render render)
    : impl_(std::make_unique<Impl>(std::move(render))) {}
MetricsHttpServer::~MetricsHttpServer() = default;
absl::Status MetricsHttpServer::Start(const std::string& host, int port) {
  return impl_->Start(host, port);
}
void MetricsHttpServer::Stop() { impl_->Stop(); }
int MetricsHttpServer::port() const { return impl_->port(); }

}  // namespace dgt::rendezvous
