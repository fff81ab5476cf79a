// Who is on the other end of a loopback TCP connection: the uid owning the
// peer's socket, asked from the kernel (NETLINK_SOCK_DIAG, one exact-socket
// request; the reply is queued before sendto() returns, so nothing waits).
#include "attach_core.hpp"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace mc::store::detail {
namespace {

/// Fills a diag address field (4 x be32) from text; false when it is not an
/// address of `family`.
bool put_address(int family, const std::string& ip, __be32 (&out)[4]) {
  std::memset(out, 0, sizeof out);
  return ::inet_pton(family, ip.c_str(), out) == 1;
}

class fd_guard {
 public:
  explicit fd_guard(int fd) : fd_(fd) {}
  ~fd_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::optional<std::uint32_t> loopback_peer_uid(const std::string& peer_ip, std::uint16_t peer_port,
                                               const std::string& local_ip, std::uint16_t local_port) {
  const int family = peer_ip.find(':') != std::string::npos ? AF_INET6 : AF_INET;
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = static_cast<__u8>(family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  // The peer's socket: its local end is peer_ip:peer_port, its remote end
  // the address it connected to (ours).
  msg.req.id.idiag_sport = htons(peer_port);
  msg.req.id.idiag_dport = htons(local_port);
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  std::string local = local_ip;
  if (family == AF_INET6 && local.find(':') == std::string::npos) local = "::1";
  if (!put_address(family, peer_ip, msg.req.id.idiag_src) || !put_address(family, local, msg.req.id.idiag_dst))
    return std::nullopt;
  fd_guard fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (fd.get() < 0) return std::nullopt;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) !=
      static_cast<ssize_t>(sizeof msg))
    return std::nullopt;
  alignas(nlmsghdr) char buf[8192];
  auto n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
  if (n <= 0) return std::nullopt;
  auto* h = reinterpret_cast<nlmsghdr*>(buf);
  auto left = static_cast<unsigned>(n);
  for (; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) return std::nullopt;  // NLMSG_ERROR: no such socket
    if (h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) return std::nullopt;
    auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
    return m->idiag_uid;
  }
  return std::nullopt;
}

}  // namespace mc::store::detail
