"""Rank groups (harness/workers/ranks.py, harness/workers/rank_main.py): real processes at world size 2 with torch's
gloo and JAX's CPU collectives; the global semantics against the numpy reference; the slowest rank's
time; a dead or hung rank taking its whole group down with no process left behind."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from harness.workers import faults
from harness.check.equivalence import run_equivalence
from harness.workers.protocol import Request
from harness.workers.ranks import FAULT_RANK_ENV, RankGroup, merge_rows
from harness.measure.timing import PRESETS, TimingConfig
from harness.measure.timing import sampled as sampled_repeat
from harness.workers.worker import WorkerError, WorkerLost
from scenarios import _ranks as R
from scenarios import collectives, get
from tests.conftest import backend_or_skip, rank_children


@pytest.mark.parametrize("scenario", ["ranks", "point_to_point", "collectives"])
def test_equivalence_at_world_size_2_is_exact(group, scenario):
    scn = get(scenario)
    eq = run_equivalence(scn, lambda fw, p: group.request("equiv", scenario, p, timeout=120), [group.fw],
                         max_examples=5, seed=3)
    assert eq.status == "passed", eq.message


def test_every_collective_at_a_fixed_size_out_of_place_and_in_place(group):
    """Each operation at least once, whatever hypothesis drew, in both placements where the framework
    has them: torch all but barrier and in-place all_to_all (NCCL has none), JAX all but barrier."""
    scn = get("collectives")
    no_in_place = {"barrier"} | ({"all_to_all"} if group.fw == "torch" else set())
    for op in collectives.OPS:
        p = {"op": op, "bytes": 64, "dtype": "float32", "seed": 5, "world_size": 2}
        got = group.request("equiv", "collectives", p, timeout=120)
        assert set(got) == {"out_of_place"} | (set() if op in no_in_place else {"in_place"}), op
        want = scn.reference(scn.make_inputs(p), p)["out"]
        for v, outs in got.items():
            np.testing.assert_array_equal(outs["out"], want, err_msg=f"{op} {v}")


def test_back_to_back_calls_stay_exact_and_rows_say_what_they_measure(group):
    """A timed sample of 20 calls, in place too (each reduction on a buffer of its own), is checked
    exact on its last call; barrier rows carry no bandwidth; JAX's broadcast and reduce say they move
    an all-reduce's traffic, at the all-reduce's bus factor."""
    for op in collectives.OPS:
        p = {"op": op, "bytes": 4 * 64, "dtype": "float32", "seed": 6, "world_size": 2}
        rows = {r["variant"]: r for r in group.request("time", "collectives", p, PRESETS["smoke"], timeout=120)["rows"]}
        for v, r in rows.items():
            if r["status"] == "skipped":
                assert v == "in_place" and op in ("barrier", "all_to_all"), (op, r["reason"])
                continue
            assert r["status"] == "ok" and r["check"]["checked"] >= 4 and r["check"]["wrong"] == 0, (op, v, r["check"])
            m, t = r["timing"]["metrics"], r["timing"]
            assert t["rank_time"] == "mean" and t["slowest_rank"]["device_done"]["median"] >= t["device_done"]["median"]
            if op == "barrier":
                assert not {"bytes", "algbw_GBps", "busbw_GBps", "bus_factor"} & set(m), m
                continue
            moves_all_reduce = group.fw == "jax" and op in ("broadcast", "reduce")
            assert m["all_reduce_traffic"] == float(moves_all_reduce), (op, m)
            factor = collectives.bus_factor("all_reduce" if moves_all_reduce else op, 2)
            assert m["bus_factor"] == factor and m["busbw_GBps"] == pytest.approx(m["algbw_GBps"] * factor)


def test_ranks_share_no_state(group):
    info = group.request("hello", timeout=120)
    assert len(set(info["pids"])) == 2 and os.getpid() not in info["pids"]
    p = {"rows": 5, "cols": 3, "dtype": "float32", "seed": 1, "world_size": 2}
    out = group.request("equiv", "ranks", p, timeout=120)
    for v in ("one_process", "by_rank"):  # a module-level value each rank set for itself reads back its own id
        np.testing.assert_array_equal(out[v]["mark"], [0, 1])


def test_timing_rows_take_the_slowest_rank_and_count_the_forgotten_sharding(group):
    p = {"rows": 64, "cols": 8, "dtype": "float32", "seed": 2}
    rows = {r["variant"]: r for r in group.request("time", "ranks", p, PRESETS["smoke"], timeout=120)["rows"]}
    for r in rows.values():
        assert r["ranks"] == 2
        assert r["timing"]["device_done"]["median"] >= max(r["rank_device_done_median"]) * (1 - 1e-9)
    assert rows["by_rank"]["status"] == "ok" and rows["by_rank"]["check"]["wrong"] == 0
    bad = rows["same_data_every_rank"]
    assert bad["check"]["wrong"] == bad["check"]["checked"] > 0, "the hazard counts the data twice on every run"
    assert bad["check"]["worst"].startswith("rank ")


def _rank_row(done, wrong):
    t = {"first_call_s": 1.0, "metrics": {"bytes": 8e9, "bus_factor": 0.5}, "device_events": None,
         "samples": {"host_return": done, "device_done": done}}
    return {"variant": "out_of_place", "status": "wrong" if wrong else "ok", "timing": t,
            "check": {"checked": 2, "wrong": wrong, "worst": "bad" if wrong else ""}}


def test_merge_takes_the_slowest_rank_per_repeat_and_nccl_tests_bandwidths():
    m = merge_rows([_rank_row([1.0, 4.0, 2.0], 0), _rank_row([3.0, 1.0, 2.0], 1)], 2)
    assert m["timing"]["samples"]["device_done"] == [3.0, 4.0, 2.0]
    assert m["timing"]["device_done"]["median"] == 3.0
    assert m["status"] == "wrong" and m["check"] == {"checked": 4, "wrong": 1, "worst": "rank 1: bad"}
    assert m["timing"]["metrics"] == {"bytes": 8e9, "bus_factor": 0.5, "algbw_GBps": 8 / 3, "busbw_GBps": 4 / 3}
    assert "slowest_rank" not in m["timing"]  # the default: other rank scenarios' rows as they were


def test_merge_takes_the_slowest_ranks_host_loop_per_repeat_where_every_rank_has_one_per_repeat():
    """--host-covariate's loop before each repeat (timing.host_loops): per repeat the slower rank's host, and none
    where a rank has none or another count (nothing pairs them with the repeats then)."""
    a, b = _rank_row([1.0, 4.0, 2.0], 0), _rank_row([3.0, 1.0, 2.0], 0)
    a["timing"]["host_loops"], b["timing"]["host_loops"] = [6e-5, 1.1e-4, 6e-5], [1e-4, 6e-5, 6.1e-5]
    assert merge_rows([a, b], 2)["timing"]["host_loops"] == [1e-4, 1.1e-4, 6.1e-5]
    assert a["timing"]["host_loops"] == [6e-5, 1.1e-4, 6e-5]  # the ranks' rows are left as they came
    b["timing"]["host_loops"] = [1e-4, 6e-5]
    assert "host_loops" not in merge_rows([a, b], 2)["timing"]
    del b["timing"]["host_loops"]
    assert "host_loops" not in merge_rows([a, b], 2)["timing"]


def test_merge_by_the_mean_over_ranks_keeps_the_slowest_beside_and_pools_it():
    from harness.results.model import ProcessTiming
    from harness.workers.processes import pool_timing

    m = merge_rows([_rank_row([1.0, 4.0, 2.0], 0), _rank_row([3.0, 2.0, 2.0], 0)], 2, "mean")
    assert m["timing"]["samples"]["device_done"] == [2.0, 3.0, 2.0]
    assert m["timing"]["device_done"]["median"] == 2.0 and m["timing"]["metrics"]["algbw_GBps"] == 4.0
    assert m["timing"]["slowest_rank_samples"]["device_done"] == [3.0, 4.0, 2.0]
    assert m["timing"]["slowest_rank"]["device_done"]["median"] == 3.0
    other = merge_rows([_rank_row([5.0], 0), _rank_row([7.0], 0)], 2, "mean")["timing"]
    for t in (m["timing"], other):
        t |= {"checked_repeats": 1, "wrong_repeats": 0, "worst": "", "stopped": "noise", "noise": None}
    pooled = pool_timing([ProcessTiming.from_dict(m["timing"]), ProcessTiming.from_dict(other)]).to_dict()
    assert pooled["slowest_rank_samples"]["device_done"] == [3.0, 4.0, 2.0, 7.0]
    # each process one vote (noise.row_median): the medians 3 and 7 of the slowest rank, 2 and 6 of the mean
    assert pooled["slowest_rank"]["device_done"]["median"] == 5.0 and pooled["device_done"]["median"] == 4.0


def test_bus_factors_are_nccl_tests():
    assert collectives.bus_factor("all_reduce", 4) == 1.5
    assert [collectives.bus_factor(op, 4) for op in ("all_gather", "reduce_scatter", "all_to_all")] == [0.75] * 3
    assert collectives.bus_factor("broadcast", 4) == collectives.bus_factor("reduce", 4) == 1.0
    p = {"op": "all_gather", "bytes": 4096, "dtype": "float32", "world_size": 4}
    assert collectives.nbytes(p) == 4 * 4096


@pytest.mark.parametrize("fw", ["torch", "jax", "cupy"])
def test_ranks_stop_repeating_together(fw):
    """A warm-up time and a time cap that each rank's own clock would reach after a different count:
    rank 0's answer, broadcast by the framework, makes every rank run the same warm-up calls and repeats
    (else merge_rows could not pair them, and a collective would wait for a rank that stopped)."""
    backend_or_skip(fw)
    cfg = TimingConfig(warmup=0, warmup_s=0.2, min_repeats=3, max_repeats=10_000, min_time_s=0.0, max_wall_s=0.3,
                       max_noise=0.0)
    g = RankGroup(fw, 2)
    try:
        assert g.request("hello", timeout=120)["available"]
        answers = g._ask(Request.make("time", fw, "ranks", {"rows": 4, "cols": 2, "dtype": "float32", "seed": 0,
                                                           "world_size": 2}, cfg, False), 120)
    finally:
        g.close()
    for per_variant in zip(*(a["rows"] for a in answers)):
        counts = {len(r["timing"]["samples"]["device_done"]) for r in per_variant if "timing" in r}
        stops = {r["timing"]["stopped"] for r in per_variant if "timing" in r}
        assert len(counts) == 1 and stops == {"time_cap"}, (per_variant[0]["variant"], counts, stops)


@pytest.mark.parametrize("kind,status,words", [("crash", "crashed", "rank 1: torch rank died of SIGABRT"),
                                               ("hang", "timeout", "did not answer within 8 s (group killed)"),
                                               ("raise", "error", "rank 1: InjectedFault")])
def test_a_failing_rank_ends_its_whole_group(monkeypatch, kind, status, words):
    backend_or_skip("torch")
    monkeypatch.setenv(faults.ENV, f"ranks:torch:{kind}:equiv")
    monkeypatch.setenv(FAULT_RANK_ENV, "1")
    others = set(rank_children())  # a module-scoped group of the tests above may be alive
    g = RankGroup("torch", 2)
    assert g.request("hello", timeout=120)["available"]
    pids = g.pids
    with pytest.raises((WorkerLost, WorkerError)) as e:
        g.request("equiv", "ranks", {"rows": 4, "cols": 2, "dtype": "float32", "seed": 0}, timeout=8)
    assert e.value.status == status and words in str(e.value)
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids), "a rank outlived its group"
    assert set(rank_children()) == others
    monkeypatch.delenv(faults.ENV)
    out = g.request("equiv", "ranks", {"rows": 4, "cols": 2, "dtype": "float32", "seed": 0}, timeout=60)
    assert set(g.pids).isdisjoint(pids), "the next request gets a fresh group"
    np.testing.assert_array_equal(out["by_rank"]["mark"], [0, 1])
    g.close()
    assert set(rank_children()) == others


def test_a_peers_error_that_comes_before_a_ranks_death_shows_is_told_as_the_death(monkeypatch):
    """On a loaded host rank 0's failed collective answered before rank 1's SIGABRT showed (make test, 2026-12-07):
    the group said "error" for what was a crash. The death, seen within the grace, is the cause."""
    import multiprocessing
    import signal as sig

    from harness.workers import ranks
    from harness.workers.protocol import Reply

    class Proc:  # rank 1 dies a moment after rank 0's error has arrived
        def __init__(self, pid, dies_at):
            self.pid, self.dies_at = pid, dies_at

        def poll(self):
            return -sig.SIGABRT if self.dies_at is not None and time.monotonic() >= self.dies_at else None

        def wait(self, timeout=None):
            return self.poll()

    monkeypatch.setattr(ranks.os, "killpg", lambda pid, s: None)
    g = RankGroup("torch", 2)
    parent0, child0 = multiprocessing.Pipe()
    parent1, _child1 = multiprocessing.Pipe()
    g._procs = [Proc(10 ** 7, None), Proc(10 ** 7 + 1, time.monotonic() + 0.3)]
    g._conns = [parent0, parent1]
    child0.send(Reply(False, status="error", error="RuntimeError: Connection closed by peer").to_dict())
    with pytest.raises(WorkerLost) as e:
        g._ask(Request("equiv", "torch"), timeout=5)
    assert e.value.status == "crashed" and "rank 1" in str(e.value) and "SIGABRT" in str(e.value)
    assert "Connection closed by peer" in str(e.value)  # the peer's error, kept after the death


def test_a_groups_own_fault_rank_decides_which_rank_gets_its_fault(monkeypatch):
    # An interleaved regress gives the candidate's groups TRIPTYCH_FAULT and TRIPTYCH_FAULT_RANK of their own
    # (--candidate-env): the group's own rank wins over this process's.
    from harness.workers import ranks

    seen = []

    class Exited:  # a rank that exits at once: _start gives up after spawning every rank
        pid = 0

        def __init__(self, args, env=None, cwd=None, start_new_session=False):
            seen.append(env)

        def poll(self):
            return 1

    monkeypatch.setattr(ranks.subprocess, "Popen", Exited)
    monkeypatch.setattr(RankGroup, "kill", lambda self: setattr(self, "_procs", []))
    monkeypatch.setenv(FAULT_RANK_ENV, "0")
    monkeypatch.delenv(faults.ENV, raising=False)
    g = RankGroup("torch", 2)
    g.env = {faults.ENV: "ranks:torch:raise:equiv", FAULT_RANK_ENV: "1"}
    with pytest.raises(WorkerLost):
        g._start()
    assert [faults.ENV in e for e in seen] == [False, True]


def test_params_for_another_world_size_are_refused():
    g = RankGroup("torch", 2)
    g._procs = [object()]  # started, as far as request() can tell: nothing is spawned
    with pytest.raises(WorkerError, match="world size 3"):
        g.request("equiv", "ranks", {"rows": 4, "cols": 2, "dtype": "float32", "seed": 0, "world_size": 3})
    g._procs = []


def test_world_size_must_be_a_positive_count():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "harness", "compare", "--world-size", "0"], capture_output=True,
                       text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent)
    assert p.returncode == 2 and "--world-size" in p.stderr and p.stderr.strip().count("\n") == 0


def test_reading_the_receive_buffer_before_the_wait_is_caught():
    """gloo on the CPU: the message is rarely there before the wait; the hazard's runs count as wrong."""
    backend_or_skip("torch")
    os.environ[R.WORLD_SIZE_ENV] = "2"
    g = RankGroup("torch", 2)
    try:
        rows = {r["variant"]: r for r in g.request("time", "point_to_point", {"count": 1 << 16, "dtype": "float32",
                                                                              "seed": 4}, PRESETS["smoke"], timeout=120)["rows"]}
    finally:
        g.close()
    assert rows["blocking"]["check"]["wrong"] == rows["nonblocking"]["check"]["wrong"] == 0
    hazard = rows["read_before_wait"]["check"]
    repeats = len(rows["read_before_wait"]["timing"]["samples"]["device_done"])
    sampled = sum(sampled_repeat(n) or n == repeats for n in range(1, repeats + 1))  # timing.sampled, and the last
    assert hazard["checked"] == 2 * sampled and hazard["wrong"] > 0, hazard  # the sample's repeats of both ranks


