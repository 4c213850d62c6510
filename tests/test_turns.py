"""Two time requests that take turns call by call (harness/workers/turns.py): the coordinator alone with
threads, the wire (harness/workers/protocol.py), and real torch workers on the CPU, in this process and in
worker processes."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

from harness.measure import timing
from harness.workers import faults, protocol
from harness.workers.protocol import Request, Turn
from harness.workers.turns import Turns
from harness.workers.worker import LocalWorker, ProcessWorker
from tests.conftest import backend_or_skip


class Side:
    """A worker's side as the coordinator sees it: calls of variants, each followed by a turn; every call
    (and the set-up before the first) records its interval, so that overlaps between sides show."""

    def __init__(self, turns: Turns, j: int, plan: list[tuple[str, list[str | None]]], log: list, lock) -> None:
        self.turns, self.j, self.plan, self.log, self.lock = turns, j, plan, log, lock
        self.followed: list[tuple[str, str | None]] = []

    def _work(self, what: str) -> None:
        t0 = time.perf_counter()
        time.sleep(0.002)
        with self.lock:
            self.log.append((self.j, what, t0, time.perf_counter()))

    def run(self) -> None:
        if not self.turns.begin(self.j):
            return
        try:
            self._work("set-up")
            for variant, stops in self.plan:
                for own in stops:  # own: this side's answer after the call; the loop ends on the answer followed
                    self._work(variant)
                    got = self.turns.turn(self.j, variant, own)
                    self.followed.append((variant, got))
                    if got is not None:
                        break
        finally:
            self.turns.end(self.j)


def _run(plans: list[list[tuple[str, list[str | None]]]], first: int = 0) -> tuple[Turns, list[Side], list]:
    turns, log, lock = Turns(first), [], threading.Lock()
    sides = [Side(turns, j, plans[j], log, lock) for j in (0, 1)]
    threads = [threading.Thread(target=s.run) for s in sides]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "a side is stuck waiting for its turn"
    return turns, sides, log


def _no_overlap(log: list) -> None:
    """No interval of one side meets one of the other's: only the side holding the turn runs."""
    for a in log:
        for b in log:
            if a[0] != b[0]:
                assert a[3] <= b[2] or b[3] <= a[2], f"{a} overlaps {b}"


def test_two_sides_alternate_call_by_call_and_follow_the_first_answer_that_says_stop():
    """Side 0 would stop after its 3rd call, side 1 after its 5th: both stop after the 3rd, the answer the
    first side gave; the warm-up's answers likewise. Calls alternate 0, 1, 0, 1, ..., side 1's set-up waits
    for side 0's first turn, and nothing of one side runs while the other's call runs."""
    plans = [[("warm", [None, "noise"]), ("eager", [None, None, "time_cap", None, None])],
             [("warm", [None, None, "noise"]), ("eager", [None, None, None, None, "noise"])]]
    turns, sides, log = _run(plans)
    assert sides[0].followed == sides[1].followed == [("warm", None), ("warm", "noise"), ("eager", None),
                                                      ("eager", None), ("eager", "time_cap")]
    assert turns.paired and turns.shared == 5
    # a side's set-up and first call are one turn, then its calls one a turn
    assert [j for j, what, *_ in log] == [0, 0, 1, 1] + [0, 1] * 4
    assert log[2][1] == "set-up" and log[2][2] >= log[1][3]  # side 1 starts once side 0 handed the turn over
    _no_overlap(log)
    assert turns.waited_s[0] > 0 and turns.waited_s[1] > 0


def test_the_pairs_second_side_may_go_first():
    turns, sides, log = _run([[("v", [None, "noise"])], [("v", ["noise"])]], first=1)
    assert [j for j, *_ in log][:4] == [1, 1, 0, 0]
    assert sides[0].followed == sides[1].followed == [("v", "noise")]


def test_sides_on_different_variants_each_follow_their_own_answers_and_still_take_turns():
    """A side that skips a variant the other times: no shared answer could be right, so each follows its
    own from there, and the calls still alternate."""
    turns, sides, log = _run([[("a", [None, "noise"]), ("b", [None, None, "noise"])],
                              [("b", [None, None, "noise"])]])
    assert not turns.paired
    assert sides[0].followed == [("a", None), ("a", "noise"), ("b", None), ("b", None), ("b", "noise")]
    assert sides[1].followed == [("b", None), ("b", None), ("b", "noise")]
    _no_overlap(log)


