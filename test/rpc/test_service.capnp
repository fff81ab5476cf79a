@0xb7c1d2e3f4a5b6c7;
# Small service used by the rpc tests (in-process and the test server executable).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("mc::rpc::test");

interface TestService {
  echo @0 (data :Data) -> (data :Data);
  # Fails with the mc error named `name` (e.g. "OBJECT_NOT_FOUND").
  fail @1 (name :Text) -> ();
  # Never answers; counts a cancellation when the caller gives up.
  hang @2 () -> ();
  # Answers after `ms` milliseconds.
  sleep @3 (ms :UInt32) -> (done :Bool);
  # Throws a std::exception from the coroutine.
  throwStd @4 () -> ();
  # Completes once this serving thread saw at least `atLeast` cancelled hang() calls.
  waitCancelled @5 (atLeast :UInt64) -> (cancelled :UInt64);
  # Process-wide counters of hang(): started / cancelled.
  stats @6 () -> (started :UInt64, cancelled :UInt64);
}

interface OtherService {
  name @0 () -> (name :Text);
}
