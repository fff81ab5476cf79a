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
  httpEndpoint @6 :Text;        # host:port of its HTTP server (/metrics, /health); "" = none
  ownMembership @7 :Bool;       # HA: it keeps its own record in etcd under its own lease
}

struct Replica {
  clientId @0 :Text;
  rpcEndpoint @1 :Text;
  transferEndpoint @2 :Text;
}

# A publish: the caller holds `key` (size bytes) at `version` (a hybrid-clock
# version taken when the put started; the master orders a key's publishes by
# it across holders and refuses an older one with SUPERSEDED).
struct KeySize {
  key @0 :Text;
  size @1 :UInt64;
  version @2 :UInt64;
  # The copy's replication (mc::master::replication::tag(): group << 8 |
  # copies; 0 = a single-copy put). Copies of one group join, not supersede.
  replication @3 :UInt64;
}

# Copy `key` (held at `version` with `replication`) to `target` through the
# remote write path: the master repairs a replicated key that lost a copy.
struct RepairTask {
  key @0 :Text;
  version @1 :UInt64;
  replication @2 :UInt64;
  target @3 :Replica;
}

struct KeyVersion {
  key @0 :Text;
  version @1 :UInt64;
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
  # term: the HA leader's term (etcd revision of its election; 0 without
  # HA). A client ignores a reply whose term is older than one it has seen.
  # publishPort: the TCP port of this master's publish calls
  # (mc/master/publish_call.hpp) on the host the client dialled; 0 = none.
  registerClient @0 (info :ClientInfo) -> (status :Status, term :UInt64, publishPort :UInt16);
  # The reply carries drop notices for copies superseded by a newer publish
  # elsewhere (at most 1024 per reply) and `resync` when they overflowed.
  # `repairs`: copies to make (at most 64 per reply).
  # Acknowledged delivery: a reply with noticeId != 0 carries drops/resync
  # the master sends again in every reply until a heartbeat acknowledges them
  # (ackEpoch/ackId = that reply's noticeEpoch/noticeId, sent once the client
  # applied them); 0/0 acknowledges nothing.
  heartbeat @1 (clientId :Text, used :UInt64, capacity :UInt64, ackEpoch :UInt64, ackId :UInt64)
      -> (status :Status, drops :List(KeyVersion), resync :Bool, term :UInt64, repairs :List(RepairTask),
          noticeEpoch :UInt64, noticeId :UInt64);
  unregisterClient @2 (clientId :Text) -> (status :Status);
  # republish: re-announcing held copies (supersedes a live holder only when
  # newer; SUPERSEDED otherwise);
  # epoch: tags the entries for finishRepublish.
  addReplicas @3 (clientId :Text, items :List(KeySize), republish :Bool, epoch :UInt64)
      -> (results :List(Status));
  # Removes each (key, caller) entry unless the master's entry is newer.
  removeReplicas @4 (clientId :Text, items :List(KeyVersion)) -> (results :List(Status));
  getReplicaList @5 (keys :List(Text)) -> (results :List(KeyReplicas));
  writeRoute @6 (size :UInt64, exclude :Text) -> (status :Status, replica :Replica);
  removeKey @7 (key :Text) -> (status :Status, replicas :List(Replica));
  listClients @8 () -> (clients :List(ClientState));
  # Ends a full re-publish: removes the caller's entries published with an
  # older epoch (what it no longer holds).
  finishRepublish @9 (clientId :Text, epoch :UInt64) -> (status :Status, removed :UInt64);
  # One client's registration (its endpoints): owners use it to check where a
  # requester's transfer may go. CLIENT_NOT_FOUND when unknown.
  getClient @10 (clientId :Text) -> (status :Status, info :ClientInfo);
  # Removes up to `limit` keys (every key when `all`, else those an ECMAScript
  # regular expression `pattern` matches anywhere in the key), scanning the
  # key table's shards from `fromShard` on, a bounded amount per call, and
  # returns them with their holders (the caller tells the holders). `more`:
  # call again with fromShard = nextShard. INVALID_PARAMS for a bad or too
  # complex pattern.
  removeMatching @11 (pattern :Text, all :Bool, limit :UInt32, fromShard :UInt32)
      -> (status :Status, removed :List(RemovedKey), more :Bool, nextShard :UInt32);
  # Up to `count` (1..16) distinct healthy clients with room for `size`
  # bytes, most free first, none named in `exclude` (at most 64 ids); fewer
  # when fewer qualify, NO_AVAILABLE_HANDLE when none does.
  writeRoutes @12 (size :UInt64, count :UInt32, exclude :List(Text)) -> (status :Status, replicas :List(Replica));
}

struct RemovedKey {
  key @0 :Text;
  replicas @1 :List(Replica);
}