def test_a_side_whose_request_ends_leaves_the_other_to_finish_alone():
    turns, sides, log = _run([[("v", ["noise"])], [("v", [None, None, None, "noise"])]])
    assert sides[0].followed == [("v", "noise")]
    # the first answer is shared ("noise"); side 1's loop ends there too: a shared stop ends both loops
    assert sides[1].followed == [("v", "noise")]
    turns, sides, log = _run([[], [("v", [None, None, "noise"])]])  # side 0 ends with no turn at all
    assert sides[1].followed == [("v", None), ("v", None), ("v", "noise")]
    assert [j for j, *_ in log] == [0, 1, 1, 1, 1]


def test_a_cancelled_pair_starts_no_side_and_frees_a_waiting_one():
    turns = Turns()
    started = []
    second = threading.Thread(target=lambda: started.append(turns.begin(1)))
    second.start()
    time.sleep(0.05)
    turns.cancel()
    second.join(5)
    assert started == [False]
    turns = Turns()
    assert turns.begin(0)
    got = []
    waiting = threading.Thread(target=lambda: got.append(turns.turn(0, "v", None)))
    waiting.start()
    time.sleep(0.05)
    turns.cancel()
    waiting.join(5)
    assert got == [None]  # its own answer: its worker is being closed


def test_taking_turns_is_on_the_wire_only_where_asked_and_a_turn_crosses_it_both_ways(monkeypatch):
    """An older tree's worker reads every key as a field: a request that takes no turns leaves the field off.
    In the serve loop, the handler's turn goes out as a Turn and the parent's {"go": ...} comes back as
    its answer; the wait is counted apart (Notes.waited_s)."""
    monkeypatch.delenv(faults.ENV, raising=False)
    plain = Request.make("time", "torch", "sync_points", {"steps": 4}, timing.preset("smoke"), False, seed=1)
    assert "turns" not in plain.to_dict()
    taking = Request.make("time", "torch", "sync_points", {"steps": 4}, timing.preset("smoke"), False, seed=1,
                          turns=True)
    wire = json.loads(json.dumps(taking.to_dict()))
    assert wire["turns"] is True and Request.from_dict(wire) == taking

    seen = {}

    def handle(req, notes):
        seen["answer"] = notes.turn("eager", None)
        seen["waited"] = notes.waited_s
        return "done"

    class Conn:
        def __init__(self) -> None:
            self.incoming, self.sent = [taking.to_dict(), {"go": "noise"}, None], []

        def recv(self):
            return self.incoming.pop(0)

        def send(self, msg) -> None:
            self.sent.append(msg)

    conn = Conn()
    protocol.serve(conn, "torch", handle)
    turn, reply = conn.sent
    assert protocol.receive(type("C", (), {"recv": lambda self: turn})()) == Turn("eager", None)
    assert seen["answer"] == "noise" and seen["waited"] > 0
    assert reply["reply"]["value"] == "done"


def _request_with_turns(worker, turn, scenario="launch_overhead", variants=("eager",)):
    from scenarios import get

    return worker.request("time", scenario, get(scenario).points("smoke")[0], timing.preset("smoke"), False, seed=3,
                          variants=variants, timeout=120, turn=turn)


def _interleaved(plan, on_time=lambda side, req, turn, cpu: None):
    """An interleaved run of torch on the CPU, both sides' workers in this process (their hellos can take
    turns); on_time(side name, request, turn, the CPU the worker was started with) hears each time request
    first."""
    import sys

    from harness.run import interleave
    from harness.run.interleave import Schedule, Side
    from tests.test_interleaved_regress import ROOT

    class Sided(LocalWorker):
        def __init__(self, fw, side, cpu=None):
            super().__init__(fw)
            self.side, self.cpu = side, cpu

        def ask(self, req, timeout=None, progress=None, turn=None):
            if req.op == "time":
                on_time(self.side.name, req, turn, self.cpu)
            return super().ask(req, timeout, progress, turn)

    sides = [Side("baseline", str(ROOT), sys.executable), Side("candidate", str(ROOT), sys.executable)]
    return interleave.run(Schedule(sides, ["torch"], 120.0, world_size=2, make_worker=Sided), plan)


