"""The connector replays under examples/python run unchanged against a master."""
import os
import subprocess
import sys

import pytest

EXAMPLES = os.environ.get("MC_EXAMPLES", os.path.join(os.path.dirname(__file__), "../../examples/python"))


@pytest.mark.parametrize("script", ["sglang_hicache.py", "vllm_store_connector.py", "lmcache_backend.py"])
def test_connector_replay(master, script):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), master], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "checksums match" in out.stdout
