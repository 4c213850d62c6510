"""A framework's worker as a group of WORLD_SIZE rank processes (the parent's side).

The parent picks free ports, starts `python -m harness.workers.rank_main` once per rank with torchrun's
environment contract (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; each framework's own
rendezvous on ports of its own, as its backend declares them; NCCL_NVLS_ENABLE=0), and talks to every rank over
an authenticated local socket whose address and key travel in the environment. Each request goes
to every rank; the answers are gathered: outputs stacked along a new first axis (rank), and a
timing row's time per repeat is the slowest rank's, or the mean over ranks where the scenario says so
(Scenario.rank_time "mean": nccl-tests' -a 1), the slowest rank's then kept beside it (every rank
runs a barrier before each repeat, untimed, so the repeats start together). The ranks repeat under the run's stopping rule as one: after
each repeat rank 0's answer is broadcast (harness/backends/dist.py agree_stop), so every rank runs the
same repeats. The interface is worker.py's: request() / close().

A rank that dies, hangs or raises ends its whole group (the others may be waiting for it inside a
collective): every rank process is killed by its id, the error names the rank and why, and the
next request starts a fresh group. $TRIPTYCH_FAULT_RANK limits a planted $TRIPTYCH_FAULT to one rank.
"""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from multiprocessing.connection import Listener, wait
from typing import Any, NamedTuple

import numpy as np

from harness.workers import protocol
from harness.backends import rendezvous_env, rendezvous_ports
from harness.workers.protocol import Hello, Progress, Request, WorkerError, WorkerLost, died
from harness.workers.rank_main import KEY_ENV, PARENT_ENV
from harness.backends.base import RankCeilings
from harness.results.model import CLOCKS, Json, Stats
from harness.workers.worker import Handle
from scenarios import get as get_scenario

FAULT_RANK_ENV = "TRIPTYCH_FAULT_RANK"
WORLD_SIZE_ENV = "TRIPTYCH_WORLD_SIZE"  # read by scenarios/_ranks.py
START_TIMEOUT_S = 300.0  # importing a framework and joining its group


_HANDED_OUT: set[int] = set()  # ports given to a group of this process: its ranks bind them only later
_PORTS_LOCK = threading.Lock()


def free_ports(n: int) -> list[int]:
    """n free ports, none handed out before in this process (groups start side by side, and a port
    is free again between this call and the rank's bind)."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    with _PORTS_LOCK:
        try:
            while len(ports) < n:
                socks.append(socket.socket())
                socks[-1].bind(("127.0.0.1", 0))
                if (port := socks[-1].getsockname()[1]) not in _HANDED_OUT:
                    ports.append(port)
            _HANDED_OUT.update(ports)
            return ports
        finally:
            for s in socks:
                s.close()


def rank_env(rank: int, world_size: int, ports: list[int]) -> dict[str, str]:
    """torchrun's contract for one rank on this machine (ports[0] is MASTER_PORT), plus every framework's own
    rendezvous on the ports after it (backends.rendezvous_env)."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ports[0]),
            **rendezvous_env("127.0.0.1", ports[1:]), "NCCL_NVLS_ENABLE": "0",
            # as torchrun does for several ranks on one machine: no thread oversubscription
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


DEATH_GRACE_S = 1.0  # how long a rank's error waits for a peer's death to show, which would be its cause


