"""One framework's failure costs only its own rows: planted faults (harness/workers/faults.py) in worker
processes, real out-of-memory errors classified as such, and the GPU memory caps."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import backends
from harness.measure import timing
from harness.workers import faults, protocol
from harness.workers import worker as W
from harness.backends.base import MEMORY_FRACTION_ENV, Unavailable, memory_fraction
from harness.run.progress import QuietUI
from harness.run.runner import CompareOptions, run_compare
from scenarios import get
from tests.conftest import backend_or_skip, gpu_backend_or_skip

ROOT = Path(__file__).resolve().parent.parent


def compare(monkeypatch, fault: str, *, frameworks=("torch", "jax"), equivalence=False, timeout=120.0,
            scenarios=("async_dispatch", "sync_points")) -> dict:
    for fw in frameworks:
        backend_or_skip(fw)
    monkeypatch.setenv(faults.ENV, fault)
    opts = CompareOptions(scenarios=list(scenarios), frameworks=list(frameworks), size="smoke", examples=2, seed=11,
                          isolation="process", timeout_s=timeout, equivalence=equivalence)
    return run_compare(opts, QuietUI())


def rows(doc: dict, scenario: str, framework: str) -> list[dict]:
    found = [r for r in doc["scenarios"][scenario]["rows"] if r["framework"] == framework]
    assert found, (scenario, framework)
    return found


# -- the mechanism -------------------------------------------------------------------------------


def test_fault_specs_parse_and_bad_ones_say_why():
    assert faults.parse("") == []
    f = faults.Fault("*", "torch", "raise")
    assert f.hits("time", "torch", "sync_points") and f.hits("equiv", "torch", "async_dispatch")
    assert not f.hits("hello", "torch", None) and not f.hits("time", "jax", "sync_points")
    assert not faults.Fault("sync_points", "torch", "raise", "equiv").hits("time", "torch", "sync_points")
    assert faults.parse("sync_points:torch:hang:time, *:jax:import") == [
        faults.Fault("sync_points", "torch", "hang", "time"), faults.Fault("*", "jax", "import", "*")]
    for bad, why in (("sync_points:torch", "is not"), ("nope:torch:raise", "unknown scenario"),
                     ("*:tf:raise", "unknown framework"), ("*:torch:explode", "unknown kind"),
                     ("*:torch:raise:later", "unknown op")):
        with pytest.raises(ValueError, match=why):
            faults.parse(bad)


def test_faults_reach_only_worker_processes(monkeypatch):
    """The parent and --isolation none never set a fault off (a hang there could not be timed out)."""
    backend_or_skip("torch")
    monkeypatch.setenv(faults.ENV, "sync_points:torch:crash")
    params = get("sync_points").params_for_size("smoke") | {"seed": 1}
    out = W.LocalWorker("torch").request("equiv", "sync_points", params)
    assert set(out) == {"item_each_step", "on_device"}


def test_a_worker_is_replaced_after_oom_and_kept_after_an_exception(monkeypatch):
    backend_or_skip("torch")
    monkeypatch.setenv(faults.ENV, "sync_points:torch:oom:time,async_dispatch:torch:raise:time")
    w = W.ProcessWorker("torch")
    params = get("sync_points").params_for_size("smoke") | {"seed": 1}
    try:
        pid = w.request("hello", timeout=120)["pid"]
        with pytest.raises(W.WorkerError) as e:
            w.request("time", "async_dispatch", params, timing.preset("smoke"), timeout=120)
        assert e.value.status == "error" and "InjectedFault" in str(e.value)
        assert w.request("hello", timeout=120)["pid"] == pid  # an exception leaves the worker usable
        with pytest.raises(W.WorkerError) as e:
            w.request("time", "sync_points", params, timing.preset("smoke"), timeout=120)
        assert e.value.status == "oom"
        assert w.request("hello", timeout=120)["pid"] != pid  # its memory went back with the process
    finally:
        w.close()


def test_death_by_signal_is_named():
    assert protocol.died("jax", -6) == "jax worker died of SIGABRT"
    assert "out-of-memory killer" in protocol.died("torch", -9)
    assert protocol.died("cupy", 3) == "cupy worker died (exit code 3)"


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_the_frameworks_own_oom_errors_are_recognised(fw):
    b = backend_or_skip(fw)
    with pytest.raises(Exception) as e:
        b.allocate(1 << 50)  # 1 PiB: refused at once, nothing touched
    assert b.is_out_of_memory(e.value), repr(e.value)
    assert not b.is_out_of_memory(ValueError("shapes do not match"))
    try:  # the cause of a wrapping exception counts too
        try:
            raise MemoryError("no room")
        except MemoryError as inner:
            raise RuntimeError("while preparing") from inner
    except RuntimeError as outer:
        assert b.is_out_of_memory(outer)


# -- a fault costs only its own rows ---------------------------------------------------------------

EXPECTED = {
    "raise": ("error", "InjectedFault: planted by TRIPTYCH_FAULT"),
    "oom": ("oom", "allocate"),  # torch on the CPU: "DefaultCPUAllocator: can't allocate memory"
    "crash": ("crashed", "torch worker died of SIGABRT"),
    "hang": ("timeout", "torch worker did not answer within 20 s (killed)"),
}


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_a_fault_costs_only_its_own_rows(monkeypatch, kind):
    status, text = EXPECTED[kind]
    doc = compare(monkeypatch, f"async_dispatch:torch:{kind}:time", timeout=20.0 if kind == "hang" else 120.0)
    hit = rows(doc, "async_dispatch", "torch")
    assert {r["status"] for r in hit} == {status}, hit
    assert all(text in r["reason"] for r in hit), hit[0]["reason"]
    assert len(hit) == len(get("async_dispatch").variants)
    # The other framework in the same scenario, and both in the next scenario (the torch worker
    # restarted after a crash, hang or oom), ran and were checked.
    for scenario, fw in (("async_dispatch", "jax"), ("sync_points", "torch"), ("sync_points", "jax")):
        assert {r["status"] for r in rows(doc, scenario, fw)} == {"ok"}, (scenario, fw)
    assert doc["scenarios"]["async_dispatch"]["claims"]  # judged for the framework that ran


def test_a_framework_that_fails_to_import_is_skipped_with_why(monkeypatch):
    doc = compare(monkeypatch, "*:torch:import", equivalence=True, scenarios=("sync_points",))
    info = doc["environment"]["frameworks"]["torch"]
    assert not info["available"]
    assert info["why"] == "torch failed to import: torch refused to import (planted by TRIPTYCH_FAULT)"
    assert {r["status"] for r in rows(doc, "sync_points", "torch")} == {"skipped"}
    assert {r["status"] for r in rows(doc, "sync_points", "jax")} == {"ok"}
    eq = doc["scenarios"]["sync_points"]["equivalence"]
    assert eq["status"] == "passed" and eq["frameworks"] == ["jax"]


def test_a_framework_lost_in_equivalence_is_named_and_the_rest_still_checked(monkeypatch):
    doc = compare(monkeypatch, "async_dispatch:torch:crash:equiv", equivalence=True)
    eq = doc["scenarios"]["async_dispatch"]["equivalence"]
    assert eq["status"] == "failed"
    assert eq["excluded"] == {"torch": "crashed: torch worker died of SIGABRT"}
    assert "the others (jax) passed over 2 examples" in eq["message"]
    # Timing was not planted: a fresh torch worker times the scenario; the next scenario is untouched.
    assert {r["status"] for r in rows(doc, "async_dispatch", "torch")} == {"ok"}
    assert doc["scenarios"]["sync_points"]["equivalence"]["status"] == "passed"


def test_the_cli_writes_the_result_with_rows_that_say_what_happened(tmp_path):
    backend_or_skip("torch")
    backend_or_skip("jax")
    out = tmp_path / "res"
    fault = "async_dispatch:torch:raise:time,sync_points:jax:oom:time"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{faults.ENV: fault})
    r = subprocess.run([sys.executable, "-m", "harness", "compare", "--size", "smoke", "--seed", "2", "--examples", "1",
                        "--frameworks", "torch,jax", "--scenarios", "async_dispatch,sync_points", "--no-equivalence",
                        "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "FAILED async_dispatch/torch/sync_each: error" in r.stderr
    assert "FAILED sync_points/jax/item_each_step: oom" in r.stderr
    assert "Traceback" not in r.stderr
    (path,) = out.glob("*.json")
    assert not list(out.glob(".tmp-*"))
    doc = json.loads(path.read_text())
    st = {(s, row["framework"]): row["status"] for s, e in doc["scenarios"].items() for row in e["rows"]}
    assert st == {("async_dispatch", "torch"): "error", ("async_dispatch", "jax"): "ok",
                  ("sync_points", "torch"): "ok", ("sync_points", "jax"): "oom"}


# -- memory caps ---------------------------------------------------------------------------------


def test_memory_fraction_from_the_environment(monkeypatch):
    monkeypatch.delenv(MEMORY_FRACTION_ENV, raising=False)
    assert memory_fraction() == 0.15
    monkeypatch.setenv(MEMORY_FRACTION_ENV, "0.25")
    assert memory_fraction() == 0.25
    for bad in ("half", "0", "1.5", "-0.1"):
        monkeypatch.setenv(MEMORY_FRACTION_ENV, bad)
        with pytest.raises(Unavailable, match=MEMORY_FRACTION_ENV):
            memory_fraction()


def _jax_env_in_a_fresh_process(env: dict[str, str]) -> dict[str, str]:
    code = ("import json, os\nfrom harness import backends\nbackends.get('jax').load()\n"
            "print(json.dumps({k: v for k, v in os.environ.items() if 'MEM_FRACTION' in k}))")
    clean = {k: v for k, v in os.environ.items() if "MEM_FRACTION" not in k}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env=clean | env | {"PYTHONPATH": str(ROOT)}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_jax_is_capped_before_it_starts_and_a_users_own_cap_wins():
    backend_or_skip("jax")
    assert _jax_env_in_a_fresh_process({MEMORY_FRACTION_ENV: "0.25"}) == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.25"}
    # Both names set is an error in JAX's CUDA plugin: never add ours next to the user's.
    assert _jax_env_in_a_fresh_process({"XLA_CLIENT_MEM_FRACTION": "0.5"}) == {"XLA_CLIENT_MEM_FRACTION": "0.5"}


def test_the_fraction_reaches_the_workers_and_the_result(monkeypatch):
    backend_or_skip("torch")
    monkeypatch.setenv(MEMORY_FRACTION_ENV, "0.3")  # restored after the test, whatever run_compare sets
    opts = CompareOptions(scenarios=["sync_points"], frameworks=["torch"], size="smoke", examples=1, seed=1,
                          isolation="process", equivalence=False, gpu_memory_fraction=0.2)
    doc = run_compare(opts, QuietUI())
    assert doc["environment"]["gpu_memory_fraction"] == 0.2
    assert os.environ[MEMORY_FRACTION_ENV] == "0.2"  # what the spawned workers inherited
    cap = doc["environment"]["frameworks"]["torch"]["env"]["memory_cap"]
    assert cap["fraction"] == (0.2 if backends.get("torch").on_gpu else None)


# -- on the GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("fw", backends.FRAMEWORKS)
def test_each_framework_is_held_to_its_cap(fw):
    b = gpu_backend_or_skip(fw)
    cap = b.memory_cap
    total = b.env().get("memory_bytes") or backends.get("torch").env().get("memory_bytes")
    assert cap["fraction"] and cap["bytes"], cap
    if total:
        assert cap["bytes"] <= cap["fraction"] * total * 1.01, (cap, total)
    with pytest.raises(Exception) as e:  # past the cap, not past the device: the cap is what stops it
        b.allocate(cap["bytes"] + (1 << 30))
    assert b.is_out_of_memory(e.value), repr(e.value)
    x = b.allocate(64 << 20)  # and the framework goes on working
    b.synchronize(x)
    del x
    b.free_memory()


@pytest.mark.gpu
# (A second case, fraction 1 — a leak stopped by a refused cudaMalloc of the whole GPU — was dropped: on the
# shared H200 lease it outlasted its share of the GPU suite's time.)
@pytest.mark.parametrize("fraction", ["0.3"], ids=["the cap stops a leak"])
def test_real_device_oom_in_every_framework_is_a_row_status(monkeypatch, fraction):
    """A leak in torch, CuPy and JAX, stopped by the memory cap or (fraction 1) by a refused
    cudaMalloc: rows "oom", then a fresh worker serves the next scenario. The three caps fit in
    the GPU together."""
    avail = [fw for fw in backends.FRAMEWORKS if backends.get(fw).available()[0] and backends.get(fw).on_gpu]
    if not avail:
        pytest.skip("no framework on a GPU here")
    monkeypatch.setenv(MEMORY_FRACTION_ENV, fraction)
    for name in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION"):  # JAX's backend in this test
        monkeypatch.delenv(name, raising=False)  # process set them; the workers would take them as the user's
    doc = compare(monkeypatch, ",".join(f"async_dispatch:{fw}:oom:time" for fw in avail), frameworks=avail)
    words = {"torch": "OutOfMemoryError", "cupy": "OutOfMemoryError", "jax": "RESOURCE_EXHAUSTED"}
    for fw in avail:
        hit = rows(doc, "async_dispatch", fw)
        assert {r["status"] for r in hit} == {"oom"} and words[fw] in hit[0]["reason"], hit[0]
        assert {r["status"] for r in rows(doc, "sync_points", fw)} == {"ok"}, fw
    caps = [doc["environment"]["frameworks"][fw]["env"]["memory_cap"] for fw in avail]
    assert {c["fraction"] for c in caps} == {float(fraction)}, caps
    total = max(doc["environment"]["frameworks"][fw]["env"].get("memory_bytes") or 0 for fw in avail)
    assert total, "no framework reported the device's memory"
    if fraction == "0.3":
        # XLA rounds its BFC limit up a little (on the H200: 0.3 of 143,156 MiB plus 1.2 MiB); the three
        # together must still leave a tenth of the GPU free.
        assert sum(c["bytes"] for c in caps) <= 0.9 * total + len(caps) * (8 << 20), caps
