"""The output digest: two 32-bit sums of an array's mixed words, computed on the array's own device.

A check that meets bytes it has judged before reuses the verdict (harness/workers/handlers.py). On a GPU
the host copy of the outputs was most of a check: a 256 MiB collective's checks (two variants, a first and
a last check each) took seconds a framework and operation, against a fraction of a second of timed
calls (docs/design/untimed_costs.md). A digest brings back two small integers instead. Every backend
computes the same function (numpy's below is the definition the tests hold them to), so equal bytes give
equal keys across frameworks and processes.

The words of an array are its bytes in logical (C) order: 4-byte units where the item size is a multiple
of 4, else each 2-byte or 1-byte item widened to one word. Lane m is
sum_i fmix32(word_i XOR ((i + 1) * M_m)) mod 2^32, with MurmurHash3's finalizer fmix32: a bijection
whose every output bit depends on every input bit. So a change of one word always changes both lanes, and
any other change goes unseen with a chance of about 2^-64. (A plain weighted sum would not do: two flipped
sign bits anywhere cancel in it.) Not cryptographic: an output is no adversary.
"""
from __future__ import annotations

import hashlib
import json
from typing import Sequence

import numpy as np

MULTIPLIERS = (0x9E3779B1, 0x85EBCA77)  # odd: Knuth's golden-ratio constant and murmur3's c2
FMIX = (0x85EBCA6B, 0xC2B2AE35)  # fmix32's multipliers
MASK = 0xFFFFFFFF
MIN_BYTES = 1 << 20  # below this the host copy and comparison cost less than a digest's kernels and read-back
CHUNK = 1 << 24  # words a step where a backend holds its temporaries in memory (torch, CuPy)


def words(a: np.ndarray) -> np.ndarray:
    """a's words (uint32, C order), as defined above; ValueError for an item size of 3, 5, 6 or 7 bytes."""
    flat = np.ascontiguousarray(a).reshape(-1)
    size = flat.dtype.itemsize
    if size % 4 == 0:
        return flat.view(np.uint32)
    if size in (1, 2):
        return flat.view(np.uint8 if size == 1 else np.uint16).astype(np.uint32)
    raise ValueError(f"no words for an item of {size} bytes")


def fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer of uint32 words; only operators and numpy uint32 scalars, so that
    CuPy's and JAX's arrays take it too (their uint32 products wrap mod 2^32, as numpy's do)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(FMIX[0])
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(FMIX[1])
    return h ^ (h >> np.uint32(16))


def lanes(w: np.ndarray, start: int = 0) -> tuple[int, ...]:
    """The lanes of uint32 words w whose first word has index start."""
    i1 = np.arange(start + 1, start + 1 + w.size, dtype=np.uint64)
    return tuple(int(np.sum(fmix32(w ^ ((i1 * np.uint64(m)) & np.uint64(MASK)).astype(np.uint32)), dtype=np.uint64))
                 & MASK for m in MULTIPLIERS)


def numpy_digest(arrays: dict[str, np.ndarray]) -> str:
    """The key of numpy arrays, as a backend's digest makes it of the same arrays on its device."""
    return key([(k, str(a.dtype), tuple(a.shape), lanes(words(a))) for k, a in sorted(arrays.items())])


def key(parts: Sequence[tuple[str, str, tuple[int, ...], tuple[int, ...]]]) -> str:
    """One key of outputs' (name, dtype name, shape, lanes), as a point cache's file name takes it."""
    return "dev-" + hashlib.sha256(json.dumps([[n, d, list(s), list(h)] for n, d, s, h in parts]).encode()).hexdigest()