class RankGroup(Handle):
    # The interpreter, working folder and extra environment of the ranks: this harness's by default,
    # another code tree's or interpreter's in an interleaved regress (harness/run/interleave.py).
    python: str = sys.executable
    cwd: str | None = None
    env: dict[str, str] = {}
    rank_main: str = "harness.workers.rank_main"  # the module each rank runs (`python -m`), in that tree

    def __init__(self, fw: str, world_size: int) -> None:
        self.fw, self.world_size = fw, world_size
        self._procs: list[subprocess.Popen] = []
        self._conns: list[Any] = []
        self._hello: Hello | None = None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def _start(self) -> None:
        key = secrets.token_bytes(32)
        listener = Listener(("127.0.0.1", 0), authkey=key)
        ports = free_ports(1 + rendezvous_ports())
        inherited = os.environ | self.env  # a side's own TRIPTYCH_FAULT_RANK (interleaved regress) wins
        fault_rank = inherited.get(FAULT_RANK_ENV)
        for r in range(self.world_size):
            env = inherited | rank_env(r, self.world_size, ports) | {
                PARENT_ENV: f"{listener.address[0]}:{listener.address[1]}", KEY_ENV: key.hex()}
            if fault_rank is not None and fault_rank != str(r):
                env.pop("TRIPTYCH_FAULT", None)
            self._procs.append(subprocess.Popen([self.python, "-m", self.rank_main, "--framework", self.fw],
                                                env=env, cwd=self.cwd, start_new_session=True))
        by_rank: dict[int, Any] = {}

        def accept() -> None:
            try:
                while len(by_rank) < self.world_size:
                    conn = listener.accept()
                    by_rank[conn.recv()[1]] = conn
            except OSError:  # closed below: a rank died before it called back
                pass

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while t.is_alive():
                t.join(0.1)
                self._raise_if_dead()
                if time.monotonic() > deadline:
                    self.kill()
                    raise WorkerLost(f"{self.fw} ranks did not call back within {START_TIMEOUT_S:g} s (killed)",
                                     "timeout")
        finally:
            listener.close()
        self._conns = [by_rank[r] for r in range(self.world_size)]
        infos = self._ask(Request("hello", self.fw), START_TIMEOUT_S)
        self._hello = infos[0] | {"pids": self.pids, "world_size": self.world_size}
        lost = next((f"rank {r}: {i['why']}" for r, i in enumerate(infos) if not i["available"]), None)
        if lost:
            self._hello |= {"available": False, "why": lost.split(": ", 1)[1]}

    def _raise_if_dead(self, grace: float = 0.0, besides: str = "") -> None:
        """WorkerLost ("crashed") where a rank has ended, looking for up to `grace` seconds; `besides`: what a
        peer said meanwhile, kept after the death."""
        end = time.monotonic() + grace
        while True:
            for r, p in enumerate(self._procs):
                code = p.poll()
                if code is not None:
                    self.kill()
                    raise WorkerLost(f"rank {r}: " + died(self.fw, code).replace("worker", "rank") + besides,
                                     "crashed")
            if time.monotonic() >= end:
                return
            time.sleep(0.02)

    def _ask(self, req: Request, timeout: float | None) -> list[Any]:
        for c in self._conns:
            c.send(req.to_dict())
        answers: dict[int, Any] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(answers) < self.world_size:
            pending = [c for r, c in enumerate(self._conns) if r not in answers]
            for c in wait(pending, timeout=0.1):
                r = self._conns.index(c)
                try:
                    msg = protocol.receive(c)
                except (EOFError, OSError):
                    self._procs[r].wait(5)
                    self._raise_if_dead()
                    continue
                if isinstance(msg, str):  # a progress note: the group reports its own
                    continue
                if msg.ok:
                    answers[r] = msg.value
                    continue
                # a rank that died fails its peers' collective first, and their error can come before the death
                # shows: the death is the cause, and is said so (a loaded host took longer than the peer's error)
                self._raise_if_dead(DEATH_GRACE_S, f" (then rank {r}: {msg.error})")
                self.kill()  # the others may wait for this rank inside a collective
                msg.result(f"rank {r}: ")
            self._raise_if_dead()
            if deadline is not None and time.monotonic() > deadline:
                late = [r for r in range(self.world_size) if r not in answers]
                self.kill()
                raise WorkerLost(f"{self.fw} rank(s) {', '.join(map(str, late))} did not answer within "
                                 f"{timeout:g} s (group killed)", "timeout")
        return [answers[r] for r in range(self.world_size)]

    def ask(self, req: Request, timeout: float | None = None, progress: Progress | None = None,
            turn: Any = None) -> Any:
        if turn is not None:  # its ranks time together, agreeing among themselves (harness/backends/dist.py)
            raise WorkerError("a rank group's requests take no turns with another's")
        if not self._procs:
            self._start()
        if req.op == "hello":
            return self._hello
        if req.op == "ceilings":  # a rank scenario's points, each rank measuring with the others
            points = tuple(p | {"world_size": self.world_size} for p in req.points)
            return merge_ceilings(self._ask(replace(req, points=points), timeout))
        if req.op not in ("equiv", "time"):
            raise WorkerError(f"a rank group serves hello, equiv, time and ceilings, not {req.op}")
        params = dict(req.params or {})
        if params.setdefault("world_size", self.world_size) != self.world_size:
            raise WorkerError(f"params are for world size {params['world_size']}, the group has {self.world_size}")
        req = replace(req, params=params)
        if progress is not None:
            progress(f"{self.world_size} ranks")
        if req.op == "equiv":
            outs = self._ask(req, timeout)
            return {v: {k: np.stack([o[v][k] for o in outs]) for k in outs[0][v]} for v in outs[0]}

        rank_time = get_scenario(str(req.scenario)).rank_time
        answers = self._ask(req, timeout)
        rows = [merge_rows(list(per_variant), self.world_size, rank_time)
                for per_variant in zip(*(a["rows"] for a in answers))]
        samples = [a["sample"] for a in answers]  # each rank's baseline outputs, stacked by rank
        sample = None if any(s is None for s in samples) else {k: np.stack([s[k] for s in samples]) for k in samples[0]}
        return {"rows": rows, "sample": sample}

    def kill(self) -> None:
        for c in self._conns:
            c.close()
        for p in self._procs:
            try:  # the rank's whole session: what it started (a framework's rendezvous server) dies with it
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)
        self._procs, self._conns, self._hello = [], [], None

    def close(self, grace: float = 10.0) -> None:
        """Ask every rank to leave its group, wait up to `grace` seconds for all of them together (a run
        being stopped gives little: a busy rank does not listen), then kill what is left."""
        for c in self._conns:
            try:
                c.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + grace
        for p in self._procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.kill()


