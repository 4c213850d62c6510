"""gpu_links: a copy between two devices, direct or through the host. It needs two devices: skipped
with that reason elsewhere; JAX's logic runs on two CPU devices forced with XLA_FLAGS."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.execute import load_impl, run_variants, skip_reason
from scenarios import get
from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
from harness import backends
from harness.equivalence import compare_outputs
from harness.execute import run_variants
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
