#pragma once
// RPC over an RC queue pair (SEND/RECV with immediate data): the stream
// (rdma_stream.cpp) and what the handshake (rdma_handshake.cpp) needs of it.
// Verbs types inside: include from lib/rpc/src .cpp files only.
#include "negotiate.hpp"

#include "mc/verbs/device.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace mc::rpc::detail {

/// Stream framing, the same on both sides (checked by the handshake): one
/// SEND carries at most chunk_bytes; each side grants data_credits receive
/// buffers to its peer.
inline constexpr std::uint32_t rdma_chunk_bytes = 16384;
inline constexpr std::uint32_t rdma_data_credits = 32;

class rdma_stream final : public stream_base {
 public:
  struct core;
  /// Allocates the QP (INIT, receives posted); connect() finishes it.
  static mc::result<kj::Own<rdma_stream>> create(std::shared_ptr<mc::verbs::device> dev, mc::executor ex,
                                                 std::string* message);
  ~rdma_stream() noexcept(false);

  mc::verbs::qp_info local_info() const noexcept;
  /// Moves the QP to RTS (receives are already posted).
  bool connect(const mc::verbs::qp_info& remote, std::string* message);
  /// Adopts the handshake's TCP connection (the liveness channel) and starts
  /// the completion and liveness watches.
  void start(boost::asio::ip::tcp::socket ctrl);

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<void> whenWriteDisconnected() override { return kj::NEVER_DONE; }
  void shutdownWrite() override;
  void abortRead() override;
  kj::Maybe<int> getFd() const override { return nullptr; }

  mc::time_point last_activity() const noexcept override;
  void close() noexcept override;
  const char* transport() const noexcept override { return "rdma"; }

  /// Use create().
  explicit rdma_stream(std::shared_ptr<core> c) : core_(std::move(c)) {}

 private:
  kj::Promise<size_t> read_loop(kj::byte* buf, size_t min_bytes, size_t max_bytes, size_t done);
  kj::Promise<void> write_loop(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, size_t first, size_t offset);
  kj::Promise<void> wait_readable();
  kj::Promise<void> wait_writable();

  std::shared_ptr<core> core_;
};

}  // namespace mc::rpc::detail
