"""mooncake-p2p from Python: Mooncake's ``MooncakeDistributedStore`` API on a
P2P node embedded in this process (or attached to a ``mooncake_client`` on
this host with ``setup_dummy``).

    from mooncake_p2p import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    store.setup("127.0.0.1", "P2PHANDSHAKE", 512 << 20, 64 << 20, "tcp", "", "127.0.0.1:50051")
    store.put("k", b"v"); assert store.get("k") == b"v"
    store.close()

Every call returns Mooncake's codes (0 / bytes read / 1-0 for existence, or a
negative error code), releases the GIL while it waits, and may be used from
many threads. ``MooncakeDistributedStoreAsync`` adds ``async_<method>``
coroutines that complete through the running asyncio loop.
"""
from ._native import (  # noqa: F401
    BufferHandle,
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    ObjectDataType,
    ReplicateConfig,
    SoftPinAction,
    __revision__,
    __version__,
)
from ._async import MooncakeDistributedStoreAsync  # noqa: F401

__all__ = [
    "BufferHandle",
    "MooncakeDistributedStore",
    "MooncakeHostMemAllocator",
    "MooncakeDistributedStoreAsync",
    "ObjectDataType",
    "ReplicateConfig",
    "SoftPinAction",
    "__version__",
]
