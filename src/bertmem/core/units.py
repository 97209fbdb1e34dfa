"""Byte units, defined once for the whole package (chapters 1, 5, 8)."""

MIB = 2**20
GIB = 2**30
