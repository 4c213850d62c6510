"""gpu_links: a copy between two devices, direct or through the host. It needs two devices: skipped
with that reason elsewhere; JAX's logic runs on two CPU devices forced with XLA_FLAGS."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.workers.execute import load_impl, run_variants, skip_reason
from scenarios import get
from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
from harness import backends
from harness.check.equivalence import compare_outputs
from harness.workers.execute import run_variants
from scenarios import get
scn, b = get("gpu_links"), backends.get("jax").load()
for count in (1, 7, 4096):
    p = {"count": count, "dtype": "float32", "seed": count}
    out = run_variants(scn, b, p)
    assert set(out) == {"via_host", "peer"}, out
    ref = scn.reference(scn.make_inputs(p), p)
    for v, got in out.items():
        assert compare_outputs(scn, p, got, ref) is None, (v, count)
print("ok")
"""


def test_jax_copies_between_two_forced_cpu_devices():
    backend_or_skip("jax")
    env = os.environ | {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    p = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_one_device_is_skipped_with_the_reason(fw):
    b = backend_or_skip(fw)
    scn = get("gpu_links")
    impl = load_impl("gpu_links", fw)
    if impl.cannot_run(b.device) is None:
        pytest.skip(f"{fw} sees two devices here")
    assert all("needs two" in skip_reason(scn, v, b, impl) for v in scn.variants)
    assert run_variants(scn, b, {"count": 8, "dtype": "float32", "seed": 1}) == {}


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy", "jax"])
def test_two_gpus_copy_exactly(fw):
    b = backend_or_skip(fw)
    impl = load_impl("gpu_links", fw)
    why = impl.cannot_run(b.device)
    if why or not b.on_gpu:
        pytest.skip(why or f"{fw} runs on the CPU here")
    scn = get("gpu_links")
    p = {"count": 1 << 20, "dtype": "float32", "seed": 2}
    ref = scn.reference(scn.make_inputs(p), p)
    for v, got in run_variants(scn, b, p).items():
        assert (got["copy"] == ref["copy"]).all(), v


class _FakeCupy:
    """Enough of cupy for impls/gpu_links/cupy_impl.py's run_ functions: every stream operation is logged
    as (device, what, event), so a test can replay what a synchronize of device 0 waits for."""

    def __init__(self):
        import types

        self.log: list[tuple] = []
        self.current = 0
        fake = self

        class Device:
            def __init__(self, i):
                self.i = i

            def __enter__(self):
                self.prev, fake.current = fake.current, self.i

            def __exit__(self, *exc):
                fake.current = self.prev

        class Stream:
            def __init__(self, dev):
                self.dev, self.ptr = dev, 100 + dev

            def record(self):
                assert fake.current == self.dev, "an event is recorded on its own device's stream"
                ev = ("event", len(fake.log))
                fake.log.append((self.dev, "record", ev))
                return ev

            def wait_event(self, ev):
                fake.log.append((self.dev, "wait", ev))

            def synchronize(self):
                fake.log.append((self.dev, "host waits", None))

        class Array:
            def __init__(self, dev, nbytes=64):
                self.dev, self.nbytes, self.data = dev, nbytes, types.SimpleNamespace(ptr=dev)

            def get(self):
                fake.log.append((self.dev, "download", None))
                fake.log.append((self.dev, "host waits", None))
                return b"host"

        def memcpy_peer_async(dst, dst_dev, src, src_dev, n, stream_ptr):
            fake.log.append((stream_ptr - 100, "peer copy", None))

        def asarray(host):
            fake.log.append((fake.current, "upload", None))
            return Array(fake.current)

        self.Array = Array
        self.module = types.SimpleNamespace(asarray=asarray, cuda=types.SimpleNamespace(
            Device=Device, get_current_stream=lambda: Stream(fake.current),
            runtime=types.SimpleNamespace(memcpyPeerAsync=memcpy_peer_async)))

    def covered_by_syncing_device0(self) -> set[int]:
        """Indices of the logged operations a synchronize of device 0 waits for: device 0's stream, and on
        device 1 whatever precedes an event that device 0's stream waits on."""
        waits = [ev[1] for dev, what, ev in self.log if dev == 0 and what == "wait" and self.log[ev[1]][0] == 1]
        last1 = max(waits, default=-1)
        return {i for i, (dev, _, _) in enumerate(self.log) if dev == 0 or i < last1}


def _fake_cupy_impl(monkeypatch):
    import importlib

    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake.module)
    monkeypatch.delitem(sys.modules, "impls.gpu_links.cupy_impl", raising=False)
    impl = importlib.import_module("impls.gpu_links.cupy_impl")
    monkeypatch.delitem(sys.modules, "impls.gpu_links.cupy_impl")  # no fake-backed module left behind
    return fake, impl, {"x": fake.Array(0), "dst": fake.Array(1), "peer": 1}


@pytest.mark.parametrize("variant", ["via_host", "peer"])
def test_cupy_device0_synchronize_covers_the_work_on_device1(monkeypatch, variant):
    """The harness synchronizes device 0 only: every copy a CuPy variant queues, on either device, must be
    ordered before device 0's current stream (without CuPy: a fake that logs the stream operations)."""
    fake, impl, state = _fake_cupy_impl(monkeypatch)
    out = getattr(impl, f"run_{variant}")(state)
    copies = [i for i, (_, what, _) in enumerate(fake.log) if what in ("upload", "download", "peer copy")]
    assert copies and set(copies) <= fake.covered_by_syncing_device0(), fake.log
    assert out["copy"] is state["dst"] if variant == "peer" else out["copy"].dev == 1


def test_cupy_peer_does_not_block_the_host_and_orders_device1(monkeypatch):
    """Like torch's peer copy: no host wait; the copy after device 1's earlier work and before its later."""
    fake, impl, state = _fake_cupy_impl(monkeypatch)
    impl.run_peer(state)
    assert not [e for e in fake.log if e[1] == "host waits"], fake.log
    (copy,) = [i for i, e in enumerate(fake.log) if e[1] == "peer copy"]
    before = {ev for dev, what, ev in fake.log[:copy] if dev == 0 and what == "wait"}
    after = {ev for dev, what, ev in fake.log[copy:] if dev == 1 and what == "wait"}
    assert any(fake.log[ev[1]][0] == 1 for ev in before), "the copy does not wait for device 1's stream"
    assert any(fake.log[ev[1]][0] == 0 and ev[1] > copy for ev in after), "device 1 does not wait for the copy"
