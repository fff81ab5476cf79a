// Error conversion between mc::result codes and KJ exceptions crossing the wire.
#include "mc/rpc/client.hpp"
#include "mc/rpc/detail/bridge.hpp"

#include <kj/debug.h>

#include <string>

namespace mc::rpc::detail {

namespace {
thread_local std::string tls_last_error;
constexpr std::string_view wire_prefix = "mc:";
}  // namespace

void set_last_error(std::string_view text) { tls_last_error.assign(text); }

kj::Exception to_kj_exception(const boost::system::error_code& ec) {
  mc::errc code = ec.category() == mc::mc_category() ? static_cast<mc::errc>(ec.value()) : mc::errc::internal_error;
  auto name = mc::error_name(code);
  auto msg = ec.message();
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::str(wire_prefix.data(), kj::StringPtr(name.data(), name.size()), ": ", msg.c_str()));
}

kj::Exception to_kj_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                         kj::str("exception in RPC handler: ", x.what()));
  } catch (...) {
    return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str("unknown exception in RPC handler"));
  }
}

mc::errc from_kj_exception(const kj::Exception& e) {
  std::string_view d(e.getDescription().cStr());
  set_last_error(d);
  auto pos = d.find(wire_prefix);
  if (pos == std::string_view::npos) return mc::errc::rpc_fail;
  auto rest = d.substr(pos + wire_prefix.size());
  auto name = rest.substr(0, rest.find(':'));
  auto code = mc::errc_from_name(name);
  if (code == mc::errc::internal_error && name != "INTERNAL_ERROR") return mc::errc::rpc_fail;
  if (code == mc::errc::ok) return mc::errc::rpc_fail;  // never report success for a failure
  return code;
}

}  // namespace mc::rpc::detail

namespace mc::rpc {
const std::string& last_error_message() { return detail::tls_last_error; }
}  // namespace mc::rpc
