"""Native asyncio for MooncakeDistributedStore.

``MooncakeDistributedStoreAsync().async_<method>(...)`` takes the arguments of
``<method>`` and returns its result. The operation runs on the node's own
threads; its completion wakes the event loop through an eventfd the loop
watches (``loop.add_reader``): no thread pool, no thread per call. Cancelling
the awaiting task cancels the operation; buffers the call was given stay
referenced until the node has let go of them.

Methods without a native form (setup, close, ...) run in the loop's default
executor, like Mooncake's own ``MooncakeDistributedStoreAsync``.
"""
import asyncio
import functools
import itertools
import weakref

from ._native import MooncakeDistributedStore, _CompletionQueue

#: Methods with a native asynchronous form (``_async_<name>`` in the extension).
NATIVE_ASYNC = (
    "put", "upsert", "put_parts", "upsert_parts", "put_batch", "upsert_batch",
    "put_from", "upsert_from", "batch_put_from", "batch_upsert_from",
    "batch_put_from_multi_buffers", "batch_upsert_from_multi_buffers",
    "get", "get_batch", "get_buffer", "batch_get_buffer", "get_into", "batch_get_into",
    "batch_get_into_multi_buffers", "is_exist", "batch_is_exist", "get_size",
    "remove", "batch_remove", "remove_by_regex", "remove_all", "remove_local", "remove_all_local",
)


class _LoopBridge:
    """Completions of one event loop's calls."""

    def __init__(self, loop):
        self.loop = loop
        self.queue = _CompletionQueue()
        self.pending = {}  # id -> (future, operation)
        loop.add_reader(self.queue.fileno(), self._drain)

    def _drain(self):
        for op_id, result in self.queue.drain():
            fut, _op = self.pending.pop(op_id, (None, None))
            if fut is not None and not fut.done():
                fut.set_result(result)


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    def __init__(self):
        super().__init__()
        self._bridges = weakref.WeakKeyDictionary()
        self._ids = itertools.count(1)

    def _bridge(self):
        loop = asyncio.get_running_loop()
        bridge = self._bridges.get(loop)
        if bridge is None:
            bridge = _LoopBridge(loop)
            self._bridges[loop] = bridge
        return bridge

    async def _native_call(self, name, *args, **kwargs):
        bridge = self._bridge()
        op_id = next(self._ids)
        fut = bridge.loop.create_future()
        started, op = getattr(self, "_async_" + name)(bridge.queue, op_id, *args, **kwargs)
        if not started:
            return op  # rejected or not set up: the error code, as the sync call returns it
        bridge.pending[op_id] = (fut, op)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            op.cancel()
            raise

    def __getattr__(self, name):
        if not name.startswith("async_"):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        sync = getattr(self, name[len("async_"):])

        @functools.wraps(sync)
        async def in_executor(*args, **kwargs):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, functools.partial(sync, *args, **kwargs))

        return in_executor


def _native_method(name):
    async def method(self, *args, **kwargs):
        return await self._native_call(name, *args, **kwargs)

    method.__name__ = method.__qualname__ = "async_" + name
    method.__doc__ = f"Awaitable form of ``{name}`` (same arguments and result)."
    return method


for _name in NATIVE_ASYNC:
    setattr(MooncakeDistributedStoreAsync, "async_" + _name, _native_method(_name))
del _name
