"""memory_pools: the cycles on the CPU, the fresh-process child's arithmetic on the driver's count (a fake
nvidia-smi stands in for the GPU's), the second framework's out-of-memory, and the claims' judges."""
from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from harness.workers.execute import load_impl
from harness.measure.metrics import collecting
from impls._shared.child import ChildError, driver_memory, nvidia_smi_index, run_child
from scenarios import get
from tests.conftest import backend_or_skip, judge_claim, synthetic_row

SCN = get("memory_pools")
MiB = 1 << 20


def fake_nvidia_smi(folder, total_mib=81920, step_mib=2):
    """An nvidia-smi whose used memory grows by step_mib at every call, from 1000 MiB."""
    count = folder / "calls"
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nn=$(cat {count} 2>/dev/null || echo 0)\necho $((n + 1)) > {count}\n"
                      f"echo \"$((1000 + n * {step_mib})), {total_mib}\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize("fw", ["torch", "jax"])
@pytest.mark.parametrize("variant", ["pooled", "released"])
def test_cycles_run_on_the_cpu_where_no_pool_counter_exists(fw, variant):
    b = backend_or_skip(fw)
    if b.on_gpu:
        pytest.skip("a CPU device's case")
    impl = load_impl(SCN.name, fw)
    p = {"n": 300, "cycles": 4, "seed": 2}
    inputs = SCN.make_inputs(p)
    with collecting() as emitted:
        out = getattr(impl, f"run_{variant}")(impl.prepare(inputs, p, b.device))
    np.testing.assert_array_equal(b.to_numpy(out)["peaks"], inputs["x"])
    assert "held_after_free_bytes" not in emitted  # no pool counters on the CPU: not a made-up 0
    rows = [synthetic_row(v, 1e-3, **emitted) for v in ("pooled", "released")]
    assert judge_claim(SCN.name, "pool_holds", rows, p, fw).verdict == "inconclusive"


def test_fresh_process_reads_the_driver_before_and_after(tmp_path, monkeypatch):
    b = backend_or_skip("jax")
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path))
    impl = load_impl(SCN.name, "jax")
    p = {"n": 64, "cycles": 3, "seed": 5}
    inputs = SCN.make_inputs(p)
    with collecting() as emitted:
        out = impl.run_fresh_process(impl.prepare(inputs, p, b.device))
    np.testing.assert_array_equal(out["peaks"], inputs["x"])
    # readings: before anything, after the first array, after the cycles, after releasing (+2 MiB each)
    assert emitted["first_array_bytes"] == 2 * MiB
    assert emitted["driver_held_bytes"] == 2 * MiB
    assert emitted["driver_released_bytes"] == 4 * MiB
    assert emitted["total_bytes"] == 81920 * MiB
    assert emitted["process_s"] > 0


def test_beside_jax_records_the_second_frameworks_out_of_memory(tmp_path):
    backend_or_skip("jax")
    # JAX on the CPU stands in for the second framework: 40% of a 1 PiB "GPU" cannot be allocated
    env = dict(os.environ, PATH=fake_nvidia_smi(tmp_path, total_mib=1 << 30, step_mib=0),
               PYTHONPATH=os.getcwd())
    got = run_child("impls.memory_pools.child", ["jax", "beside_jax", 0, 16, json.dumps([1.5, 0.5])], env)
    assert got["second_alloc_failed"] == 1
    assert "out of memory" in got["second_alloc_error"].lower()
    assert got["peaks"] == [1.5, 0.5]  # the cycles ran after the failed allocation


def test_the_hazards_error_reaches_the_log_once_per_worker_and_its_numbers_every_repeat(capsys):
    from impls._shared import child

    got = {"second_alloc_failed": 1, "second_alloc_error": "OutOfMemoryError: CUDA out of memory", "peaks": [1.0]}
    emitted = []
    for _ in range(3):  # three repeats of the hazard in one worker
        with collecting() as sink:
            child.emit_numbers(got, "memory_pools/torch/beside_jax")
        emitted.append(dict(sink))
    log = capsys.readouterr().err.splitlines()
    assert log == ["memory_pools/torch/beside_jax: the error the hazard makes, as expected (said once): "
                   "OutOfMemoryError: CUDA out of memory"]
    assert emitted == [{"second_alloc_failed": 1.0}] * 3


def test_a_child_without_the_drivers_count_fails_loudly(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path), PYTHONPATH=os.getcwd())  # no nvidia-smi, no pynvml here
    with pytest.raises(ChildError, match="no driver count"):
        run_child("impls.memory_pools.child", ["jax", "fresh_process", 0, 4, "[1.0]"], env)


def test_driver_memory_reads_nvidia_smi_in_bytes_and_names_the_visible_device(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path, total_mib=4096))
    got = driver_memory(0)
    assert (got["used"], got["total"]) == (1000 * MiB, 4096 * MiB)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-5a")
    assert (nvidia_smi_index(0), nvidia_smi_index(1)) == ("3", "GPU-5a")


