// StoreSetter: a fire-and-forget SET of one key on a TCPStore-protocol server, on the agent's
// io_context (the rank-restart generation, `dgt/restart/<rank>`). Moved unchanged out of
// agent.cc; the agent's asynchronous store client replaces it.
//
// Thread-compatible: use from the io_context's thread only.
#ifndef DGT_AGENT_STORE_SETTER_H_
#define DGT_AGENT_STORE_SETTER_H_

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "boost/asio.hpp"
#include "common/logging.h"

namespace dgt::agent {

// Fire-and-forget SET of one key on a TCPStore-protocol server (1.x SET: opcode 0, key, value;
// no reply), bounded by a deadline.
class StoreSetter : public std::enable_shared_from_this<StoreSetter> {
 public:
  StoreSetter(boost::asio::io_context& io, std::string frame)
      : socket_(io), timer_(io), frame_(std::move(frame)) {}
  void Run(const std::string& host, int port) {
    boost::system::error_code ec;
    auto address = boost::asio::ip::make_address(host, ec);
    if (ec) return;
    auto self = shared_from_this();
    timer_.expires_after(std::chrono::seconds(5));
    timer_.async_wait([self](boost::system::error_code e) {
      if (!e) {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
      }
    });
    socket_.async_connect(boost::asio::ip::tcp::endpoint(address, static_cast<uint16_t>(port)),
                          [self](boost::system::error_code e) {
                            if (e) return self->Done(e);
                            boost::asio::async_write(
                                self->socket_, boost::asio::buffer(self->frame_),
                                [self](boost::system::error_code e2, size_t) { self->Done(e2); });
                          });
  }

 private:
  void Done(boost::system::error_code ec) {
    if (ec) spdlog::warn("dgt-run: cannot publish a restart in the store: {}", ec.message());
    timer_.cancel();
    boost::system::error_code ignored;
    socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
  }
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  std::string frame_;
};

}  // namespace dgt::agent

#endif  // DGT_AGENT_STORE_SETTER_H_
