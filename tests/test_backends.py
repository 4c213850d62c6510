"""Backends: availability with reasons, device choice, round trips, sync detectors' honesty."""
from __future__ import annotations

import builtins
import os

import numpy as np
import pytest

from harness import backends
from harness.backends.base import Unavailable
from tests.conftest import backend_or_skip, gpu_backend_or_skip


def test_unknown_framework():
    with pytest.raises(KeyError, match="unknown framework"):
        backends.get("tensorflow")


def test_missing_framework_gives_a_reason(monkeypatch):
    from harness.backends.jax_backend import JaxBackend

    real_import = builtins.__import__

    def no_jax(name, *a, **k):
        if name == "jax" or name.startswith("jax."):
            raise ImportError("No module named 'jax'", name="jax")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_jax)
    b = JaxBackend()
    ok, why = b.available()
    assert not ok and why == "jax is not installed (jax)"
    with pytest.raises(Unavailable):
        b.load()  # the reason is remembered, not retried


def test_cupy_without_gpu_says_why():
    """Where no CUDA device is visible, CuPy is unavailable and says which of its two causes it is."""
    import importlib.util
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("a CUDA driver is here: test_cupy_on_a_gpu_is_available checks it")
    b = backends.get("cupy")
    ok, why = b.available()
    assert not ok and not b.on_gpu
    if importlib.util.find_spec("cupy") is None:
        assert "not installed" in why
    else:
        assert why.startswith("CuPy needs a CUDA GPU")


@pytest.mark.gpu
def test_cupy_on_a_gpu_is_available():
    b = gpu_backend_or_skip("cupy")
    ok, why = b.available()
    assert ok and "cuda:" in why and b.memory_cap["bytes"]


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_torch_and_jax_fall_back_to_the_cpu(fw):
    b = backend_or_skip(fw)
    ok, label = b.available()
    assert ok
    assert b.on_gpu == ("cpu" not in label.split()[0])


@pytest.mark.parametrize("fw", backends.FRAMEWORKS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_round_trip(fw, dtype):
    b = backend_or_skip(fw)
    a = (np.arange(1, 25, dtype=np.float64).reshape(4, 6) * 1.5).astype(dtype)
    x = b.to_device(a)
    assert b.is_array(x)
    b.synchronize(x)
    back = b.to_numpy({"a": x, "l": [x, x]})
    np.testing.assert_array_equal(back["a"], a)
    assert back["a"].dtype == a.dtype and back["l"].shape == (2, 4, 6)


@pytest.mark.parametrize("fw", backends.FRAMEWORKS)
def test_env_names_version_and_device(fw):
    b = backend_or_skip(fw)
    env = b.env()
    assert env["version"] and env["device"]
    if b.on_gpu:
        assert env["gpu"]


def test_jax_does_not_preallocate_the_shared_gpu():
    b = backend_or_skip("jax")
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert b.env()["preallocate"] == "false"


def test_jax_gemms_go_through_cublas_unless_the_user_says_otherwise(monkeypatch):
    from harness.backends.xla import TRITON_GEMM_FLAG, use_cublas_gemms

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    use_cublas_gemms()
    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/tmp/x {TRITON_GEMM_FLAG}"
    use_cublas_gemms()  # once only
    assert os.environ["XLA_FLAGS"].count("triton_gemm") == 1
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=true")
    use_cublas_gemms()
    assert os.environ["XLA_FLAGS"] == "--xla_gpu_enable_triton_gemm=true"  # the user's choice stands
    monkeypatch.delenv("XLA_FLAGS")
    use_cublas_gemms()
    assert os.environ["XLA_FLAGS"] == TRITON_GEMM_FLAG


def test_jax_records_the_xla_flags_it_started_with():
    b = backend_or_skip("jax")
    assert "--xla_gpu_enable_triton_gemm=false" in b.env()["xla_flags"]


def test_precision_is_pinned():
    b = backend_or_skip("torch")
    assert b.fw.backends.cuda.matmul.allow_tf32 is False
    j = backend_or_skip("jax")
    assert j.fw.config.jax_default_matmul_precision == "highest"


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_sync_detector_is_honest_on_the_cpu(fw):
    b = backend_or_skip(fw)
    if b.on_gpu:
        pytest.skip("on a GPU the detector counts; see test_gpu.py")
    with b.sync_counter() as sc:
        pass
    assert sc.count is None and sc.why


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_sync_detector_counts_reads_not_metadata(fw):
    b = gpu_backend_or_skip(fw)
    x = b.to_device(np.arange(1, 1001, dtype=np.float32))
    b.synchronize(x)
    with b.sync_counter() as sc:
        for _ in range(3):
            _ = x.shape, x.dtype  # metadata: no sync
        float(x[3])  # one read
        float(x.sum())  # two
    assert sc.count == 2, sc


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy"])
def test_event_timer_brackets_device_work(fw):
    b = gpu_backend_or_skip(fw)
    x = b.to_device(np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32))
    t = b.event_timer()
    t.start()
    y = x @ x
    t.stop()
    b.synchronize(y)
    # 137 GFLOP: at most ~0.1 TFLOP/s would be absurdly slow, at least 1 ms at any float32 rate we know.
    assert 1e-3 < t.elapsed_s() < 1.4


@pytest.mark.gpu
def test_ceilings_are_physical():
    b = gpu_backend_or_skip("cupy")
    c = b.ceilings()
    assert 1e11 < c["hbm_Bps"] < 2e13
    assert 1e9 < c["h2d_Bps"] < 2e11 and 1e9 < c["d2h_Bps"] < 2e11
    assert 1e12 < c["fp32_flops"] < 2e14


@pytest.mark.parametrize("fw", ["torch", "cupy"])
def test_a_rank_loads_its_backend_onto_its_own_device(fw):
    """A rank on GPU LOCAL_RANK must cap and make its CUDA context on that GPU: _load caps the current
    device, so the ordinal is set before the backend loads, not after (where the cap landed on GPU 0)."""
    from harness.backends import backend_class, dist
    from harness.backends.base import Unavailable

    seen = []

    class Probe(backend_class(fw)):
        def _load(self):
            seen.append(self.ordinal)
            raise Unavailable("probe: stop here")

    with pytest.raises(Unavailable, match="probe"):
        dist.join(fw, Probe(), dist.RankEnv(rank=3, world_size=4, local_rank=1, addr="127.0.0.1", port=29500))
    assert seen == [1]
