@0xd4c0a5e3b2f1a917;
# Bootstrap capability of every mc::rpc::server: one port serves several named
# services. Internal to lib/rpc.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("mc::rpc::schema");

interface Bootstrap {
  # Returns the capability registered under `name`; fails with
  # "mc:UNSUPPORTED: unknown service ..." when there is none.
  getService @0 (name :Text) -> (service :Capability);
}
