from mooncake_p2p import (
    BufferHandle as BufferHandle,
    MooncakeDistributedStore as MooncakeDistributedStore,
    MooncakeDistributedStoreAsync as MooncakeDistributedStoreAsync,
    MooncakeHostMemAllocator as MooncakeHostMemAllocator,
    ObjectDataType as ObjectDataType,
    ReplicateConfig as ReplicateConfig,
    SoftPinAction as SoftPinAction,
)
