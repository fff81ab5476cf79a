#pragma once
/// ClientRpcService: serves the spec's ReadRemoteData / WriteRemoteData (and
/// batch forms, query, remove) to peers, forwarding to the DataManager.
/// KJ-free: registration on an rpc::server happens in the .cpp.
#include <string>

namespace mc::rpc {
class server;
}

namespace mc::store {

class data_manager;

/// Name of the service on the client's RPC port.
inline constexpr const char* client_service_name = "client";

/// Longest per-request timeout a peer may ask for (longer requests are cut).
inline constexpr unsigned max_request_timeout_ms = 60'000;
/// Most items in one batch RPC.
inline constexpr unsigned max_batch_items = 4096;

/// Adds the ClientRpcService to `server` (before server.start()). `dm` must
/// outlive the server.
void add_client_service(mc::rpc::server& server, data_manager& dm);

}  // namespace mc::store
