@0xe3a4b5c6d7e8f901;
# Schema of the rpc benchmark (the same for every implementation compared).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("mc::rpc::bench");

interface Bench {
  ping @0 (data :Data) -> (data :Data);
}