def test_each_timing_process_of_a_rank_scenario_is_a_group_of_its_own():
    """The between-process noise of a rank row comes from processes, not from repeats in the same ones:
    as many timing processes of groups as the runner has, none sharing a process; a scenario without ranks
    gets the runner's own timing processes back; close() leaves no rank behind."""
    from harness.workers.ranks import Groups

    backend_or_skip("torch")
    groups = Groups(["torch"], 2, timeout_s=120)
    workers = [{"torch": object()}, {"torch": object()}]
    try:
        assert groups.for_scenario(get("sync_points"), workers, ["torch"], {})[0] is workers
        procs, available, env = groups.for_scenario(get("ranks"), workers, ["torch"], {})
        assert available == ["torch"] and env["torch"]["available"] and len(procs) == 2
        pids = [set(proc["torch"].pids) for proc in procs]
        assert all(len(p) == 2 for p in pids) and not pids[0] & pids[1]
        assert groups.for_scenario(get("collectives"), workers, ["torch"], {})[0] is procs  # started once
    finally:
        groups.close()
    assert not set().union(*pids) & set(rank_children())


def test_a_framework_is_lost_if_any_group_fails_and_its_other_groups_are_closed(monkeypatch):
    """Two frameworks x two timing processes, JAX's second group failing to start: JAX is unavailable with
    that group's reason, torch runs, and JAX's first group is closed at once (it would hold its GPU)."""
    from harness.workers.ranks import Groups

    groups = Groups(["torch", "jax"], 2, timeout_s=1)
    closed: list[str] = []
    monkeypatch.setattr(RankGroup, "close", lambda self, grace=10.0: closed.append(self.fw))
    ok = {"available": True, "why": "", "env": {}, "on_gpu": False}

    def hello(g):
        second = g is groups.groups[1]["jax"]
        return dict(ok, available=not second, why="rank 1: NCCL failed" if second else "")

    monkeypatch.setattr(groups, "_hello", hello)
    procs, available, env = groups.for_scenario(get("ranks"), [{}, {}], ["torch", "jax"], {})
    assert available == ["torch"] and env["jax"]["why"] == "rank 1: NCCL failed" and env["torch"]["available"]
    assert [set(p) for p in procs] == [{"torch", "jax"}] * 2 and sorted(closed) == ["jax", "jax"]


