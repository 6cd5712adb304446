"""Each op's allocation and _C calls, written once for numpy and torch (see _backend)."""
