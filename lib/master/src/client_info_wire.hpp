#pragma once
// ClientInfo <-> mc::master::client_info, shared by the master's service and
// its typed client (one place to extend when the struct grows).
#include "master.capnp.h"
#include "mc/master/metadata.hpp"

namespace mc::master::detail {

/// Text <-> std::string by length. KJ's std::string interop goes through
/// c_str() / cStr(), which stop at the first NUL byte: a key or id with a NUL
/// in it would silently become another (shorter) one on the wire (found by
/// the master_rpc fuzz target: "a\0x" was registered, looked up and removed
/// as "a").
inline std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }
inline capnp::Text::Reader text(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }

inline client_info read_info(ClientInfo::Reader r) {
  return {str(r.getClientId()), str(r.getRpcEndpoint()), str(r.getTransferEndpoint()), r.getCapacity(),
          r.getUsed(),          r.getTransferInstance(), str(r.getHttpEndpoint()),     r.getOwnMembership()};
}

inline void set_info(ClientInfo::Builder b, const client_info& i) {
  b.setClientId(text(i.client_id));
  b.setRpcEndpoint(text(i.rpc_endpoint));
  b.setTransferEndpoint(text(i.transfer_endpoint));
  b.setCapacity(i.capacity);
  b.setUsed(i.used);
  b.setTransferInstance(i.transfer_instance);
  b.setHttpEndpoint(text(i.http_endpoint));
  b.setOwnMembership(i.own_membership);
}

}  // namespace mc::master::detail
