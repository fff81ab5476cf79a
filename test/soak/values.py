"""Values of the chaos soak: every value names its key and version and is
deterministic from (key, version, size), so any reader can tell a whole,
right value from a torn, foreign or garbage one.

Layout of a value of n >= header bytes:
    b"MCSK" | u16 key length | key (utf-8) | u64 version | u64 n | payload
where payload = Random(blake2b(key, version, n)).randbytes(rest).
A value shorter than its header ("tiny", 1 .. header-1 bytes) is the first n
bytes of blake2b(key, version, n) expanded the same way: it names neither key
nor version, so a reader identifies it by trying the versions it may be.
"""
import hashlib
import random
import struct

MAGIC = b"MCSK"


def header_len(key: str) -> int:
    return 4 + 2 + len(key.encode()) + 8 + 8


def _seed(key: str, version: int, n: int) -> bytes:
    return hashlib.blake2b(f"{key}\0{version}\0{n}".encode(), digest_size=32).digest()


def make_value(key: str, version: int, n: int) -> bytes:
    """The value of (key, version) with n bytes (n >= 1)."""
    kb = key.encode()
    h = header_len(key)
    if n < h:
        return random.Random(_seed(key, version, n)).randbytes(n)
    hdr = MAGIC + struct.pack("<H", len(kb)) + kb + struct.pack("<QQ", version, n)
    return hdr + random.Random(_seed(key, version, n)).randbytes(n - h)


def decode(key: str, data) -> tuple:
    """Checks bytes read for `key`. Returns ("ok", version), ("tiny", None)
    (a value shorter than a header: the caller matches versions with
    match_tiny) or ("bad", reason): torn, another key's, wrong size or garbage."""
    n = len(data)
    h = header_len(key)
    if n < h:
        return ("tiny", None)
    mv = memoryview(data)
    if bytes(mv[:4]) != MAGIC:
        return ("bad", f"no magic ({n} bytes, starts {bytes(mv[:8]).hex()})")
    (kl,) = struct.unpack_from("<H", mv, 4)
    got_key = bytes(mv[6:6 + kl])
    if got_key != key.encode():
        return ("bad", f"value of another key {got_key[:80]!r}")
    version, size = struct.unpack_from("<QQ", mv, 6 + kl)
    if size != n:
        return ("bad", f"version {version}: header says {size} bytes, read {n}")
    if bytes(mv[h:]) != random.Random(_seed(key, version, n)).randbytes(n - h):
        return ("bad", f"version {version}: payload differs from the value written (torn or garbage)")
    return ("ok", version)


def match_tiny(key: str, data, versions) -> list:
    """The versions among `versions` whose tiny value equals `data`."""
    n = len(data)
    b = bytes(data)
    return [v for v in versions if random.Random(_seed(key, v, n)).randbytes(n) == b]
