@0x99ec9b6e4257a073;
# Attach service (standalone mode): what a process on the same host that runs
# no node of its own (mc::store::attached_client, Mooncake's setup_dummy) asks
# of a mooncake_client node. Served on a loopback-only listener (see
# mc/store/attach.hpp). Only descriptors travel here: value bytes move
# between the node and the attacher's registered memory through the
# TransferEngine (same-host process_vm_* when allowed, else TCP).
#
# Where bytes go: always to the attacher's TransferEngine at the IP of this
# RPC connection (loopback) and the port it announces; never to another host.

# A byte range in the attacher's memory, registered with its engine.
struct AttachBuffer {
  address @0 :UInt64;
  length @1 :UInt64;
  token @2 :UInt64;
}

# One key and where its value is (put: the value's bytes in order, piece
# after piece; get: room for the value, filled from the first piece).
struct AttachItem {
  key @0 :Text;
  pieces @1 :List(AttachBuffer);
}

struct AttachResult {
  code @0 :Int32;   # 0 or an mc::errc value (an unknown value reads as RPC_FAIL)
  size @1 :UInt64;  # get / sizeOf: the value's size; exists: 1 = present, 0 = absent
}

# The attacher's TransferEngine: its port on the connection's IP and its
# engine::instance_id() (0 = not checked).
struct AttachPeer {
  port @0 :UInt16;
  instance @1 :UInt64;
}

interface Attach {
  # Handshake: the node's limits, so the attacher splits its batches to fit.
  hello @0 (version :UInt32) -> (version :UInt32, nodeId :Text, maxKeys :UInt32, maxPieces :UInt32);
  # Stores each item's value (the node READs it from the attacher's memory
  # into its own tiers, commits and publishes it to the master).
  batchPut @1 (peer :AttachPeer, items :List(AttachItem), timeoutMs :UInt32) -> (results :List(AttachResult));
  # Reads each item's value (from the node's tiers, or from the owning peer
  # through node memory) and WRITEs it into the attacher's pieces.
  batchGet @2 (peer :AttachPeer, items :List(AttachItem), timeoutMs :UInt32) -> (results :List(AttachResult));
  batchExists @3 (keys :List(Text), timeoutMs :UInt32) -> (results :List(AttachResult));
  remove @4 (key :Text, timeoutMs :UInt32) -> (result :AttachResult);
  sizeOf @5 (key :Text, timeoutMs :UInt32) -> (result :AttachResult);
}
