"""The device digest (harness/backends/digest.py): every backend computes numpy's definition, so equal
bytes give equal keys across frameworks; one changed bit anywhere changes the key; what a backend cannot
digest comes back None (the check then copies and compares). On this CPU torch and JAX run the tests;
on a GPU (`make test-gpu`, the last test) CuPy and the device paths of all three."""
from __future__ import annotations

import numpy as np
import pytest

from harness.backends import digest
from tests.conftest import backend_or_skip

RNG = np.random.default_rng(20261205)


@pytest.fixture(autouse=True)
def digest_on_cpu(monkeypatch):
    """The device digest's path on this CPU machine, where a run leaves it off (base.DIGEST_ON_CPU)."""
    from harness.backends import base

    monkeypatch.setattr(base, "DIGEST_ON_CPU", True)
BIG = digest.MIN_BYTES  # the least a digest is taken of


def _arrays() -> dict[str, np.ndarray]:
    n = BIG  # bytes: every array is at least MIN_BYTES
    return {
        "float32 2-d": RNG.standard_normal((n // 4 // 512, 512)).astype(np.float32),
        "float16": RNG.standard_normal(n // 2).astype(np.float16),
        "int8": RNG.integers(-128, 128, n, dtype=np.int8),
        "bool": RNG.random(n) < 0.5,
        "int32": RNG.integers(-2**31, 2**31, n // 4, dtype=np.int32),
        "odd length": RNG.standard_normal(n // 4 + 3).astype(np.float32),
    }


def _fmix32(h: int) -> int:  # MurmurHash3's finalizer on Python ints
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def test_the_definition_on_two_words_by_hand():
    """Lane m of words [1, 2] is fmix32(1 ^ M_m) + fmix32(2 ^ 2 M_m) mod 2^32, fmix32 being MurmurHash3's
    (whose value at 1 is 0x514E28B7)."""
    assert _fmix32(1) == 0x514E28B7 == int(digest.fmix32(np.array([1], np.uint32))[0])
    want = tuple((_fmix32(1 ^ m) + _fmix32(2 ^ ((2 * m) & 0xFFFFFFFF))) & 0xFFFFFFFF for m in digest.MULTIPLIERS)
    assert digest.lanes(np.array([1, 2], np.uint32)) == want
    assert digest.lanes(np.array([2], np.uint32), start=1) == tuple(_fmix32(2 ^ ((2 * m) & 0xFFFFFFFF))
                                                                   for m in digest.MULTIPLIERS)


def test_two_flipped_sign_bits_do_not_cancel():
    """The weakness of a plain weighted sum mod 2^32: 2^31 times any odd weight is 2^31, so two sign flips
    cancel wherever they are. The mixed words do not."""
    w = RNG.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32)
    v = w.copy()
    v[[3, 700]] ^= np.uint32(1 << 31)
    assert all(a != b for a, b in zip(digest.lanes(w), digest.lanes(v)))


@pytest.mark.parametrize("framework", ["torch", "jax", "cupy"])
@pytest.mark.parametrize("kind", list(_arrays()))
def test_a_backend_computes_the_definition(framework, kind):
    b = backend_or_skip(framework)
    a = _arrays()[kind]
    assert b.digest(b.to_device(a)) == digest.numpy_digest({"": a})
    assert b.digest({"y": b.to_device(a), "z": b.to_device(a[:1])}) == digest.numpy_digest({"y": a, "z": a[:1]})


@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_wider_items_and_other_layouts_are_words_in_logical_order(framework):
    """float64 and complex64 as 4-byte words, a transposed view in C order (as to_numpy reads it)."""
    b = backend_or_skip(framework)
    for a in (RNG.standard_normal(BIG // 8), (RNG.standard_normal(BIG // 8) + 1j).astype(np.complex64)):
        assert b.digest(b.to_device(a)) == digest.numpy_digest({"": a})
    a = RNG.standard_normal((512, BIG // 4 // 512)).astype(np.float32)
    assert b.digest(b.to_device(a).T) == digest.numpy_digest({"": a.T})


@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_outputs_longer_than_a_chunk_sum_their_chunks(monkeypatch, framework):
    """torch and CuPy build the weights a chunk at a time: each chunk's weights go on from the last's."""
    b = backend_or_skip(framework)
    monkeypatch.setattr(digest, "CHUNK", 1000)
    a = _arrays()["odd length"]
    assert b.digest(b.to_device(a)) == digest.numpy_digest({"": a})


@pytest.mark.parametrize("framework", ["torch", "jax", "cupy"])
def test_one_flipped_bit_anywhere_changes_the_key(framework):
    b = backend_or_skip(framework)
    a = _arrays()["float32 2-d"]
    keys = {b.digest(b.to_device(a))}
    for i in (0, a.size // 2, a.size - 1):
        for bit in (0, 31):
            v = a.copy()
            v.reshape(-1).view(np.uint32)[i] ^= np.uint32(1 << bit)
            keys.add(b.digest(b.to_device(v)))
    assert len(keys) == 7 and None not in keys


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_what_a_backend_cannot_digest_comes_back_none(framework):
    """Small outputs (a host comparison costs less), host arrays, non-arrays; JAX's complex64."""
    b = backend_or_skip(framework)
    small = RNG.standard_normal(BIG // 8).astype(np.float32)
    assert b.digest(b.to_device(small)) is None
    assert b.digest(_arrays()["int32"]) is None  # numpy, not the framework's
    assert b.digest({"a": b.to_device(_arrays()["int32"]), "n": 3}) is None
    assert b.digest({}) is None
    if framework == "jax":
        assert b.digest(b.to_device(RNG.standard_normal(BIG // 8).astype(np.complex64))) is None


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_host_memory_is_left_to_the_host_path(monkeypatch, framework):
    """A device-to-host copy's output is read in place by the host path; a digest would run on the host's
    cores. On a machine without a GPU every output is the host's: a run takes no digest there (torch's
    emulated uint32 arithmetic took about 60 s a GiB on a 2-core CPU), and the point cache keys by sha256."""
    from harness.backends import base

    b = backend_or_skip(framework)
    host = b.to_device(_arrays()["int32"])
    assert b.digest(host) is not None  # DIGEST_ON_CPU, as this file sets it
    monkeypatch.setattr(base, "DIGEST_ON_CPU", False)
    assert not b.on_gpu and b.digest(host) is None
    if framework == "torch":
        monkeypatch.setattr(b, "on_gpu", True)
        assert host.device.type == "cpu" and b.digest(host) is None


def test_a_digest_that_fails_is_none_not_an_error(monkeypatch):
    """A digest is a shortcut: one that raises (out of memory on the device) leaves the check to the host."""
    b = backend_or_skip("torch")

    def oom(_x):
        raise MemoryError("out of memory")

    monkeypatch.setattr(b, "_array_lanes", oom)
    assert b.digest(b.to_device(_arrays()["int32"])) is None


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["torch", "cupy", "jax"])
def test_on_the_gpu_every_backend_computes_the_definition(monkeypatch, framework):
    """On the device: every kind of array, in several chunks (torch, CuPy), and one flipped bit seen."""
    from tests.conftest import gpu_backend_or_skip

    b = gpu_backend_or_skip(framework)
    monkeypatch.setattr(digest, "CHUNK", 1 << 18)
    for kind, a in _arrays().items():
        assert b.digest(b.to_device(a)) == digest.numpy_digest({"": a}), kind
    a = RNG.standard_normal((1 << 24) + 5).astype(np.float32)  # 64 MiB and a tail
    v = a.copy()
    v.view(np.uint32)[-1] ^= np.uint32(1)
    assert b.digest(b.to_device(a)) == digest.numpy_digest({"": a}) != b.digest(b.to_device(v))
    if framework != "jax":  # what JAX without x64 has no arrays of, and views it does not keep
        test_wider_items_and_other_layouts_are_words_in_logical_order(framework)
    test_one_flipped_bit_anywhere_changes_the_key(framework)
    if framework in ("torch", "jax"):  # host memory on a GPU machine: the host path's
        x = b.to_device(_arrays()["int32"])
        if framework == "torch":
            host = x.cpu()
        else:
            from jax.sharding import SingleDeviceSharding

            host = b.fw.device_put(x, SingleDeviceSharding(b.device, memory_kind="pinned_host"))
        assert b.on_gpu and b.digest(x) is not None and b.digest(host) is None


def test_a_backend_without_a_device_digest_takes_none(monkeypatch):
    """The base class's lanes are the definition on a host copy; a backend that has only those takes no
    digest, since the host copy is what a digest is for sparing."""
    from harness.backends.base import Backend

    b = backend_or_skip("torch")
    a = _arrays()["int32"]
    assert Backend._array_lanes(b, b.to_device(a)) == digest.lanes(digest.words(a))
    assert b.digest(b.to_device(a)) is not None
    monkeypatch.setattr(b, "device_digest", False)
    assert b.digest(b.to_device(a)) is None