def _per_repeat(rows: list[Json], clock: str, how: str) -> tuple[Stats, list[float]] | None:
    """Per repeat, the slowest rank's time ("slowest") or the mean over ranks ("mean")."""
    samples = [r["timing"]["samples"].get(clock) for r in rows]
    if any(s is None for s in samples):
        return None
    a = np.asarray(samples, dtype=np.float64)
    per = (np.max(a, axis=0) if how == "slowest" else np.mean(a, axis=0)).tolist()
    return Stats.of(per), per


def merge_rows(rows: list[Json], world_size: int, rank_time: str = "slowest") -> Json:
    """One row from every rank's row of a variant: per repeat, the slowest rank's time, or with
    rank_time "mean" the mean over ranks (nccl-tests' default) and the slowest rank's beside it in
    timing["slowest_rank"] (its samples in timing["slowest_rank_samples"])."""
    if rank_time not in ("slowest", "mean"):
        raise ValueError(f"rank_time is 'slowest' or 'mean', not {rank_time!r}")
    row = dict(rows[0])
    bad = next((r for r in rows if r["status"] not in ("ok", "skipped")), None)
    if bad is not None:
        row["status"] = bad["status"]
    if "timing" not in row:
        return row
    timing = dict(row["timing"])
    timing["samples"] = {}
    for clock in CLOCKS:
        got = _per_repeat(rows, clock, rank_time)
        timing[clock] = got[0].to_dict() if got else None
        if got:
            timing["samples"][clock] = got[1]
    if timing.get("kernel") is None:  # a rank whose traced runs failed says why for the row
        timing["kernel_why"] = next((r["timing"]["kernel_why"] for r in rows if r["timing"].get("kernel_why")), None)
        if timing["kernel_why"] is None:
            del timing["kernel_why"]
    if rank_time == "mean":
        timing["rank_time"] = "mean"
        slowest = {c: got for c in CLOCKS if (got := _per_repeat(rows, c, "slowest"))}
        timing["slowest_rank"] = {c: got[0].to_dict() for c, got in slowest.items()}
        timing["slowest_rank_samples"] = {c: got[1] for c, got in slowest.items()}
    timing["first_call_s"] = max(r["timing"]["first_call_s"] for r in rows)
    for loop in ("host_loop_s", "row_loop_s"):
        if all(r["timing"].get(loop) is not None for r in rows):
            timing[loop] = max(r["timing"][loop] for r in rows)  # the slowest rank's host
    # per repeat, likewise the slowest rank's host (under rank_time "mean" too: the covariate is the host's speed,
    # and the slowest rank's is the one a rank group waits on)
    beside = [r["timing"].get("host_loops") for r in rows]
    timing.pop("host_loops", None)
    if all(beside) and len({len(x) for x in beside}) == 1:
        timing["host_loops"] = [max(x) for x in zip(*beside)]
    metrics = dict(timing["metrics"])
    if "bytes" in metrics and "bus_factor" in metrics:  # nccl-tests' algbw and busbw, decimal GB/s
        algbw = metrics["bytes"] / timing["device_done"]["median"] / 1e9
        metrics |= {"algbw_GBps": algbw, "busbw_GBps": algbw * metrics["bus_factor"]}
    timing["metrics"] = metrics
    checks = [r["check"] for r in rows]
    worst = next((f"rank {i}: {c['worst']}" for i, c in enumerate(checks) if c["worst"]), "")
    row |= {"timing": timing, "ranks": world_size,
            "rank_device_done_median": [float(np.median(r["timing"]["samples"]["device_done"])) for r in rows],
            "check": checks[0] | {"checked": sum(c["checked"] for c in checks),
                                  "wrong": sum(c["wrong"] for c in checks), "worst": worst}}
    if all(r.get("host_syncs") is not None for r in rows):
        row["host_syncs"] = sum(r["host_syncs"] for r in rows)
    return row