def test_the_runs_groups_close_at_once_each_with_its_grace(monkeypatch):
    """Groups.close: a group whose ranks are slow to leave (CuPy's rank 0 waited out its grace at exit) costs
    the run its grace once, not once a group: every group's close is under way before any ends."""
    import threading

    from harness.workers.ranks import Groups

    groups = Groups(["torch", "jax"], 2, timeout_s=1)
    groups.groups = [{"torch": RankGroup("torch", 2), "jax": RankGroup("jax", 2)} for _ in range(2)]
    together, graces = threading.Barrier(4, timeout=5), []

    def close(self, grace=10.0):
        graces.append(grace)
        together.wait()  # a BrokenBarrierError, raised here, where one close waits for another to end first

    monkeypatch.setattr(RankGroup, "close", close)
    groups.close(3.0)
    assert graces == [3.0] * 4


def test_leaving_a_cupy_group_stops_rank_0s_store_server(monkeypatch):
    """cupyx.distributed's rank 0 serves its TCP store from a child process that CuPy does not stop at exit:
    leave() stops it, or the rank's exit would wait for it until the harness kills the rank."""
    from harness.backends import dist, nccl

    stopped = []

    class Store:
        def stop(self):
            stopped.append(True)

    class Comm:
        _store = Store()

    monkeypatch.setitem(nccl._COMM, "cupy", Comm())
    dist.leave("cupy")
    assert stopped == [True]
    monkeypatch.setitem(nccl._COMM, "cupy", object())  # a rank without a store (CuPy's own change): nothing to stop
    dist.leave("cupy")


def test_free_ports_never_hands_out_a_port_twice():
    """Groups start side by side and their ranks bind the ports seconds later: a port given once is
    not given again by this process."""
    from harness.workers.ranks import free_ports

    got = [p for _ in range(300) for p in free_ports(3)]
    assert len(set(got)) == len(got) == 900