def test_judges_on_synthetic_rows():
    big = {"n": 1 << 24, "cycles": 8}  # 64 MiB
    small = {"n": 1 << 18, "cycles": 8}
    nb = 64 * MiB

    def pools(pooled, released):
        return [synthetic_row("pooled", 1e-3, held_after_free_bytes=pooled),
                synthetic_row("released", 2e-3, held_after_free_bytes=released)]

    assert judge_claim(SCN.name, "pool_holds", pools(nb, 0), big).verdict == "confirmed"
    assert judge_claim(SCN.name, "pool_holds", pools(nb, nb), big, "jax").verdict == "confirmed"  # cannot release
    assert judge_claim(SCN.name, "pool_holds", pools(nb, 0), big, "jax").verdict == "refuted"  # it could after all
    assert judge_claim(SCN.name, "pool_holds", pools(nb, nb), big).verdict == "refuted"  # torch/CuPy must release
    assert judge_claim(SCN.name, "pool_holds", pools(0, 0), big).verdict == "refuted"
    assert judge_claim(SCN.name, "pool_holds", pools(2 * MiB, 2 * MiB), small).verdict == "inconclusive"

    def fresh(**m):
        return [synthetic_row("fresh_process", 1.0, **m)]

    assert judge_claim(SCN.name, "driver_holds", fresh(first_array_bytes=MiB, driver_held_bytes=nb, driver_released_bytes=0),
                       big).verdict == "confirmed"
    assert judge_claim(SCN.name, "driver_holds", fresh(first_array_bytes=MiB, driver_held_bytes=0,
                                                       driver_released_bytes=0), big).verdict == "refuted"
    assert judge_claim(SCN.name, "driver_holds", fresh(driver_held_bytes=0, driver_released_bytes=0),
                       small).verdict == "inconclusive"
    jax_pool = {"first_array_bytes": 100 * nb, "driver_held_bytes": 0, "driver_released_bytes": 0}
    assert judge_claim(SCN.name, "driver_holds", fresh(**jax_pool), big, "jax").verdict == "confirmed"
    assert judge_claim(SCN.name, "driver_holds", fresh(**jax_pool), big, "torch").verdict == "refuted"
    no_pool = {"first_array_bytes": MiB, "driver_held_bytes": 0, "driver_released_bytes": 0}
    assert judge_claim(SCN.name, "driver_holds", fresh(**no_pool), big, "jax").verdict == "refuted"
    share = {"total_bytes": 100.0}
    assert judge_claim(SCN.name, "first_array", fresh(first_array_bytes=76.0, **share), big, "jax").verdict == "confirmed"
    assert judge_claim(SCN.name, "first_array", fresh(first_array_bytes=1.0, **share), big, "jax").verdict == "refuted"
    assert judge_claim(SCN.name, "first_array", fresh(first_array_bytes=1.0, **share), big, "cupy").verdict == "confirmed"
    assert judge_claim(SCN.name, "first_array", fresh(first_array_bytes=76.0, **share), big, "torch").verdict == "refuted"

    def beside(failed):
        return [synthetic_row("beside_jax", 1.0, second_alloc_failed=failed, jax_held_bytes=75.0, total_bytes=100.0)]

    assert judge_claim(SCN.name, "second_framework_starves", beside(1), big).verdict == "confirmed"
    assert judge_claim(SCN.name, "second_framework_starves", beside(0), big).verdict == "refuted"
    with pytest.raises(KeyError):  # JAX has no beside_jax row: the harness makes that inconclusive
        judge_claim(SCN.name, "second_framework_starves", [], big, "jax")

    def timed(raw, pooled, iqr, held=nb):
        return [synthetic_row("raw", raw, iqr=iqr), synthetic_row("pooled", pooled, iqr=iqr, held_after_free_bytes=held)]

    assert judge_claim(SCN.name, "pool_faster", timed(2e-3, 1e-3, 1e-4), big, "cupy").verdict == "confirmed"
    assert judge_claim(SCN.name, "pool_faster", timed(1e-3, 2e-3, 1e-4), big, "cupy").verdict == "refuted"
    assert judge_claim(SCN.name, "pool_faster", timed(1.05e-3, 1e-3, 1e-4), big, "cupy").verdict == "inconclusive"
    cpu = [synthetic_row("released", 2e-3), synthetic_row("pooled", 1e-3)]  # no pool counter: the CPU
    assert judge_claim(SCN.name, "release_costs", cpu, big, "torch").verdict == "inconclusive"


def test_equivalence_examples_capped_where_every_call_starts_processes(tmp_path):
    """--examples 5 asked, the spec's max_examples (2) taken: the run says how many it checked."""
    import json
    import subprocess
    import sys
    assert SCN.max_examples == 2
    subprocess.run([sys.executable, "-m", "harness", "compare", "--scenarios", "memory_pools", "--frameworks",
                    "torch", "--no-timing", "--examples", "5", "--out", str(tmp_path), "--no-report", "--quiet"],
                   check=True, capture_output=True, timeout=300)
    (result,) = tmp_path.glob("*.json")
    eq = json.loads(result.read_text())["scenarios"]["memory_pools"]["equivalence"]
    assert (eq["status"], eq["examples"]) == ("passed", 2)
