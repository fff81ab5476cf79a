"""``mooncake.store`` as Mooncake's connectors import it, served by mooncake-p2p."""
from mooncake_p2p import (  # noqa: F401
    BufferHandle,
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    MooncakeDistributedStoreAsync,
    ObjectDataType,
    ReplicateConfig,
    SoftPinAction,
)

__all__ = [
    "BufferHandle",
    "MooncakeDistributedStore",
    "MooncakeHostMemAllocator",
    "MooncakeDistributedStoreAsync",
    "ObjectDataType",
    "ReplicateConfig",
    "SoftPinAction",
]
