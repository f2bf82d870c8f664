"""FNV-1a, 64 bits: a key's hash, whose value mod sections is its section
in a sequence generator (the node's seq.Hash)."""

_OFFSET = 0xCBF29CE484222325
_PRIME = 0x100000001B3
_MASK = 0xFFFFFFFFFFFFFFFF


def fnv1a64(data):
    """The 64-bit FNV-1a hash of data (bytes, or str as UTF-8)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    h = _OFFSET
    for b in data:
        h = ((h ^ b) * _PRIME) & _MASK
    return h
