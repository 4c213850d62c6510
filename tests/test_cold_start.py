"""cold_start: each run is a fresh process whose phases come back parsed; a warm cache is really read by the
next process (JAX on the CPU: its own cache-hit count, and no file added); a failing child fails loudly;
the claims' judges."""
from __future__ import annotations

import numpy as np
import pytest

from harness.check.equivalence import compare_outputs
from harness.workers.execute import load_impl, skip_reason
from harness.measure.metrics import collecting
from impls._shared.child import ChildError, run_child
from scenarios import get
from tests.conftest import backend_or_skip, judge_claim, synthetic_row

SCN = get("cold_start")
PHASES = ("import_s", "init_s", "first_call_s", "second_call_s", "process_s")


def test_jax_warm_cache_is_read_by_the_next_process():
    b = backend_or_skip("jax")
    impl = load_impl(SCN.name, "jax")
    p = {"n": 333, "dtype": "float32", "seed": 4}
    inputs = SCN.make_inputs(p)
    state = impl.prepare(inputs, p, b.device)  # one untimed process fills the warm folder
    rows = []
    for variant in ("cold_cache", "warm_cache"):
        with collecting() as m:
            out = getattr(impl, f"run_{variant}")(state)
        assert compare_outputs(SCN, p, b.to_numpy(out), SCN.reference(inputs, p)) is None
        assert all(m[k] > 0 for k in PHASES), m
        rows.append(synthetic_row(variant, m["process_s"], **m))
        if variant == "cold_cache":
            assert m["cache_hits"] == 0 and m["cache_files_added"] >= 1, m  # compiled, and written
        else:
            assert m["cache_hits"] >= 1 and m["cache_files_added"] == 0, m  # read, nothing new
    # measured here: a program this small compiles in well under JAX's default minimum of 1 s
    assert judge_claim(SCN.name, "jax_default_min_time", rows, p, "jax").verdict == "confirmed"


def test_a_failing_child_raises_with_its_exit_status_and_stderr(tmp_path):
    backend_or_skip("jax")
    with pytest.raises(ChildError, match=r"(?s)exit status 1; stderr: .*FileNotFoundError.*no_such_input\.npy"):
        run_child("impls.cold_start.jax_child", ["cpu", tmp_path, tmp_path / "no_such_input.npy", tmp_path / "o.npz"])


def test_torch_times_cold_starts_on_a_gpu_only():
    b = backend_or_skip("torch")
    why = skip_reason(SCN, SCN.variant("cold_cache"), b, load_impl(SCN.name, "torch"))
    assert (why is None) == b.on_gpu
    if not b.on_gpu:
        assert "compiles C++" in why


def test_judges_on_synthetic_rows():
    p = {"n": 1 << 20, "dtype": "float32"}

    def rows(cold_first, warm_first, cold_s=3.0, warm_s=2.0, iqr=0.1):
        return [synthetic_row("cold_cache", cold_s, iqr=iqr, first_call_s=cold_first, compile_s=0.2),
                synthetic_row("warm_cache", warm_s, iqr=iqr, first_call_s=warm_first, cache_files_added=0)]

    assert judge_claim(SCN.name, "warm_first_call", rows(1.0, 0.1), p, "torch").verdict == "confirmed"
    assert judge_claim(SCN.name, "warm_first_call", rows(1.0, 0.8), p, "cupy").verdict == "refuted"
    assert judge_claim(SCN.name, "warm_process", rows(1.0, 0.1), p).verdict == "confirmed"
    assert judge_claim(SCN.name, "warm_process", rows(1.0, 0.1, 3.0, 2.95), p).verdict == "inconclusive"
    assert judge_claim(SCN.name, "warm_process", rows(1.0, 0.1, 2.0, 3.0), p).verdict == "refuted"
    slow = [synthetic_row("cold_cache", 3.0, compile_s=1.5)]
    assert judge_claim(SCN.name, "jax_default_min_time", slow, p, "jax").verdict == "refuted"
    assert judge_claim(SCN.name, "jax_default_min_time", slow, p, "torch").verdict == "inconclusive"