def merge_ceilings(answers: list[RankCeilings]) -> RankCeilings:
    """Every rank's raw floors as one: per key the mean over ranks (as the collectives' rows, nccl-tests'
    -a 1), where every rank measured it; the reasons of what some rank did not measure."""
    keys = [k for k in answers[0]["ceilings"] if all(k in a["ceilings"] for a in answers)]
    return {"ceilings": {k: float(np.mean([float(a["ceilings"][k]) for a in answers])) for k in keys},
            "not_measured": {k: why for a in answers for k, why in a["not_measured"].items()}}


def default_world_size() -> int:
    """The number of GPUs (NCCL refuses two ranks on one), or 2 without one."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
        gpus = sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0
    except (OSError, subprocess.TimeoutExpired):
        gpus = 0
    return gpus or 2


class Workers(NamedTuple):
    """What runs a scenario: per timing process {framework: worker or rank group} (processes[0] also runs
    the equivalence), the frameworks available, and each framework's environment (what its hello said)."""
    processes: list[dict[str, Handle]]
    available: list[str]
    env: dict[str, Hello]


class Groups:
    """The runner's rank groups: for each of the runner's timing processes, one group per framework (a
    group is WORLD_SIZE processes), started side by side at the first scenario with ranks and closed
    with the run. Rank rows are timed once per timing process, as the single workers' rows are, each
    in a group of its own fresh processes: what differs between processes, such as where memory landed or how fast
    the host ran when they started, is resampled. Scenarios without ranks keep the single workers."""

    def __init__(self, frameworks: list[str], world_size: int | None, timeout_s: float) -> None:
        self.frameworks, self.timeout_s = frameworks, timeout_s
        self.world_size = world_size or default_world_size()
        os.environ[WORLD_SIZE_ENV] = str(self.world_size)  # the rank scenarios' params draw it
        self.groups: list[dict[str, RankGroup]] = []
        self.fw_env: dict[str, Hello] = {}
        self.available: list[str] = []
        self.hellos: list[dict[str, Hello]] = []  # per timing process {framework: its group's hello}

    def for_scenario(self, scn: Any, processes: list[dict[str, Handle]], available: list[str],
                     fw_env: dict[str, Hello]) -> Workers:
        """The runner's own timing processes, frameworks and environments for a scenario without ranks;
        for a rank scenario as many timing processes of rank groups as the runner has (processes[0] also
        runs the equivalence). A framework runs only if each of its groups started."""
        if not getattr(scn, "ranks", False):
            return Workers(processes, available, fw_env)
        if not self.groups:
            self.groups = [{fw: self.make_group(fw, i) for fw in self.frameworks} for i in range(len(processes))]
            every = [g for proc in self.groups for g in proc.values()]
            with ThreadPoolExecutor(len(every)) as pool:
                infos = iter(list(pool.map(self._hello, every)))
            per_process = self.hellos = [{fw: next(infos) for fw in proc} for proc in self.groups]
            self.fw_env = {fw: next((p[fw] for p in per_process if not p[fw]["available"]), per_process[0][fw])
                           for fw in self.frameworks}
            self.available = [fw for fw in self.frameworks if self.fw_env[fw]["available"]]
            for fw in set(self.frameworks) - set(self.available):  # the groups that did start give back their GPU
                for proc in self.groups:
                    proc[fw].close(1.0)
        return Workers(self.groups, self.available, self.fw_env)

    def make_group(self, fw: str, process: int) -> RankGroup:
        """The group of fw for timing process number process (a subclass picks another interpreter or tree)."""
        return RankGroup(fw, self.world_size)

    def _hello(self, g: RankGroup) -> Hello:
        try:
            return g.request("hello", timeout=self.timeout_s)
        except (WorkerError, WorkerLost) as e:
            return {"available": False, "why": f"failed to start {self.world_size} ranks: {e}", "env": {},
                    "on_gpu": False}

    def close(self, grace: float = 10.0) -> None:
        """Every group closed at once, each with its grace (RankGroup.close): a group whose ranks are slow to
        leave costs the run its grace once, not once a group."""
        groups = [g for proc in self.groups for g in proc.values()]
        with ThreadPoolExecutor(max(1, len(groups))) as ex:
            list(ex.map(lambda g: g.close(grace), groups))
