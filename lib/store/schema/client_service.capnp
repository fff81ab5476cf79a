@0xb03237009fa2c1b6;
# ClientRpcService: what one P2P client asks of another. Bulk bytes move
# through the TransferEngine, described by RemoteBuffer; values up to the
# inline threshold (default 64 KiB) travel inside the RPC itself (ReadItem
# inlineMax / ItemResult data, WriteItem data): one round trip, no
# registration, no transfer connection.

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
#
# Where a value's bytes are: `dest`/`src` (one buffer), or `pieces` (scatter /
# gather: the value's bytes in order, piece after piece; every piece names the
# same endpoint; then `dest`/`src` is unset), or inline (below). The
# descriptors' total length must equal the value's size.
struct ReadItem {
  key @0 :Text;
  dest @1 :RemoteBuffer;  # the requester's registered buffer, exactly the value's size
  clientId @2 :Text;
  pieces @3 :List(RemoteBuffer);
  # > 0: the requester accepts the value inside the reply (ItemResult.data)
  # when its size is at most this (and within the owner's inline limit and
  # the reply's budget); then no transfer happens. Without a descriptor and
  # a larger value the item fails with INVALID_PARAMS and the value's size.
  inlineMax @4 :UInt64;
}

struct WriteItem {
  key @0 :Text;
  src @1 :RemoteBuffer;   # the requester's registered buffer holding the value
  clientId @2 :Text;
  pieces @3 :List(RemoteBuffer);
  data @4 :Data;          # non-empty: the value itself (src and pieces unset)
  # The value's replication (mc::master::replication::tag(); 0 = a single
  # copy): stored with it and published with it, so that copies of one
  # replicated put join at the master instead of superseding each other.
  replication @5 :UInt64;
  # The put's version: taken from the hybrid clock (CLOCK_REALTIME ns, kept
  # increasing) of the node that started the put, when it started. The owner
  # commits the value under it and publishes it with it; the master orders a
  # key's puts by it across holders, so a write that arrives after its put
  # gave up, or after a newer put, is refused (SUPERSEDED) instead of
  # replacing the newer value. 0: the owner issues one at the commit. More
  # than 60 s ahead of the owner's clock: INVALID_PARAMS.
  version @6 :UInt64;
}

struct ItemResult {
  code @0 :Int32;         # 0 or an mc::errc value (an unknown value reads as RPC_FAIL)
  size @1 :UInt64;        # the value's size (reads: must equal the descriptors' total, else
                          # the requester fails the read with RPC_FAIL; also on INVALID_PARAMS)
  data @2 :Data;          # reads with inlineMax: the value (exactly `size` bytes)
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
