"""The collectives' raw NCCL floor (harness/backends/nccl_floor.py): measured by the CuPy ranks, kept in
the machine ceilings under scenarios/collectives.floor_key, turned into the rows' floor_s and
pct_of_floor by the runner. On the CPU: NCCL's calls and the timing loop against a fake communicator
and a fake clock, and the bookkeeping around them; on a GPU (-m gpu): the real thing at world size 1."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness.report import html as report_html
from harness.run import runner
from harness.backends import nccl_floor
from harness.results.model import Result, Row, ScenarioResult
from harness.run.options import CompareOptions
from harness.workers.ranks import RankGroup, Workers, merge_ceilings
from harness.workers.worker import WorkerError
from scenarios import collectives as C
from scenarios import get
from tests.conftest import gpu_backend_or_skip
from tests.report_fixture import fake_doc, ok_row

MiB = 1 << 20


def point(op: str, nbytes: int = 64 << 10, n: int = 4) -> dict:
    return {"op": op, "bytes": nbytes, "dtype": "float32", "world_size": n, "label": f"{op} {nbytes >> 10} KiB"}


# ------------------------------------------------------------------------------------ fakes (numpy-backed)

class FakeNccl:
    NCCL_FLOAT32, NCCL_FLOAT64, NCCL_SUM = 7, 8, 0

    def __init__(self, log: list, version: int = 22000) -> None:
        self.log, self.version = log, version

    def get_version(self) -> int:
        return self.version

    def groupStart(self) -> None:  # noqa: N802 - NCCL's spelling
        self.log.append(("groupStart",))

    def groupEnd(self) -> None:  # noqa: N802
        self.log.append(("groupEnd",))


class FakeComm:
    """A communicator of n ranks that records every call and spends 1 µs per KiB of the call's
    send count on a fake clock (the one the fake CUDA events read)."""

    def __init__(self, n: int, log: list, clock: list) -> None:
        self.n, self.log, self.clock, self.barriers = n, log, clock, 0

    def size(self) -> int:
        return self.n

    def rank_id(self) -> int:
        return 1

    def barrier(self) -> None:
        self.barriers += 1

    def __getattr__(self, name: str):
        if name.startswith("_"):  # no cupyx NCCLBackend around it: this is the raw communicator
            raise AttributeError(name)

        def call(*args):
            self.log.append((name, *args))
            self.clock[0] += (args[1] if name in ("send", "recv") else args[2]) * 4 / 1024 * 1e-6
        return call


def fake_cupy(clock: list):
    class Arr:
        def __init__(self, n: int, dtype: str) -> None:
            self.a = np.zeros(n, dtype)
            self.size, self.itemsize, self.dtype = self.a.size, self.a.itemsize, self.a.dtype
            self.data = SimpleNamespace(ptr=self.a.ctypes.data)

    class Event:
        def record(self, stream=None) -> None:
            self.t = clock[0]

        def synchronize(self) -> None:
            pass

    cuda = SimpleNamespace(Stream=lambda non_blocking=False: SimpleNamespace(ptr=99, synchronize=lambda: None),
                           Event=Event, get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
                           Device=lambda: SimpleNamespace(synchronize=lambda: None))
    pool = SimpleNamespace(free_all_blocks=lambda: None)
    return SimpleNamespace(cuda=cuda, zeros=Arr, get_default_memory_pool=lambda: pool)


def measured(points: list[dict], n: int = 4, version: int = 22000):
    log, clock = [], [0.0]
    comm = FakeComm(n, log, clock)
    got = nccl_floor.measure(fake_cupy(clock), points, comm=comm, nccl=FakeNccl(log, version), reps=3,
                             clock=lambda: clock[0])
    return got, log, comm


# ------------------------------------------------------------------------------------ CPU tests

def test_each_operation_is_nccls_own_call_on_nccl_tests_buffers():
    got, log, comm = measured([point(op) for op in C.OPS])
    c, k = C.count(point("all_reduce")), C.CALLS  # 16384 float32 per rank; 20 calls a sample
    calls: dict = {}
    for entry in log:
        calls.setdefault(entry[0], []).append(entry)
    samples = 4  # warm-up + 3 repeats, each k calls, out of place then in place
    out, inp = calls["allReduce"][0], calls["allReduce"][samples * k]
    assert out[3:] == (c, FakeNccl.NCCL_FLOAT32, FakeNccl.NCCL_SUM, 99) and out[1] != out[2]
    assert inp[3:] == out[3:] and inp[1] == inp[2]  # in place: one buffer
    assert len(calls["allReduce"]) == 2 * samples * k
    assert calls["broadcast"][0][3:] == (c, FakeNccl.NCCL_FLOAT32, 0, 99)  # root 0
    assert calls["reduce"][0][3:] == (c, FakeNccl.NCCL_FLOAT32, FakeNccl.NCCL_SUM, 0, 99)
    gather, gather_in = calls["allGather"][0], calls["allGather"][samples * k]
    assert gather[3] == gather_in[3] == c  # per rank: the receive buffer is n x c
    assert gather_in[1] == gather_in[2] + 1 * c * 4  # in place: rank 1's input is chunk 1 of the output
    scatter, scatter_in = calls["reduceScatter"][0], calls["reduceScatter"][samples * k]
    assert scatter[3] == scatter_in[3] == c // 4  # recvcount
    assert scatter_in[2] == scatter_in[1] + 1 * c // 4 * 4  # in place: the output is chunk 1 of the input
    sends = calls["send"]
    assert len(sends) == 4 * samples * k  # 4 peers; out of place only (NCCL has no in-place all_to_all)
    assert [e[2:4] for e in sends[:4]] == [(c // 4, FakeNccl.NCCL_FLOAT32)] * 4
    assert [e[4] for e in sends[:4]] == [0, 1, 2, 3]  # chunk j to rank j, at offset j x chunk
    assert [e[1] - sends[0][1] for e in sends[:4]] == [j * c // 4 * 4 for j in range(4)]
    assert log.count(("groupStart",)) == log.count(("groupEnd",)) == samples * k
    assert "all_to_all 64 KiB in place" in got["not_measured"]
    assert comm.barriers == 11 * samples  # every sample of every measured point and placement starts at one


def test_the_floor_is_the_median_of_the_timed_repeats_per_call_under_each_points_key():
    p = point("all_reduce", 1 * MiB)
    got, _, _ = measured([p, point("barrier")])
    per_call = C.count(p) * 4 / 1024 * 1e-6  # the fake communicator's time of one call
    assert got["ceilings"][C.floor_key(p)] == pytest.approx(per_call)  # a sample of 20 calls, divided by 20
    assert got["ceilings"][C.floor_key(p, in_place=True)] == pytest.approx(per_call)
    assert got["ceilings"]["nccl_ranks"] == 4
    assert "barrier" in got["not_measured"]["barrier 64 KiB"]
    assert not any("barrier" in k for k in got["ceilings"])


def test_all_to_all_without_send_recv_is_not_measured_and_says_so():
    got, log, _ = measured([point("all_to_all"), point("all_gather")], version=2604)
    assert "NOT measured" in got["not_measured"]["all_to_all 64 KiB"]
    assert not any(e[0] in ("send", "recv") for e in log)
    assert C.floor_key(point("all_gather")) in got["ceilings"]


def test_the_key_names_the_operation_the_size_and_the_world_size():
    keys = {C.floor_key(point(op, b, n)) for op in C.OPS for b in (4096, MiB) for n in (1, 2)}
    assert len(keys) == len(C.OPS) * 2 * 2
    assert C.floor_key(point("all_gather", MiB, 2)) == f"nccl_all_gather_{2 * MiB}B_2r_s"


def test_the_parent_keeps_the_mean_over_ranks_of_what_every_rank_measured():
    m = merge_ceilings([{"ceilings": {"a": 1.0, "b": 5.0, "c": 1.0}, "not_measured": {"x": "why"}},
                        {"ceilings": {"a": 3.0, "b": 2.0}, "not_measured": {}}])
    assert m == {"ceilings": {"a": 2.0, "b": 3.5}, "not_measured": {"x": "why"}}


def test_rows_get_pct_of_floor_from_the_measured_floor_and_none_without_it():
    scn, p = get("collectives"), point("all_reduce", MiB, 2)
    machine = {C.floor_key(p): 5e-4, C.floor_key(p, in_place=True): 4e-4}
    for variant, floor in (("out_of_place", 5e-4), ("in_place", 4e-4)):  # each column on its own placement's
        typed = Row.from_dict(ok_row("collectives", "torch", variant, 2e-3, 1e-5) | {"status": "ok"})
        runner.add_floor(scn, p, machine, typed)
        row = typed.to_dict()
        assert row["floor_s"] == floor and row["pct_of_floor"] == pytest.approx(100 * floor / 2e-3)
    for machine, q in (({"hbm_Bps": 1e12}, p), ({C.floor_key(p): 5e-4}, point("all_reduce", MiB, 4)),
                       ({C.floor_key(p): 5e-4}, point("barrier", MiB, 2))):
        typed = Row.from_dict(ok_row("collectives", "torch", "out_of_place", 2e-3, 1e-5))
        runner.add_floor(scn, q, machine, typed)
        bare = typed.to_dict()
        assert "floor_s" not in bare and "pct_of_floor" not in bare


class _UI:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def step(self, text: str) -> None:
        pass

    def note(self, text: str) -> None:
        self.notes.append(text)


class _Group:
    def __init__(self, answer) -> None:
        self.answer, self.asked = answer, []

    def request(self, op, *args, timeout=None, **fields):
        self.asked.append((op, args + tuple(fields.values())))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


OPTS = CompareOptions(scenarios=["collectives"], frameworks=["torch", "cupy", "jax"], size="full", examples=1, seed=0)


def _rank_ceilings(scn, points, processes, available, env, machine, ui):
    """Run.rank_ceilings of a run whose machine ceilings are machine (updated in place)."""
    run = runner.Run(OPTS, ui)
    run.machine = machine
    return run.rank_ceilings(scn, points, Workers(processes, available, env))


def test_the_ranks_floor_joins_the_machine_ceilings_and_says_what_it_lacks():
    scn, points, machine = get("collectives"), [point("all_reduce"), point("barrier")], {"hbm_Bps": 1e12}
    g = _Group({"ceilings": {C.floor_key(points[0]): 1e-4, "nccl_ranks": 4.0},
                "not_measured": {"barrier 64 KiB": "barrier moves no bytes: no floor"}})
    why = _rank_ceilings(scn, points, [{"cupy": g}], ["torch", "cupy"], {}, machine, _UI())
    assert g.asked == [("ceilings", (points,))]
    assert machine == {"hbm_Bps": 1e12, C.floor_key(points[0]): 1e-4, "nccl_ranks": 4.0}
    assert why == "barrier 64 KiB: barrier moves no bytes: no floor"


def test_without_cupy_ranks_the_floor_is_absent_with_its_reason_and_nothing_is_asked():
    scn, machine, ui = get("collectives"), {}, _UI()
    g = _Group(AssertionError("asked"))
    env = {"cupy": {"available": False, "why": "NCCL needs a CUDA GPU per rank"}}
    why = _rank_ceilings(scn, [point("all_reduce")], [{"cupy": g}], ["torch"], env, machine, ui)
    assert "NCCL needs a CUDA GPU per rank" in why and machine == {} and g.asked == []
    assert "not in this run" in _rank_ceilings(scn, [], [{}], ["torch"], {}, machine, ui)
    broken = _Group(WorkerError("rank 0: NcclError: unhandled cuda error"))
    why = _rank_ceilings(scn, [point("all_reduce")], [{"cupy": broken}], ["cupy"], {}, machine, ui)
    assert why.startswith("raw floor not measured: rank 0: NcclError") and machine == {} and ui.notes
    assert _rank_ceilings(get("ranks"), [], [{"cupy": g}], ["cupy"], {}, machine, ui) is None


def test_the_report_names_the_nccl_ceilings_and_the_missing_floors_reason():
    doc = fake_doc()
    doc["environment"]["machine"] |= {"nccl_all_reduce_4096B_1r_s": 1e-5, "nccl_ranks": 1.0}
    text = str(report_html._environment_blocks(Result.from_dict(doc), "r.json"))
    assert "raw NCCL at 1 rank(s): 1 collective × size points" in text
    doc["environment"]["machine"] = {"calibration": {}}
    assert "machine ceilings: not measured" in str(report_html._environment_blocks(Result.from_dict(doc), "r.json"))
    name, scn = next(iter(doc["scenarios"].items()))
    scn["floor_why"] = "no raw floor: it is measured by the CuPy ranks (NCCL), unavailable here (no GPU)"
    blocks = report_html._figures(name, ScenarioResult.from_dict(scn), ["torch"], Path("/nonexistent/r.json"), None, {})
    assert ("p", f"Floor: {scn['floor_why']}.") in blocks


# ------------------------------------------------------------------------------------ GPU

def _gpu_points() -> list[dict]:
    return [point(op, b, 1) | {"label": f"{op} {label}"} for op in C.OPS for b, label in C.GPU_SIZES]


@pytest.mark.gpu
def test_raw_nccl_at_world_size_1_on_a_gpu():
    b = gpu_backend_or_skip("cupy").load()
    from cupy.cuda import nccl

    comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)  # one rank: the lent one-GPU machine
    got = nccl_floor.measure(b.fw, _gpu_points(), comm=comm)["ceilings"]
    for p in _gpu_points():
        if p["op"] != "barrier":
            assert got[C.floor_key(p)] > 0, p["label"]
    big, small = point("all_reduce", 256 * MiB, 1), point("all_reduce", 4096, 1)
    algbw = C.nbytes(big) / got[C.floor_key(big)]
    # one rank: an out-of-place all_reduce is a device copy (read + write): tens of GB/s to a few TB/s
    assert 20e9 < algbw < 10e12, f"{algbw / 1e9:.0f} GB/s"
    assert got[C.floor_key(small)] < got[C.floor_key(big)]


@pytest.mark.gpu
def test_the_cupy_rank_group_measures_the_floor_on_a_gpu(monkeypatch):
    gpu_backend_or_skip("cupy")
    g = RankGroup("cupy", 1)
    try:
        assert g.request("hello", timeout=300)["available"]
        got = g.request("ceilings", points=[point("all_reduce", MiB, 1), point("barrier", MiB, 1)], timeout=300)
    finally:
        g.close()
    assert got["ceilings"][C.floor_key(point("all_reduce", MiB, 1))] > 0 and got["ceilings"]["nccl_ranks"] == 1
    assert list(got["not_measured"]) == ["barrier 1024 KiB"]
