@0xb03237009fa2c1b6;
# ClientRpcService: what one P2P client asks of another. Metadata only: the
# bytes move through the TransferEngine, described by RemoteBuffer.

struct RemoteBuffer {
  endpoint @0 :Text;     # host:port of the requester's TransferEngine
  address @1 :UInt64;
  length @2 :UInt64;
  token @3 :UInt64;
}

# `clientId`: the requester's id as registered with the master ("" for an
# unregistered requester such as the CLI). The owner transfers only to the
# transfer endpoint the master has for that id (the descriptor's endpoint must
# equal it, else ACCESS_DENIED), or, without an id, to this RPC connection's
# own peer IP with the descriptor's port: never to an arbitrary host:port.
struct ReadItem {
  key @0 :Text;
  dest @1 :RemoteBuffer;  # the requester's registered buffer, exactly the value's size
  clientId @2 :Text;
}

struct WriteItem {
  key @0 :Text;
  src @1 :RemoteBuffer;   # the requester's registered buffer holding the value
  clientId @2 :Text;
}

struct ItemResult {
  code @0 :Int32;         # 0 or an mc::errc value (an unknown value reads as RPC_FAIL)
  size @1 :UInt64;        # the value's size (reads: must equal dest.length, else the
                          # requester fails the read with RPC_FAIL; also on INVALID_PARAMS)
}

interface ClientService {
  # The spec's ReadRemoteData: the owner WRITEs the value into dest.
  readRemoteData @0 (item :ReadItem, timeoutMs :UInt32) -> (result :ItemResult);
  # The spec's WriteRemoteData: the owner READs src, stores and commits it.
  writeRemoteData @1 (item :WriteItem, timeoutMs :UInt32) -> (result :ItemResult);
  batchReadRemoteData @2 (items :List(ReadItem), timeoutMs :UInt32) -> (results :List(ItemResult));
  batchWriteRemoteData @3 (items :List(WriteItem), timeoutMs :UInt32) -> (results :List(ItemResult));
  # Local metadata of a key held here.
  query @4 (key :Text) -> (result :ItemResult);
  # Drop a key held here (the master already forgot it).
  remove @5 (key :Text) -> (result :ItemResult);
}
