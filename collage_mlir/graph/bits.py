"""Python ints as bitsets over post-dfs indices: fast union, intersection and subset tests."""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def iter_bits(bits: int) -> Iterator[int]:
    """The set indices, lowest first."""
    while bits:
        low = bits & -bits
        yield low.bit_length() - 1
        bits ^= low


def bits_of(indices: Iterable[int]) -> int:
    out = 0
    for i in indices:
        out |= 1 << i
    return out


def popcount(bits: int) -> int:
    return bits.bit_count()
