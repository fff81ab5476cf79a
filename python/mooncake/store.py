"""``mooncake.store`` as Mooncake's connectors import it, served by mooncake-p2p."""
from mooncake_p2p import *  # noqa: F401,F403
from mooncake_p2p import __all__  # noqa: F401
