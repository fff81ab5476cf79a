"""Compatibility package: connector code written for Mooncake
(``from mooncake.store import MooncakeDistributedStore``) runs on mooncake-p2p
unchanged. Installed only with ``-Dpython_mooncake_shim=true``."""
