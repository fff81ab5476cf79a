#pragma once
// ClientInfo <-> mc::master::client_info, shared by the master's service and
// its typed client (one place to extend when the struct grows).
#include "master.capnp.h"
#include "mc/master/metadata.hpp"

namespace mc::master::detail {

inline client_info read_info(ClientInfo::Reader r) {
  return {r.getClientId(), r.getRpcEndpoint(),      r.getTransferEndpoint(), r.getCapacity(),
          r.getUsed(),     r.getTransferInstance(), r.getHttpEndpoint()};
}

inline void set_info(ClientInfo::Builder b, const client_info& i) {
  b.setClientId(i.client_id);
  b.setRpcEndpoint(i.rpc_endpoint);
  b.setTransferEndpoint(i.transfer_endpoint);
  b.setCapacity(i.capacity);
  b.setUsed(i.used);
  b.setTransferInstance(i.transfer_instance);
  b.setHttpEndpoint(i.http_endpoint);
}

}  // namespace mc::master::detail
