@0xc6b235b58eb0c15d;
# The P2P master's RPC interface: client registry and key -> replica map.
# Every result carries a Status; code 0 is success, otherwise an mc::errc
# value (Mooncake's numbering: -704 OBJECT_NOT_FOUND, ...).

struct Status {
  code @0 :Int32;
  message @1 :Text;
}

struct ClientInfo {
  clientId @0 :Text;
  rpcEndpoint @1 :Text;
  transferEndpoint @2 :Text;
  capacity @3 :UInt64;
  used @4 :UInt64;
  transferInstance @5 :UInt64;  # the TransferEngine's instance id (0 = unknown)
}

struct Replica {
  clientId @0 :Text;
  rpcEndpoint @1 :Text;
  transferEndpoint @2 :Text;
}

struct KeySize {
  key @0 :Text;
  size @1 :UInt64;
}

struct KeyReplicas {
  status @0 :Status;
  size @1 :UInt64;
  replicas @2 :List(Replica);
}

struct ClientState {
  info @0 :ClientInfo;
  health @1 :Text;
  sinceHeartbeatMs @2 :UInt64;
  keys @3 :UInt64;
}

interface Master {
  registerClient @0 (info :ClientInfo) -> (status :Status);
  heartbeat @1 (clientId :Text, used :UInt64, capacity :UInt64) -> (status :Status);
  unregisterClient @2 (clientId :Text) -> (status :Status);
  addReplicas @3 (clientId :Text, items :List(KeySize)) -> (results :List(Status));
  removeReplicas @4 (clientId :Text, keys :List(Text)) -> (results :List(Status));
  getReplicaList @5 (keys :List(Text)) -> (results :List(KeyReplicas));
  writeRoute @6 (size :UInt64, exclude :Text) -> (status :Status, replica :Replica);
  removeKey @7 (key :Text) -> (status :Status, replicas :List(Replica));
  listClients @8 () -> (clients :List(ClientState));
  # One client's registration (its endpoints): owners use it to check where a
  # requester's transfer may go. CLIENT_NOT_FOUND when unknown.
  getClient @9 (clientId :Text) -> (status :Status, info :ClientInfo);
}
