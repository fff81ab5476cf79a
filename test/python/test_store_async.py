"""MooncakeDistributedStoreAsync: awaitables completed by the node's threads
through the running loop (no executor thread per call), cancellation."""
import asyncio
import ctypes
import os
import random
import signal
import threading

from conftest import sigstop
from test_store_processes import start_peer


def new_async(master, rpc_timeout="3s"):
    from mooncake.store import MooncakeDistributedStoreAsync

    s = MooncakeDistributedStoreAsync()
    assert s.setup({"local_hostname": "127.0.0.1", "master_server_addr": master, "global_segment_size": "64MB",
                    "heartbeat_interval": "200ms", "rpc_timeout": rpc_timeout}) == 0
    return s


def test_async_calls(master):
    s = new_async(master)

    async def main():
        threads_before = threading.active_count()
        rng = random.Random(5)
        vals = {f"a{i}": rng.randbytes(rng.randint(1, 1 << 20)) for i in range(16)}
        # Many calls at once, completed in any order.
        rcs = await asyncio.gather(*(s.async_put(k, v) for k, v in vals.items()))
        assert rcs == [0] * len(vals)
        got = await asyncio.gather(*(s.async_get(k) for k in vals))
        assert got == list(vals.values())
        assert await s.async_batch_is_exist(list(vals) + ["nope"]) == [1] * len(vals) + [0]
        assert await s.async_is_exist("nope") == 0
        buf = (ctypes.c_char * (1 << 20))()
        n = await s.async_get_into("a0", ctypes.addressof(buf), 1 << 20)
        assert n == len(vals["a0"]) and buf.raw[:n] == vals["a0"]
        keys = list(vals)[:4]
        bufs = [(ctypes.c_char * len(vals[k]))() for k in keys]
        res = await s.async_batch_get_into(keys, [ctypes.addressof(b) for b in bufs], [len(vals[k]) for k in keys])
        assert res == [len(vals[k]) for k in keys]
        assert [b.raw for b in bufs] == [vals[k] for k in keys]
        assert await s.async_put_parts("ap", b"12", b"34") == 0
        assert await s.async_get("ap") == b"1234"
        assert await s.async_get_size("ap") == 4
        assert await s.async_remove("ap") == 0
        # No thread pool appeared for these calls.
        assert threading.active_count() == threads_before
        # Methods without a native form still work (in the executor).
        assert await s.async_get_hostname() == "127.0.0.1"

    asyncio.run(main())
    s.close()


def test_async_cancel_releases_the_call(procs, master):
    peer, _ = start_peer(procs, master, "ac", 1, 50_000)
    # A deadline far beyond the test: only the cancellation can end the call.
    s = new_async(master, rpc_timeout="300s")
    assert s.get_size("ac0") == 50_000
    sigstop(peer.pid)
    try:
        async def main():
            buf = (ctypes.c_char * 50_000)()
            task = asyncio.create_task(s.async_get_into("ac0", ctypes.addressof(buf), 50_000))
            await asyncio.sleep(0.3)
            task.cancel()
            try:
                await task
                raise AssertionError("not cancelled")
            except asyncio.CancelledError:
                pass
            # The node's operation ends too (it answers CANCELLED long before
            # its 300 s deadline) and the bridge lets go of the buffer.
            bridge = s._bridges[asyncio.get_running_loop()]
            for _ in range(3000):
                if not bridge.pending:
                    break
                await asyncio.sleep(0.01)
            assert not bridge.pending, "the cancelled operation did not end"
            # The store keeps working after the cancellation.
            assert await s.async_put("after-cancel", b"ok") == 0
            assert await s.async_get("after-cancel") == b"ok"

        asyncio.run(main())
    finally:
        os.kill(peer.pid, signal.SIGCONT)
    s.close()


def test_async_after_close_and_bad_arguments(master):
    s = new_async(master)
    s.close()

    async def main():
        assert await s.async_put("k", b"v") == -600
        assert await s.async_batch_get_into(["a"], [], []) == [-600]

    asyncio.run(main())