@pytest.mark.parametrize("make", [LocalWorker, ProcessWorker], ids=["in this process", "worker process"])
def test_a_real_worker_hands_the_turn_over_after_its_calls_and_leaves_the_waits_out_of_its_times(make):
    """torch on the CPU: the worker hands the turn over at the end of its warm-up and after each repeat,
    follows the answer it gets back (here: go on past its own stop, and stop after the 6th repeat), and the
    0.1 s it waits for each turn is neither the row's wall time nor the request's."""
    backend_or_skip("torch")
    calls = []

    def turn(variant, stop):
        calls.append((variant, stop))
        time.sleep(0.1)
        if len(calls) == 1:
            return stop  # the warm-up's end ("noise": smoke has no warm-up by time)
        return "noise" if len(calls) == 7 else None

    w = make("torch")
    try:
        w.request("hello", timeout=120)  # started and torch imported: the bounds below are the request's own
        t0 = time.perf_counter()
        got = _request_with_turns(w, turn)
        elapsed = time.perf_counter() - t0
    finally:
        w.close()
    (row,) = [r for r in got["rows"] if r["variant"] == "eager"]
    t = row["timing"]
    waited = 0.1 * len(calls)
    assert calls[0] == ("eager", "noise") and all(v == "eager" for v, _ in calls)
    assert len(t["samples"]["device_done"]) == 6 and t["stopped"] == "noise"
    assert t["agree_s"] < waited / 10 and t["repeats_s"] < waited / 2  # the waits are in neither
    assert t["repeats_s"] <= t["loop_s"] <= t["phase_s"] <= row["wall_s"] <= t["served_s"]
    assert t["served_s"] <= elapsed - waited * 0.9


@pytest.mark.parametrize("turns", [True, False], ids=["call by call", "a point at a time"])
def test_an_interleaved_run_of_real_workers_takes_turns_and_both_sides_of_a_pair_run_the_same_repeats(turns):
    """An interleaved regress of torch on the CPU (workers in this process, whose hellos say they can take
    turns): with turns, each pair's two processes ran the same repeats of every row, as one answer said when
    to stop; the side files say how the run took turns. A point at a time (--turns point) says so too."""
    backend_or_skip("torch")
    from harness.run.interleave import Plan

    res = _interleaved(Plan(["launch_overhead", "sync_points"], "smoke", 3, pairs=2, max_pairs=2, turns=turns))
    assert [d["interleaved"]["turns"] for d in res.docs] == ["call" if turns else "point"] * 2
    counts = [{(s, r["variant"]): [p["n"] for p in r["timing"]["processes"]]
               for s, scn in d["scenarios"].items() for r in scn["rows"] if r.get("timing")} for d in res.docs]
    assert counts[0] and counts[0].keys() == counts[1].keys()
    if turns:
        assert counts[0] == counts[1]


@pytest.mark.parametrize("turns", [False, True], ids=["a point at a time", "call by call"])
def test_same_cpu_starts_both_sides_workers_of_a_framework_in_a_pair_on_one_cpu(turns):
    """--same-cpu: a pair's two workers of a framework are started with one CPU, the pairs with the run's
    CPUs in turn, taking turns or not; the side files say so. Without it, no worker is given a CPU."""
    import os

    backend_or_skip("torch")
    from harness.run.interleave import Plan

    for same_cpu in (True, False):
        asked = []
        res = _interleaved(Plan(["sync_points"], "smoke", 3, pairs=2, max_pairs=2, turns=turns, same_cpu=same_cpu),
                           lambda side, req, _turn, cpu: asked.append((side, cpu)))
        assert [d["interleaved"]["same_cpu"] for d in res.docs] == [same_cpu] * 2
        pairs = [asked[i:i + 2] for i in range(0, len(asked), 2)]
        assert len(pairs) == 2 and all({a[0] for a in p} == {"baseline", "candidate"} for p in pairs)
        if not same_cpu:
            assert {a[1] for a in asked} == {None}
            continue
        assert all(p[0][1] == p[1][1] is not None for p in pairs)  # both sides of a pair on one CPU
        if len(os.sched_getaffinity(0)) > 1:
            assert pairs[0][0][1] != pairs[1][0][1]  # the next pair, the next CPU
        assert [d["interleaved"]["turns"] for d in res.docs] == ["call" if turns else "point"] * 2


