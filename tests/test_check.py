"""`check`, the reproducer an equivalence failure prints: it works for every scenario it is printed for
(rank scenarios on their group of rank processes, as in a compare run) and exits 2 with one line when
nothing was checked. Rank groups are torch/gloo and JAX/gloo at world size 2 on the CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run.cli import gpu_present

ROOT = Path(__file__).resolve().parent.parent


def check(scenario: str, params: dict, frameworks: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("TRIPTYCH_FAULT", "TRIPTYCH_FAULT_RANK", "TRIPTYCH_WORLD_SIZE")}
    e |= {"PYTHONPATH": str(ROOT)} | (env or {})
    return subprocess.run([sys.executable, "-m", "harness", "check", scenario, "--frameworks", frameworks,
                           "--params", json.dumps(params)], cwd=ROOT, capture_output=True, text=True, env=e,
                          timeout=600)


# (scenario, params, the framework and variant planted wrong, the element the plant changes: rank 1's last)
RANKED = {
    "ranks": ({"rows": 5, "cols": 3, "dtype": "float32", "seed": 3, "world_size": 2}, "torch", "by_rank",
              "'total'[1, 2]"),
    "point_to_point": ({"count": 5, "dtype": "float32", "seed": 1, "world_size": 2}, "jax", "nonblocking",
                       "'received'[1, 4]"),
    "tensor_parallel": ({"batch": 2, "d_model": 3, "hidden_per_rank": 2, "dtype": "float32", "seed": 5,
                         "world_size": 2}, "torch", "tp_megatron", "'y'[1, 1, 2]"),
}


@pytest.mark.parametrize("scenario", list(RANKED))
def test_check_on_ranks_reproduces_a_planted_wrong_output(scenario):
    params, fw, variant, where = RANKED[scenario]
    r = check(scenario, params, "torch,jax",
              {"TRIPTYCH_FAULT": f"{scenario}:{fw}:wrong:{variant}", "TRIPTYCH_FAULT_RANK": "1"})
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"{scenario}/{fw}/{variant} differs from the float64 reference" in r.stdout, r.stdout
    assert where in r.stdout and "1 of " in r.stdout, r.stdout  # rank 1's element, gathered as the run does
    assert f"python -m harness check {scenario} --frameworks {fw} --params" in r.stdout
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("scenario", [*RANKED, "ranks_default_world_size"])
def test_check_on_ranks_passes_without_a_plant(scenario):
    params = dict(RANKED[scenario.removesuffix("_default_world_size")][0])
    if scenario == "ranks_default_world_size":
        del params["world_size"]  # the run's default: 2 ranks on the CPU
    r = check(scenario.removesuffix("_default_world_size"), params, "torch,jax")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "outputs match the reference and each other" in r.stdout, r.stdout[-2000:]
    assert "torch/" in r.stdout and "jax/" in r.stdout  # both frameworks' groups ran


def test_check_on_ranks_names_the_rank_whose_impl_raised():
    params = RANKED["ranks"][0]
    r = check("ranks", params, "torch", {"TRIPTYCH_FAULT": "ranks:torch:raise:equiv", "TRIPTYCH_FAULT_RANK": "0"})
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "ranks/torch on 2 ranks: rank 0: InjectedFault" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [
    ("gpu_links", {"count": 4, "dtype": "float32", "seed": 1}, "torch,cupy,jax"),
    ("async_dispatch", {"m": 5, "n": 3, "steps": 2, "dtype": "float16", "seed": 4}, "cupy"),
    ("ranks", {"rows": 4, "cols": 3, "dtype": "float32", "seed": 1, "world_size": 2}, "cupy"),
], ids=["gpu_links", "cupy", "cupy_ranks"])
def test_check_with_nothing_checked_exits_2_with_one_line(args):
    if gpu_present():
        pytest.skip("this machine has a GPU: these run here")
    scenario, params, frameworks = args
    r = check(scenario, params, frameworks)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"harness: error: check {scenario}: nothing was checked"), r.stderr
    assert "cupy: " in lines[0] and r.stdout == ""  # each framework's reason, in the one line


def test_a_planted_wrong_output_names_its_variant_and_stays_out_of_the_parent(monkeypatch):
    import numpy as np

    from harness.workers import faults
    from harness.workers.protocol import Request

    assert faults.parse("ranks:torch:wrong:by_rank") == [faults.Fault("ranks", "torch", "wrong", "by_rank")]
    for bad, why in (("ranks:torch:wrong", "is not <scenario>:<framework>:wrong:<variant>"),
                     ("*:torch:wrong:by_rank", "is not"), ("ranks:torch:wrong:telepathy", "telepathy")):
        with pytest.raises(ValueError, match=why):
            faults.parse(bad)
    assert not faults.Fault("ranks", "torch", "wrong", "by_rank").hits("equiv", "torch", "ranks")  # no raise
    monkeypatch.setenv(faults.ENV, "ranks:torch:wrong:by_rank")
    out = {"by_rank": {"total": np.zeros((2, 3), np.float32)}, "one_process": {"total": np.zeros((2, 3), np.float32)}}
    handle = faults.planted_into("torch", lambda _req, _progress: out)  # as a worker child's serve loop wraps it
    assert handle(Request("equiv", "torch", "collectives", {}), print) is out  # another scenario
    got = handle(Request("equiv", "torch", "ranks", {}), print)
    assert got["by_rank"]["total"][1, 2] == 1.0 and got["by_rank"]["total"].dtype == np.float32
    assert not out["by_rank"]["total"].any() and got["one_process"] is out["one_process"]