def test_the_pairs_take_the_cpus_in_turn_a_framework_after_another():
    from harness.run.interleave import pair_cpu

    fws = ["torch", "cupy", "jax"]
    got = [[pair_cpu(k, fw, fws, [4, 5, 6, 7]) for fw in fws] for k in range(3)]
    assert got == [[4, 5, 6], [7, 4, 5], [6, 7, 4]]
    assert pair_cpu(1, "cupy", ["cupy"], [2, 3]) == 3 and pair_cpu(0, "jax", fws, []) is None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="this platform cannot pin processes to CPUs")
def test_a_side_worker_on_one_cpu_has_every_thread_there_and_one_openmp_thread_unless_the_user_set_a_count(
        monkeypatch):
    """SideWorker(cpu=): the child pins itself before it imports anything, so every thread it has runs on the
    one CPU: the thread that watches its parent, started later, and none left behind by its imports. (A pin
    that came after the imports shows here where the user asks numpy's OpenBLAS for threads: it starts them
    at import, sized by the CPUs it may use then, so a late pin leaves them on every CPU.) OMP_NUM_THREADS is
    1 unless set (a pool sized to the machine crowds onto one CPU: on an H100, torch's 1 MiB h2d_pin_then_copy
    read 128 ms a call so, not 89 us; results/journal.md). Without a CPU, the worker gets this process's CPUs
    and no OpenMP count, even where a stray pin variable is set."""
    import contextlib
    import sys

    from harness.run.interleave import CPU_ENV, Side, SideWorker
    from tests.test_interleaved_regress import ROOT

    may = os.sched_getaffinity(0)
    cpu = max(may)

    def started(env, cpu):
        w = SideWorker("torch", Side("baseline", str(ROOT), sys.executable, env=env), cpu)
        try:
            w.request("hello", timeout=120)
            pid, pinned = w._proc.proc.pid, {}
            for t in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(ProcessLookupError):  # a thread that ended since
                    pinned[t] = os.sched_getaffinity(int(t))
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            return pinned, environ.get(b"OMP_NUM_THREADS")
        finally:
            w.close()

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    pinned, omp = started({}, cpu)
    assert len(pinned) > 1 and all(c == {cpu} for c in pinned.values()) and omp == b"1", pinned
    pinned, omp = started({"OMP_NUM_THREADS": "3"}, cpu)
    assert all(c == {cpu} for c in pinned.values()) and omp == b"3", pinned
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # empty: no count, as OpenMP reads it
    assert started({}, cpu)[1] == b"1"
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setenv(CPU_ENV, str(cpu))  # left over in this process's environment: no pin without a CPU
    pinned, omp = started({}, None)
    assert all(c == may for c in pinned.values()) and omp is None


def test_a_side_that_fails_while_taking_turns_leaves_the_other_to_finish_and_is_not_asked_again():
    """The candidate's request fails after two turns: the baseline's goes on alone, the run ends (no side
    waits for ever), the failure is the candidate's rows' status, and the next pair does not ask it again
    at that point."""
    backend_or_skip("torch")
    from harness.run.interleave import Plan
    from harness.workers.protocol import WorkerError

    asked = []

    def fails_midway(side, _req, turn, _cpu):
        asked.append(side)
        if side == "candidate":
            turn("eager", None)
            turn("eager", None)
            raise WorkerError("planted: failed after two turns")

    res = _interleaved(Plan(["launch_overhead"], "smoke", 3, pairs=2, max_pairs=2, turns=True), fails_midway)
    assert asked.count("candidate") == 1 and asked.count("baseline") == 2
    assert res.rows and all(r.verdict == "different" and "planted" in r.status for r in res.rows)
