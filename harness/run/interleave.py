"""Interleaved regress: baseline and candidate timed in one run, process pair by process pair.

A side is a code tree (a folder, or a git ref checked out into a temporary `git worktree`, removed
afterwards) run by a Python interpreter (this one by default): every worker process of a side is
started with the side's interpreter, in the side's tree (cwd and PYTHONPATH), with the side's extra
environment (e.g. a planted $TRIPTYCH_FAULT on the candidate alone), and serves this harness's
worker protocol (harness/workers/protocol.py: harness/workers/worker.py _serve, harness/workers/rank_main.py for rank groups)
from its own code: a side's tree must speak this tree's protocol.

Why in one run: on a shared cloud host the host's speed drifts at the scale of minutes, so two runs
at different times differ without any change of code. Here pair k is a baseline process and a
candidate process that time every point one after the other, in the order A-B for even k and B-A
for odd k (asv's interleaved rounds, A-B-B-A), so a drift that is linear over a pair's span cancels
in the mean over pairs, and what the host did during a pair hits both of its processes. Per row, the
per-process figure is the process's median of its repeats; the paired test is on the log ratios of
the pairs (harness/regress/regress.py judge_pairs). Rows whose verdict is unknown get more pairs (fresh
processes, the same A-B / B-A alternation; at each point only the frameworks with an unknown row there,
asked for those rows' variants alone)
until decided, --max-pairs or the time budget. The budget also ends the first pairs, between points, so
that a run inside a time-limited call ends and writes its files: the first pairs time every point two
pairs at a time, so that a budget too small for all of them leaves the later pairs short at some points
(their rows judged on fewer pairs), not points untimed.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from harness.workers import bytecode, point_cache, processes
from harness.run.options import STARTUP_TIMEOUT_S
from harness.workers.ranks import Groups, RankGroup
from harness.workers.turns import Turns
from harness.workers.protocol import Answer, Hello
from harness.workers.worker import Handle, ProcessWorker, WorkerError, WorkerLost
from harness.measure.noise import split
from harness.measure.timing import OVERRIDABLE_OLDER, OVERRIDE_ENV, preset
from harness.regress import forecast
from harness.regress.regress import FAILED, Paired, judge_pairs, process_medians
from harness.results.model import Json, Row
from harness.run import stops
from harness.run.runner import CompareOptions, document
from harness.run.stops import Stopped
from harness.workers.cpus import allowed, not_placed
from harness.workers.ranks import WORLD_SIZE_ENV, default_world_size
from scenarios import get as get_scenario
from scenarios.spec import Params

ROOT = Path(__file__).resolve().parent.parent.parent
PARENT_ENV, KEY_ENV, CPU_ENV = "TRIPTYCH_SIDE_PARENT", "TRIPTYCH_SIDE_KEY", "TRIPTYCH_SIDE_CPU"
# The child: on its pair's one CPU where it has one (--same-cpu), before any import can start a thread, so
# that every thread it will have runs there (Linux pins a thread; a new one inherits its starter's CPUs); then
# keep compiled modules in the run's folder where it names one (harness/workers/bytecode.py keep); then call
# back to the parent and serve the side's own worker loop ({workers}: _workers below). This code is the
# parent's, so an older tree's worker is pinned, and keeps its compiled modules, the same way.
_CHILD = ("import os, sys\n"
          "cpu = os.environ.pop('" + CPU_ENV + "', '')\n"
          "if cpu:\n"
          "    os.sched_setaffinity(0, {{int(cpu)}})\n"
          "pyc = os.environ.get('" + bytecode.ENV + "', '')\n"
          "if pyc and pyc != '" + bytecode.OFF + "':\n"
          "    try:\n"
          "        os.makedirs(pyc, exist_ok=True)\n"
          "        sys.pycache_prefix, sys.dont_write_bytecode = pyc, False\n"
          "    except OSError:\n"
          "        pass\n"
          "from multiprocessing.connection import Client\n"
          "host, port = os.environ['" + PARENT_ENV + "'].rsplit(':', 1)\n"
          "conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ.pop('" + KEY_ENV + "')))\n"
          "from {workers}.worker import _serve\n"
          "_serve(conn, sys.argv[1])\n")


class SideError(ValueError):
    """A side cannot be set up (no such folder, ref or interpreter); str(self) is the reason."""


@dataclass
class Side:
    name: str  # baseline | candidate
    tree: str  # an absolute folder holding harness/
    python: str
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""  # what the user named: the folder, the ref (and its commit), the interpreter
    points: str = ""  # the side's point cache folder while a run holds one (side_caches)

    def environ(self) -> dict[str, str]:
        """What the side's processes get on top of this process's environment."""
        return ({"PYTHONPATH": self.tree, point_cache.COMPILE_ENV: ""}  # no compiled programs shared (side_caches)
                | ({point_cache.ENV: self.points} if self.points else {}) | self.env)


@contextlib.contextmanager
def side_caches(sides: list[Side]) -> Iterator[None]:
    """A point cache folder for each side for the block's length (harness/workers/point_cache.py): a side's
    processes make a point's host inputs and reference once and read them back, as a compare run's do.
    One folder a side: a candidate whose scenarios draw other inputs never reads the baseline's. No
    compilation cache: one program compiled for a side would carry one autotuning draw into all of its
    processes, a difference between the sides that no number of pairs averages out (docs/regress.md)."""
    for side in sides:
        side.points = tempfile.mkdtemp(prefix=f"triptych-points-{side.name}-")
    try:
        yield
    finally:
        for side in sides:
            shutil.rmtree(side.points, ignore_errors=True)
            side.points = ""


PROTOCOL = "harness/workers/protocol.py"  # the worker protocol both sides speak: this harness drives the side's workers
# Where a side's worker modules (worker, protocol, rank_main) live: harness/workers/, or harness/ in a tree from
# before the stage packages, whose workers speak the same protocol.
LAYOUTS = ("harness/workers", "harness")


def _workers(tree: str | Path) -> str:
    """The dotted package of a side's worker modules: harness.workers, or harness where only the flat
    layout's protocol.py is there (tree() has refused a tree with neither)."""
    flat = not (Path(tree) / LAYOUTS[0] / "protocol.py").is_file() and (Path(tree) / LAYOUTS[1] / "protocol.py").is_file()
    return LAYOUTS[flat].replace("/", ".")


def _older(spec: str) -> str:
    return (f"{spec}: its harness predates the typed worker protocol ({PROTOCOL}), so this harness cannot drive "
            f"its workers; time it on its own and compare the result files (regress --baseline A.json "
            f"--candidate B.json)")


def _git(*args: str, cwd: Path = ROOT) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SideError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"git {args[0]} failed")
    return out.stdout.strip()


def _has(repo: Path, sha: str, path: str) -> bool:
    try:
        _git("cat-file", "-e", f"{sha}:{path}", cwd=repo)
    except SideError:
        return False
    return True


@contextlib.contextmanager
def tree(spec: str | None, repo: Path = ROOT) -> Iterator[tuple[str, str]]:
    """(folder, label) of a side's code: this checkout (None), a folder, or a git ref of repo (this
    repository) checked out into a temporary worktree for the block's length."""
    if spec is None:
        yield str(ROOT), "this checkout"
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        if not any((path / folder / "worker.py").is_file() for folder in LAYOUTS):
            raise SideError(f"{spec}: a folder without harness/workers/worker.py is no triptych tree")
        if not any((path / folder / "protocol.py").is_file() for folder in LAYOUTS):
            raise SideError(_older(spec))
        yield str(path.resolve()), str(path)
        return
    try:
        sha = _git("rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}", cwd=repo)
    except SideError:
        raise SideError(f"{spec!r} is neither a folder nor a git ref of {repo}") from None
    if not any(_has(repo, sha, f"{folder}/protocol.py") for folder in LAYOUTS):
        raise SideError(_older(spec))
    where = tempfile.mkdtemp(prefix=f"triptych-{spec.replace('/', '_')[:20]}-")
    _git("worktree", "add", "--detach", "--force", where, sha, cwd=repo)
    try:
        yield where, f"{spec} ({sha[:10]})"
    finally:
        with contextlib.suppress(SideError, subprocess.TimeoutExpired):
            _git("worktree", "remove", "--force", where, cwd=repo)
        with contextlib.suppress(SideError, subprocess.TimeoutExpired):
            _git("worktree", "prune", cwd=repo)


def check_python(python: str) -> str:
    """The interpreter's absolute path; SideError where it cannot run, or cannot import numpy, which
    every worker imports first (an interpreter without the harness's dependencies: its side never
    started, and the run compared nothing)."""
    try:
        out = subprocess.run([python, "-c", "import sys; import numpy; print(sys.executable)"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SideError(f"{python}: cannot run it ({e})") from None
    if "ModuleNotFoundError" in out.stderr:
        raise SideError(f"{python}: has no numpy, which the harness's workers need: install the dependencies there "
                        f"({python} -m pip install -e .)")
    if out.returncode != 0:
        raise SideError(f"{python}: exit code {out.returncode}")
    if not out.stdout.strip():
        raise SideError(f"{python}: printed nothing where it was asked for its path: not a Python interpreter")
    return python if os.path.isabs(python) else out.stdout.strip()


# -- a side's processes ---------------------------------------------------------------------------


class _Child:
    """subprocess.Popen under the names ProcessWorker uses for a multiprocessing.Process."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)

    @property
    def exitcode(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # its session: what the worker started dies with it
            os.killpg(self.proc.pid, signal.SIGKILL)


class SideWorker(ProcessWorker):
    """A framework's worker process of one side: that side's interpreter, tree and environment,
    talking to this process over an authenticated local socket (as rank processes do). cpu: the one CPU
    the process and every thread it starts run on, for its whole life (--same-cpu; None: the run's CPUs)."""

    def __init__(self, fw: str, side: Side, cpu: int | None = None) -> None:
        self.side, self.cpu = side, cpu
        super().__init__(fw)

    def _start(self) -> None:
        key = secrets.token_bytes(32)
        listener = Listener(("127.0.0.1", 0), authkey=key)
        env = {k: v for k, v in os.environ.items() if k != CPU_ENV} | self.side.environ() | {
            PARENT_ENV: f"{listener.address[0]}:{listener.address[1]}", KEY_ENV: key.hex()}
        if self.cpu is not None:  # the pair's one CPU (_CHILD), and one OpenMP thread unless the user set a count:
            # a pool sized to the machine crowds onto one CPU and spins there (docs/regress.md, "One CPU for a pair")
            env |= {CPU_ENV: str(self.cpu)} | ({} if env.get("OMP_NUM_THREADS") else {"OMP_NUM_THREADS": "1"})
        code = _CHILD.format(workers=_workers(self.side.tree))
        child = _Child(subprocess.Popen([self.side.python, "-c", code, self.fw], cwd=self.side.tree, env=env,
                                        start_new_session=True))
        got: list[Any] = []

        def accept() -> None:
            with contextlib.suppress(OSError):  # closed below: the child died before it called back
                got.append(listener.accept())

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        try:
            while t.is_alive() and child.is_alive() and time.monotonic() < deadline:
                t.join(0.1)
        finally:
            listener.close()
        if not got:
            code = child.exitcode
            child.kill()
            child.join(5)
            raise WorkerLost(f"{self.side.name} {self.fw} worker did not call back (exit code {code})", "crashed")
        self._proc, self._conn = child, got[0]


class SideGroups(Groups):
    """Rank groups whose timing process i belongs to sides[i]."""

    def __init__(self, sides: list[Side], frameworks: list[str], world_size: int | None, timeout_s: float) -> None:
        super().__init__(frameworks, world_size, timeout_s)
        self.sides = sides

    def make_group(self, fw: str, process: int) -> RankGroup:
        g = RankGroup(fw, self.world_size)
        side = self.sides[process]
        g.python, g.cwd, g.env = side.python, side.tree, side.environ()
        g.rank_main = f"{_workers(side.tree)}.rank_main"
        return g


# -- the schedule ---------------------------------------------------------------------------------


def pair_cpu(k: int, fw: str, frameworks: list[str], cpus: list[int] | tuple[int, ...]) -> int | None:
    """The one CPU pair k's two workers of fw share (--same-cpu), or None without cpus: the CPUs in turn, a
    framework after another and a pair after another, so that a pair's sides read one CPU's speed and the
    pairs read many CPUs' (a host's CPUs run at their own speeds: docs/regress.md, "One CPU for a pair")."""
    return cpus[(k * len(frameworks) + frameworks.index(fw)) % len(cpus)] if cpus else None


def pair_order(k: int) -> tuple[int, int]:
    """Side indices (0 baseline, 1 candidate) of pair k in the order they run: A-B, B-A, A-B, ..."""
    return (0, 1) if k % 2 == 0 else (1, 0)


@dataclass
class Pair:
    """Pair k's two timing processes (one a side), in the order they time each point."""

    k: int
    sides: list[Side]  # in running order
    processes: list[dict[str, Handle]]  # {framework: worker}, one per side, in running order
    groups: SideGroups


Answers = dict[tuple[str, int, str], list[list[Answer]]]  # (scenario, point, fw) -> per side, per pair


@dataclass
class Schedule:
    """What the interleaved run needs from its caller; make_worker(fw, side, cpu) is replaced in tests."""

    sides: list[Side]  # [baseline, candidate]
    frameworks: list[str]
    timeout_s: float
    world_size: int | None = None
    make_worker: Callable[[str, Side, int | None], Any] = SideWorker
    order: Callable[[int], tuple[int, int]] = pair_order
    log: Callable[[str], None] = lambda _t: None
    now: Callable[[], float] = time.perf_counter
    # (rank scenario, framework) -> {side name: why} where that side's rank group did not start in some pair
    groups_down: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    # (scenario, point) -> seconds a pair took there when it was last timed (now's clock): what a pair added costs
    pair_s: dict[tuple[str, int], float] = field(default_factory=dict)

    def start_pairs(self, ks: list[int], frameworks: list[str] | None = None, ranked: list[str] | None = None,
                    cpus: list[int] | tuple[int, ...] = ()) -> tuple[list[Pair], dict[str, dict[str, Hello]]]:
        """Pairs ks, every worker (of frameworks, default all) started side by side, and rank groups ready
        to start at the first rank scenario (of ranked, default frameworks); {side name: {framework: its
        hello}} where a framework is available only if every one of its workers started. cpus: a pair's two
        workers of a framework start on one of them for their whole life (pair_cpu; not a rank group's)."""
        fws = self.frameworks if frameworks is None else frameworks
        ranked = fws if ranked is None else ranked
        pairs = []
        for k in ks:
            sides = [self.sides[i] for i in self.order(k)]
            cpu = {fw: pair_cpu(k, fw, self.frameworks, cpus) for fw in fws}
            procs = [{fw: self.make_worker(fw, s, cpu[fw]) for fw in fws} for s in sides]
            pairs.append(Pair(k, sides, procs, SideGroups(sides, ranked, self.world_size, self.timeout_s)))
        work = [(p.sides[j].name, fw, w) for p in pairs for j, proc in enumerate(p.processes) for fw, w in proc.items()]

        def hello(w: Any) -> Hello:
            try:
                return w.request("hello", timeout=max(self.timeout_s, STARTUP_TIMEOUT_S))
            except (WorkerError, WorkerLost) as e:
                return {"available": False, "why": f"failed to start: {e}", "env": {}, "on_gpu": False,
                        "status": e.status}

        try:
            with ThreadPoolExecutor(max(1, len(work))) as ex:
                infos = list(ex.map(lambda x: hello(x[2]), work))
        except BaseException:  # a stop while they start: none is left running without its parent's say
            self.close(pairs, 1.0)
            raise
        env: dict[str, dict[str, Hello]] = {s.name: {} for s in self.sides}
        for (name, fw, _), info in zip(work, infos):
            if fw not in env[name] or (env[name][fw]["available"] and not info["available"]):
                env[name][fw] = info
        return pairs, env

    def time_points(self, pairs: list[Pair], scenarios: list[Any], points: dict[str, list[Params]],
                    wanted: Callable[[str, int], Any], running: list[str], cfg: Any, answers: Answers,
                    seed: int | None = None, stop: Callable[[], bool] = lambda: False,
                    subset: Callable[[str, int, str], tuple[str, ...]] = lambda _s, _i, _f: (), turns: bool = False,
                    cheapest_first: bool = False) -> list[tuple[str, int]]:
        """Every wanted point of every scenario through every pair, in pair order: a point's
        processes run one after the other (A-B, B-A, ...), one framework at a time; with turns, a pair's two
        processes time a framework's rows at once, taking turns call by call (harness/workers/turns.py; not
        a rank group's), the frameworks in turn A-B order for even pairs. wanted(scenario,
        point): True for every running framework, else the frameworks wanted there (none: the point is
        not timed). subset(scenario, point, framework): the variants both sides time there (empty: every
        one); rows of others that a side sends are not kept, so that both sides' processes of a pair hold
        the same rows. Once stop() says so, no further point starts (a started one runs through all its
        pairs, so that its rows stay paired); the points left are returned. cheapest_first: the points whose
        pairs cost least so far (pair_s) go first, a scenario's together: a budget that runs out then leaves the
        fewest points without the added pairs; the pairs of each point keep their order."""
        left: list[tuple[str, int]] = []

        def cost(name: str, i: int) -> float:
            return self.pair_s.get((name, i), 0.0) if cheapest_first else 0.0

        def first(scn: Any) -> float:
            return min((cost(scn.name, i) for i in range(len(points[scn.name])) if wanted(scn.name, i)), default=0.0)

        for scn in sorted(scenarios, key=first):  # stable: the plan's order where the costs tie (or are not asked)
            idx = sorted((i for i in range(len(points[scn.name])) if wanted(scn.name, i)),
                         key=lambda i: cost(scn.name, i))
            if not idx:
                continue
            if left or stop():
                left += [(scn.name, i) for i in idx]
                continue
            rank_procs, fws_run = None, running
            if getattr(scn, "ranks", False):  # each pair's rank groups, started at the first rank scenario
                self.log(f"{scn.name} · starting the rank groups of {len(pairs)} pair(s)")
                with ThreadPoolExecutor(len(pairs)) as ex:  # every pair's groups start side by side
                    got = list(ex.map(lambda p: p.groups.for_scenario(scn, p.processes, running, {}), pairs))
                rank_procs = [g.processes for g in got]
                fws_run = [fw for fw in running if all(fw in g.available for g in got)]
                asked = set(pairs[0].groups.frameworks) if pairs else set()
                for fw in sorted((set(running) & asked) - set(fws_run)):  # its rows keep other stages' pairs
                    self.log(f"{scn.name} · {fw}: a rank group did not start in pair(s) "
                             f"{', '.join(str(p.k + 1) for p in pairs)}: its rows are not timed in them")
                    for p in pairs:  # which side's, and why: a framework never timed at all is told apart (_run)
                        for side, hello in zip(p.sides, p.groups.hellos):
                            if not hello.get(fw, {}).get("available", True):
                                self.groups_down.setdefault((scn.name, fw), {}).setdefault(side.name, hello[fw]["why"])
            for n, i in enumerate(idx):
                if n and stop():
                    left += [(scn.name, i) for i in idx[n:]]
                    break
                params = points[scn.name][i]
                want = wanted(scn.name, i)
                fws_point = [fw for fw in fws_run if want is True or fw in want]
                t_point = self.now()
                for pi, pair in enumerate(pairs):
                    procs = rank_procs[pi] if rank_procs is not None else pair.processes
                    # decided before either side of the pair runs, so that both run the same repeats
                    todo = {fw: planned(cfg, answers.get((scn.name, i, fw), [[], []])) if pair.k >= processes.PLAN_AFTER
                            else cfg for fw in fws_point}

                    def ask(j: int, fw: str, turns: tuple[Turns, int] | None = None,
                            pair: Pair = pair, procs: list[dict[str, Handle]] = procs,
                            todo: dict[str, Any] = todo) -> None:
                        self._ask(scn.name, i, params, pair.k, pair.sides[j], procs[j][fw], todo[fw], answers, seed,
                                  subset(scn.name, i, fw), turns)

                    if turns and rank_procs is None:  # the sides' calls of a row take turns (harness/workers/turns.py)
                        for fw in (fws_point if pair.k % 2 == 0 else fws_point[::-1]):
                            self._take_turns(ask, fw, [procs[0][fw], procs[1][fw]])
                        continue
                    for j in range(len(pair.sides)):
                        for fw in (fws_point if j == 0 else fws_point[::-1]):  # mirrored: each framework's gap cancels
                            ask(j, fw)
                if pairs:
                    self.pair_s[(scn.name, i)] = (self.now() - t_point) / len(pairs)
                for side in self.sides:  # the disk holds one point at a time
                    if side.points:
                        point_cache.clear(side.points)
        return left

    def _ask(self, scenario: str, i: int, params: Params, k: int, side: Side, worker: Handle, todo: Any,
             answers: Answers, seed: int | None, only: tuple[str, ...], turns: tuple[Turns, int] | None = None
             ) -> None:
        """One side's time request of pair k at point i, its answer (or failure) kept in answers. turns: the
        pair's Turns and this side's index in it, where the two sides' requests take turns."""
        fw = worker.fw
        self.log(f"{scenario} · {params.get('label', '') or i} · pair {k + 1} · {side.name} · {fw}")
        slot = answers.setdefault((scenario, i, fw), [[], []])[self.sides.index(side)]
        if slot and "status" in slot[-1]:
            return  # failed on this side: not asked again at this point
        turn = None if turns is None else (lambda variant, stop: turns[0].turn(turns[1], variant, stop))
        t0 = time.perf_counter()
        try:
            # first=False in every process: no sync census, timeline or profile run (an
            # interleaved run times, it does not re-prove), and no process unlike the others
            got = worker.request("time", scenario, params, todo, False, seed=seed, variants=only, timeout=self.timeout_s,
                                 turn=turn)
        except (WorkerLost, WorkerError) as e:  # the rows it named fail, not rows it did not ask for
            slot.append({"status": e.status, "reason": str(e), **({"variants": list(only)} if only else {})})
            self.log(f"  {fw} failed ({e.status}, {time.perf_counter() - t0:.1f} s): {_first_line(str(e))}")
            return
        if only:  # the baseline a side timed only to check the others against
            got = got | {"rows": [r for r in got.get("rows") or () if r.get("variant") in only]}
        waited = 0.0 if turns is None else turns[0].waited_s[turns[1]]  # the other side's turns: not this request's
        slot.append(processes.round_trip(got, time.perf_counter() - t0 - waited))
        bad = [r for r in got.get("rows") or () if r.get("status") in FAILED + ("wrong",)]
        if bad:  # said where it happens: a log that goes on as if nothing failed hides where the time went
            why = bad[0].get("reason") or (bad[0].get("check") or {}).get("worst", "")
            self.log(f"  {fw}: {len(bad)} row(s) {'/'.join(sorted({r['status'] for r in bad}))} "
                     f"({time.perf_counter() - t0 - waited:.1f} s): {_first_line(why)}")

    @staticmethod
    def _take_turns(ask: Callable[..., None], fw: str, workers: list[Handle]) -> None:
        """Both sides of a pair time fw's rows at once, taking turns call by call (harness/workers/turns.py),
        the pair's first side first (workers: the two sides' in that order)."""
        turns = Turns()

        def side(j: int) -> None:
            if not turns.begin(j):
                return  # the run stopped before this side's turn came
            try:
                ask(j, fw, (turns, j))
            finally:
                turns.end(j)

        ex = ThreadPoolExecutor(2)
        try:
            for f in [ex.submit(side, j) for j in (0, 1)]:
                f.result()
        except BaseException:  # a stop: not waited for; both workers stopped for good end both requests and waits
            turns.cancel()
            for w in workers:  # never started again by a side that was about to send its request
                getattr(w, "stop", lambda: None)()
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        ex.shutdown()

    @staticmethod
    def close(pairs: list[Pair], grace: float = 10.0) -> None:
        """Every worker and rank group of the pairs, side by side (each may take a while to exit)."""
        every = [w for p in pairs for proc in p.processes for w in proc.values()] + [p.groups for p in pairs]
        with ThreadPoolExecutor(max(1, len(every))) as ex:
            list(ex.map(lambda w: w.close(grace), every))


def _first_line(text: str, width: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[:width - 1] + "…"


ADDED = 2  # pairs added at a look: an A-B and a B-A pair, so that a drift linear over them cancels in each step


def looks(pairs: int, max_pairs: int) -> int:
    """How many times a run may judge its rows: after the first pairs, then after every ADDED more up to
    max_pairs. Fewer looks split the false-discovery rate less (Bonferroni), which is the other reason
    to add pairs two at a time."""
    return 1 + math.ceil(max(max_pairs - pairs, 0) / ADDED)


def needed(open_points: dict[tuple[str, int], set[str]], rank_scenarios: set[str], running: list[str]
           ) -> tuple[list[str], list[str]]:
    """(frameworks whose single workers added pairs need, frameworks whose rank groups they need): those
    with an unknown row at a point of a scenario without ranks, and of one with ranks, in running's order."""
    def at(ranks: bool) -> list[str]:
        return [fw for fw in running if any(fw in fws for (s, _), fws in open_points.items()
                                            if (s in rank_scenarios) == ranks)]

    return at(False), at(True)


def planned(cfg: Any, per_side: list[list[Answer]]) -> Any:
    """The timing config of a pair after the first processes.PLAN_AFTER at a point: per variant the repeats
    Kalibera and Jones' rule gives (harness/workers/processes.py plan), the larger of the two sides'. Each
    side's plan comes from its own processes alone (pooled, their variance between processes would hold
    the very change the run looks for); both sides of the pair get the larger, so that a pair stays like
    for like. cfg where a side cannot decide."""
    plans = [dict(processes.plan(answers, cfg).plan) for answers in per_side]
    common = sorted(set(plans[0]) & set(plans[1]))
    return replace(cfg, plan=tuple((v, max(plans[0][v], plans[1][v])) for v in common)) if common else cfg


# -- the run --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    docs: list[dict[str, Any]]  # [baseline, candidate]: result documents of the two sides' processes
    rows: list[Any]  # harness.regress.regress.Paired, judged
    not_comparable: list[tuple[str, str]]
    pairs: int  # the most pairs any row got
    wall_s: float
    stopped: str  # why more pairs were not run ("" where every row was decided)
    lost: list[tuple[str, str]] = field(default_factory=list)  # started on the baseline, not on the candidate: why
    not_timed: int = 0  # points the time budget or a stop left untimed (harness/run/interleave.py Schedule.time_points)
    short: int = 0  # points the time budget left with fewer than the first pairs (timed and judged on fewer)
    signal: str | None = None  # the signal (SIGINT, SIGTERM) that stopped the run; what it had timed is judged
    level: float = 0.95  # the rows' intervals' confidence: the plan's, split over the run's looks
    plain_why: str | None = None  # why every row was judged plain, where the run found so itself; None: as planned


@dataclass
class Plan:
    scenarios: list[str]
    size: str
    seed: int
    pairs: int = 4
    max_pairs: int = 12
    budget_s: float | None = None  # no new point or pair starts once this many seconds have passed
    threshold: float = 0.10
    confidence: float = 0.95
    fdr: float = 0.05
    clock: str = "device_done"
    cfg: Any = None  # a harness.measure.timing.TimingConfig; None: the size preset's
    history: tuple[Path, ...] = ()  # folders holding earlier results, for the forecast (harness/regress/forecast.py)
    # a pair's two processes take turns call by call (harness/workers/turns.py), where both can; not the default:
    # a turn adds tens of microseconds to each call of a microsecond row (docs/regress.md, "Taking turns call by call")
    turns: bool = False
    same_cpu: bool = False  # a pair's two workers of a framework live on one CPU (pair_cpu)
    # rows with the host's loops beside their repeats are judged at equal host speeds (regress.covariate_test)
    host_covariate: bool = False
    plain_why: str = ""  # why every row is judged plain where host_covariate is off, for the run's header


def run(schedule: Schedule, plan: Plan) -> Outcome:
    """Time plan's scenarios on both sides, pair by pair; judge; add pairs while rows are unknown. A stop
    (Ctrl-C, SIGTERM) once the workers are up ends the timing, and the outcome holds what was timed, with
    stops deferred (harness/run/stops.py), so that the caller writes both sides' files before honouring it."""
    with side_caches(schedule.sides):
        return InterleavedRun(schedule, plan).outcome()


class InterleavedRun:
    """One interleaved regress, as harness/run/runner.py's Run is one compare: it owns the run's state (the
    answers of every process, what the budget or a stop left untimed, why the timing stopped) through its
    phases: the first pairs over every point, what they did not reach, the rows judged and pairs added while
    some are unknown, and the two sides' documents."""

    def __init__(self, schedule: Schedule, plan: Plan) -> None:
        self.schedule, self.plan = schedule, plan
        self.plain_why: str | None = None  # why every row is judged plain, where the run finds so itself
        self.t0, self.started = schedule.now(), _now()
        self.budget = "" if plan.budget_s is None else f"the time budget of {plan.budget_s:g} s was spent"
        if schedule.world_size is None:
            schedule.world_size = default_world_size()
        os.environ[WORLD_SIZE_ENV] = str(schedule.world_size)  # the rank scenarios' points draw it
        self.scns = [get_scenario(s) for s in plan.scenarios]
        # the seed is the requests' own (harness/workers/protocol.py)
        self.points = {s.name: s.points(plan.size, schedule.world_size) for s in self.scns}
        self.cfg = plan.cfg or preset(plan.size)
        self.answers: Answers = {}
        self.machine: list[Json] = [{}, {}]  # per side, model.Environment.machine (free-form)
        self.short: list[tuple[str, int]] = []  # points that the budget left with fewer than plan.pairs pairs
        self.left: list[tuple[str, int]] = []  # points that the budget (or a stop) left untimed
        self.stopped_by: str | None = None  # the signal that stopped the timing
        self.env: dict[str, dict[str, Hello]] | None = None
        self.running: list[str] = []
        self.subsets = False
        self.turns = False
        self.cpus: list[int] = allowed() if plan.same_cpu else []  # a pair's workers' one CPU is one of these
        self.not_timed: dict[tuple[str, int, str], str] = {}
        self.not_run: list[dict[str, str]] = []
        self.left_out: set[str] = set()
        # every look at the rows may call one different: the false-discovery rate is split over the looks the
        # run may take (Bonferroni), so that adding pairs while a row is unknown keeps the control; and so may
        # each look call one same, after which it gets no more pairs: its interval's level is split too
        self.fdr = plan.fdr / looks(plan.pairs, plan.max_pairs)
        self.level = 1 - (1 - plan.confidence) / looks(plan.pairs, plan.max_pairs)

    def spent(self) -> bool:
        return self.plan.budget_s is not None and self.schedule.now() - self.t0 >= self.plan.budget_s

    def outcome(self) -> Outcome:
        self._first_pairs()
        why_cut = self._untimed()
        rows, nc, stopped = self._judged(why_cut)
        if self.stopped_by is not None:  # in the first pairs or in added ones
            _drop_half_pairs(self.answers)
        return self._outcome(rows, nc, stopped)

    def _first_pairs(self) -> None:
        """plan.pairs pairs over every point, ADDED pairs at a time, each stage in workers of its own: a budget
        that cannot afford every first pair leaves the later ones short, not points untimed, and no more than
        ADDED pairs' processes (and pools) are alive at once (cmd_regress sizes their memory cap so)."""
        schedule, plan, scns, points = self.schedule, self.plan, self.scns, self.points
        stages = [list(range(plan.pairs))[i:i + ADDED] for i in range(0, plan.pairs, ADDED)]
        schedule.log(f"starting the workers of {len(stages[0])} pairs")
        schedule.groups_down = {}  # this run's: a schedule may run again
        pairs: list[Pair] = []
        try:
            t_start = schedule.now()
            if plan.same_cpu and not self.cpus:
                schedule.log("this platform cannot pin processes to CPUs: each side of a pair runs on its own CPUs")
            # a stop while they start: they close, and it raises
            pairs, self.env = schedule.start_pairs(stages[0], cpus=self.cpus)
            env = self.env
            self.running = [fw for fw in schedule.frameworks if all(env[s.name][fw]["available"] for s in schedule.sides)]
            # a side's $TRIPTYCH_TIMING: an older tree's workers ignore it, and would time on the preset while the run
            # says otherwise
            sets_loop: list[str] = []  # the sides whose TRIPTYCH_TIMING sets host_beside: then no covariate (below)
            for s in schedule.sides:
                deaf = [fw for fw in self.running if env[s.name][fw].get("timing") != s.env.get(OVERRIDE_ENV)]
                if deaf:
                    raise SideError(f"the {s.name}'s workers ({', '.join(deaf)}) do not time on its {OVERRIDE_ENV}: "
                                    "a tree from before the variable ignores it")
                # and one from before a setting fails every request that names it
                named = set(json.loads(s.env[OVERRIDE_ENV])) if s.env.get(OVERRIDE_ENV) else set()
                sets_loop += [s.name] if "host_beside" in named else []
                for fw in self.running:
                    unknown = sorted(named - set(env[s.name][fw].get("timing_fields") or OVERRIDABLE_OLDER))
                    if unknown:
                        raise SideError(f"the {s.name}'s {fw} workers do not take {', '.join(unknown)} in its "
                                        f"{OVERRIDE_ENV}: a tree from before the setting")
            # both sides' workers can be asked for some variants only (an older tree's cannot: it times them all)
            self.subsets = all(env[s.name][fw].get("subsets") for s in schedule.sides for fw in self.running)
            # both sides' workers can take turns call by call (an older tree's take a point at a time)
            self.turns = plan.turns and all(env[s.name][fw].get("turns") for s in schedule.sides for fw in self.running)
            if plan.turns and not self.turns:  # an older tree's workers
                schedule.log("a side's workers cannot take turns call by call: the pairs take a point at a time")
            # judged on another clock: no traced kernel clock, where both sides' workers can leave it out
            if plan.clock != "kernel" and all(env[s.name][fw].get("kernel_optional")
                                              for s in schedule.sides for fw in self.running):
                self.cfg = replace(self.cfg, kernel_clock=False)
            # --host-covariate: the host's loop before each repeat (TimingConfig.host_beside), where every worker times
            # one and the same loop at one place; else the rows have no loops and are judged plain
            loops = {env[s.name][fw].get("host_beside") for s in schedule.sides for fw in self.running}
            if plan.host_covariate and len(loops) == 1 and None not in loops and not sets_loop:
                self.cfg = replace(self.cfg, host_beside=True)
            elif plan.host_covariate:  # the run as judged, its header and its files say plain
                self.plain_why = (f"the {sets_loop[0]}'s {OVERRIDE_ENV} sets host_beside: the loop is a setting of "
                                  "the side, not a covariate" if sets_loop else
                                  "the two sides' workers do not time one loop: an older tree's time none, a tree that "
                                  "changed harness/measure/host_loop.py another")
                self.plan = replace(plan, host_covariate=False, plain_why=self.plain_why)
                schedule.log(f"the host's loop: {self.plain_why}; every row is judged plain")
            start_s = schedule.now() - t_start
            said = self._forecast(start_s)
            t_points = schedule.now()  # after the forecast's own reading of earlier files: not a pair's price
            self.left = schedule.time_points(pairs, scns, points, lambda _s, _i: True, self.running, self.cfg,
                                             self.answers, plan.seed, stop=self.spent, turns=self.turns)
            if not said and not self.left and plan.max_pairs > len(stages[0]):  # nothing to go by before: its own
                self._forecast_from(len(stages[0]), schedule.now() - t_points + start_s, start_s)
            for ks in stages[1:]:
                if self.left or self.short:
                    break
                schedule.close(pairs)
                pairs = []
                if self.spent():  # no stage starts that could time nothing: every point keeps the pairs it has
                    self.short = [(s.name, i) for s in scns for i in range(len(points[s.name]))]
                    break
                named = _named(ks)
                schedule.log(f"{named} over every point: starting their workers")
                pairs, env_k = schedule.start_pairs(ks, self.running, self.running, self.cpus)
                fws_k = [fw for fw in self.running if all(env_k[s.name][fw]["available"] for s in schedule.sides)]
                for fw in sorted(set(self.running) - set(fws_k)):  # its rows keep the earlier pairs, as a rank group's do
                    schedule.log(f"{fw}: a worker of {named} did not start: its rows are not timed in them")
                self.short = schedule.time_points(pairs, scns, points, lambda _s, _i: True, fws_k, self.cfg,
                                                  self.answers, plan.seed, stop=self.spent, turns=self.turns)
        except (KeyboardInterrupt, Stopped) as e:
            if self.env is None:  # stopped while the first workers started: nothing was timed, nothing is written
                raise
            self.stopped_by = stops.name_of(e)
        finally:
            stops.defer()  # from here a signal waits at the next safe point: what was timed is judged and kept first
            schedule.log("closing the workers")
            schedule.close(pairs, 1.0 if self.stopped_by else 10.0)  # a stopped run's busy worker is not waited for

    def _forecast(self, start_s: float) -> bool:
        """Before the first point is timed: what the budget buys, from the newest earlier result of these
        scenarios on this GPU (harness/regress/forecast.py), or that there is none to go by; True where it
        said what the budget buys."""
        plan, env = self.plan, self.env or {}
        if not self.running:  # no framework started on both sides: nothing will be timed to forecast
            return True
        gpu = next((e["env"].get("gpu") for side in env.values() for e in side.values()  # hello: the backend's facts
                    if e.get("available") and (e.get("env") or {}).get("gpu")), None)
        try:
            found = forecast.earlier(plan.history, plan.scenarios, self.running, plan.size, gpu)
        except Exception as e:  # noqa: BLE001 - likewise
            self.schedule.log(f"forecast: none: {type(e).__name__}: {e}"[:300])
            return False
        if found is None:
            self.schedule.log(f"forecast: no earlier {plan.size} result of these scenarios on this "
                              f"{'GPU' if gpu else 'machine'} (two processes a row or more) to go by: it comes "
                              "after the first pairs")
            return False
        try:
            f = forecast.forecast(found, plan.scenarios, self.running, plan, start_s, min(ADDED, plan.pairs), self.fdr,
                                  traced=getattr(self.cfg, "kernel_clock", True))
        except Exception as e:  # noqa: BLE001 - a forecast is advice beside the run, never a reason to lose it
            self.schedule.log(f"forecast: {found[0].name} gives none: {type(e).__name__}: {e}"[:300])
            return False
        for line in forecast.render(f):
            self.schedule.log(line)
        return True

    def _forecast_from(self, pairs: int, stage_s: float, start_s: float) -> None:
        """After the first stage, where nothing earlier gave a forecast: what the budget buys, from these pairs'
        own price and each row's spread between its processes (forecast.from_first_pairs)."""
        clock = self.plan.clock
        medians: dict[tuple[str, int, str, str], list[list[float]]] = {}
        for (name, i, fw), per_side in self.answers.items():
            for side, answers in enumerate(per_side):
                for got in answers:
                    for r in got.get("rows") or () if "status" not in got else ():
                        times = ((r.get("timing") or {}).get("samples") or {}).get(clock)
                        if r.get("status") == "ok" and times:
                            medians.setdefault((name, i, fw, r["variant"]), [[], []])[side].append(float(np.median(times)))
        try:
            f = forecast.from_first_pairs(medians.values(), pairs, stage_s, start_s, self.plan, min(ADDED, self.plan.pairs),
                                          self.fdr)
        except Exception as e:  # noqa: BLE001 - advice beside the run, never a reason to lose it
            self.schedule.log(f"forecast: this run's first pairs give none: {type(e).__name__}: {e}"[:300])
            return
        for line in forecast.render(f):
            self.schedule.log(line)

    def _untimed(self) -> str:
        """What the first pairs did not time, by point and framework (not_timed), and which scenarios that
        leaves incomplete (not_run) or out (left_out), as compare lists what its budget did not reach; returns
        why they were cut."""
        scns, points, answers, running = self.scns, self.points, self.answers, self.running
        why_cut = self.budget if self.stopped_by is None else f"stopped ({self.stopped_by})"
        reached: set[tuple[str, int]] = set()
        if self.stopped_by is not None:  # the points no process reached, on either side
            reached = {(name, i) for (name, i, _), per_side in answers.items() if any(per_side)}
            self.left = [(s.name, i) for s in scns for i in range(len(points[s.name])) if (s.name, i) not in reached]
        # by framework: one that did not start on a side was never to be timed, and keeps its own reason
        self.not_timed = {(name, i, fw): f"not timed: {why_cut} before this point" for name, i in self.left
                          for fw in running}
        for name, i in sorted(reached):  # at a point the stop reached: a framework it cut, or the side it did not reach
            for fw in running:
                per_side = answers.get((name, i, fw), [[], []])
                if not all(per_side):
                    where = (f"on the {self.schedule.sides[per_side.index([])].name} side" if any(per_side)
                             else "here")
                    self.not_timed[(name, i, fw)] = f"not timed {where}: stopped ({self.stopped_by}) during this point"
        for scn in scns:
            n = len(points[scn.name])
            never = {i for name, i in self.left if name == scn.name}
            cut = len(never | {i for name, i, _ in self.not_timed if name == scn.name})
            if len(never) == n:
                self.left_out.add(scn.name)
            if cut:
                self.not_run.append({"scenario": scn.name, "why": (
                    f"{why_cut} before it started" if len(never) == n else
                    f"{why_cut} before {cut} of its {n} points were timed (their rows are skipped)"
                    if self.stopped_by is None else
                    f"{why_cut}: {cut} of its {n} points not timed in full (rows not timed say why)")})
        return why_cut

    def _judged(self, why_cut: str) -> tuple[list[Any], list[tuple[str, str]], str]:
        """(the rows judged, the rows not comparable, why pairs stopped): after the first pairs, and again after
        each ADDED pairs that unknown rows get, until none is unknown, --max-pairs, the budget or a stop."""
        plan = self.plan
        rows, nc = _rows(self.answers, self.scns, self.points, plan.clock)
        judge_pairs(rows, plan.threshold, self.level, self.fdr, plan.host_covariate)
        k, stopped = plan.pairs, (f"{why_cut}; {len(self.left)} point(s) not timed" if self.left else
                                  f"{self.budget}; {len(self.short)} point(s) with fewer than {plan.pairs} pairs"
                                  if self.short else why_cut if self.stopped_by else "")
        while not self.left and not self.short and self.stopped_by is None:
            # a point's frameworks with an unknown row: a framework whose rows there are decided is not re-timed,
            # and where both sides' workers can be asked for some variants, neither are its decided rows
            open_rows: dict[tuple[str, int, str], tuple[str, ...]] = {}
            for r in rows:
                if r.verdict == "unknown" and r.decidable:
                    key = (r.scenario, r.point, r.framework)
                    open_rows[key] = open_rows.get(key, ()) + (r.variant,)
            if not open_rows:
                break
            if k >= plan.max_pairs:
                stopped = f"--max-pairs {plan.max_pairs} reached"
                break
            if self.spent():
                stopped = self.budget
                break
            ks = list(range(k, min(k + ADDED, plan.max_pairs)))
            why, before_any = self._add_pairs(ks, open_rows)
            if why is not None:
                stopped = why
                if before_any:  # a signal while the rows were judged: they stand as judged
                    break
            k += len(ks)
            rows, nc = _rows(self.answers, self.scns, self.points, plan.clock)
            judge_pairs(rows, plan.threshold, self.level, self.fdr, plan.host_covariate)
        return rows, nc, stopped

    def _add_pairs(self, ks: list[int], open_rows: dict[tuple[str, int, str], tuple[str, ...]]
                   ) -> tuple[str | None, bool]:
        """Pairs ks over the points with unknown rows (open_rows: the rows by scenario, point and framework).
        (None, False); or, where a signal stopped the run, ("stopped (SIG...)", whether it came before any of
        these pairs started)."""
        schedule, scns, points = self.schedule, self.scns, self.points
        open_points: dict[tuple[str, int], set[str]] = {}
        for s, i, fw in open_rows:
            open_points.setdefault((s, i), set()).add(fw)
        named = _named(ks)
        ranked_scns = {s.name for s in scns if getattr(s, "ranks", False)}
        plain, ranked = needed(open_points, ranked_scns, self.running)
        more: list[Pair] = []
        try:  # from resume() on a signal raises: every statement after it is inside, so that it stops, not loses, the run
            late = stops.resume()  # a signal while the rows were judged stops the run here, before more pairs
            if late is not None:
                self.stopped_by = late
                return f"stopped ({late})", True
            schedule.log(f"{named}: {len(open_points)} point(s) with unknown rows "
                         f"({sum(map(len, open_points.values()))} request(s) a process, "
                         f"{sum(map(len, open_rows.values()))} row(s)), the cheapest first")
            # none for a framework with nothing left to decide
            more, env_more = schedule.start_pairs(ks, plain, ranked, self.cpus)
            down = {fw for fw in plain if not all(env_more[s.name][fw]["available"] for s in schedule.sides)}
            for fw in sorted(down):  # its rows keep the earlier pairs, as in a later stage of the first pairs
                schedule.log(f"{fw}: a worker of {named} did not start: its rows are not timed in them")
            schedule.time_points(more, scns, points,
                                 lambda s, i: {fw for fw in open_points.get((s, i), set())
                                               if s in ranked_scns or fw not in down},
                                 [fw for fw in self.running if fw in plain or fw in ranked], self.cfg, self.answers,
                                 self.plan.seed, stop=self.spent,
                                 subset=lambda s, i, fw: open_rows.get((s, i, fw), ()) if self.subsets else (),
                                 turns=self.turns, cheapest_first=True)
        except (KeyboardInterrupt, Stopped) as e:
            self.stopped_by = stops.name_of(e)
            return f"stopped ({self.stopped_by})", False
        finally:
            stops.defer()
            schedule.close(more, 1.0 if self.stopped_by else 10.0)
        return None, False

    def _outcome(self, rows: list[Any], nc: list[tuple[str, str]], stopped: str) -> Outcome:
        """The two sides' documents and the judged rows, with what did not start or was not timed said."""
        schedule, points, env = self.schedule, self.points, self.env
        assert env is not None
        base, cand = schedule.sides
        lost_groups = []
        for (name, fw), why in schedule.groups_down.items():  # a framework whose rank groups never timed this scenario
            if any(any(per_side) for (n, _, f), per_side in self.answers.items() if (n, f) == (name, fw)):
                continue  # timed in other pairs: its rows keep those (the log said where a group did not start)
            where = "either side" if len(why) == 2 else f"the {next(iter(why))} side"
            for i in range(len(points[name])):
                self.not_timed.setdefault((name, i, fw), f"not timed: its rank group did not start on {where}: "
                                                         f"{next(iter(why.values()))}")
            if base.name not in why:
                lost_groups.append((fw, f"its {name} rank group: {why[cand.name]}"))
        docs = [_document(side, [s for s in self.scns if s.name not in self.left_out], points, self.answers,
                          env[side.name], self.machine[j], self.plan, self.started, j, self.not_timed, self.not_run)
                for j, side in enumerate(schedule.sides)]
        for doc in docs:  # how the pairs' processes took turns: call by call, or a point at a time; on one CPU or not
            doc["interleaved"]["turns"] = "call" if self.turns else "point"
            doc["interleaved"]["same_cpu"] = bool(self.cpus)
            doc["interleaved"]["host_covariate"] = self.plan.host_covariate
        nc = [(fw, f"did not start on the {s.name} side: {env[s.name][fw]['why']}") for fw in schedule.frameworks
              for s in schedule.sides if not env[s.name][fw]["available"]] + nc
        nc += [("/".join(filter(None, (name, points[name][i].get("label", ""), fw))), why)
               for (name, i, fw), why in self.not_timed.items()]
        lost = [(fw, env[cand.name][fw]["why"]) for fw in schedule.frameworks
                if env[base.name][fw]["available"] and not env[cand.name][fw]["available"]] + lost_groups
        return Outcome(docs, rows, nc, max((r.pairs for r in rows), default=0), schedule.now() - self.t0, stopped,
                       lost, len(self.left), len(self.short), self.stopped_by, self.level,
                       self.plain_why)


def _named(ks: list[int]) -> str:
    """ "pair 5" or "pairs 5-6" for the 0-based pair numbers ks."""
    return f"pair{'s' if len(ks) > 1 else ''} {'-'.join(str(k + 1) for k in ks[::len(ks) - 1 or 1])}"


def _drop_half_pairs(answers: Answers) -> None:
    """After a stop between a pair's two sides, the side ahead keeps no process of that pair: each side's
    file holds paired processes only (a point one side never reached keeps the other's, named as not timed
    there). A side that stopped on a failure is not trimmed: it was not asked again, the other side was."""
    for per_side in answers.values():
        few = min(per_side, key=len)
        if all(per_side) and len(per_side[0]) != len(per_side[1]) and "status" not in few[-1]:
            for got in per_side:
                del got[len(few):]


def _now() -> Any:
    return dt.datetime.now(dt.timezone.utc)


def _rows(answers: Answers, scns: list[Any], points: dict[str, list[Params]], clock: str
          ) -> tuple[list[Paired], list[tuple[str, str]]]:
    """The paired rows (harness/regress/regress.py Paired) from every side's answers; what cannot pair."""
    rows: list[Paired] = []
    nc: list[tuple[str, str]] = []
    for scn in scns:
        for (name, i, fw), per_side in answers.items():
            if name != scn.name:
                continue
            label = points[name][i].get("label", "") or ""  # params: keys are parameter names (data)
            if not all(per_side):  # a stop between the point's two sides: nothing to pair (the run lists it)
                continue
            merged = [processes.merge(a) for a in per_side]  # each side's rows, typed (model.Row), or its failure
            for v in scn.variants:
                what = "/".join(filter(None, (name, label, fw, v.name)))
                got = [_variant(m, v.name) for m in merged]
                st = [g.status or "error" for g in got]
                if "skipped" in st:
                    nc.append((what, f"skipped: {next(g.reason or '' for g in got if g.status == 'skipped')}"))
                    continue
                r = Paired(name, label, fw, v.name, [], [])
                r.point = i
                if st[0] in FAILED and st[1] in FAILED:
                    nc.append((what, f"failed on both sides ({st[0]}, {st[1]}): {got[1].reason or ''}"))
                    continue
                if st[0] in FAILED or st[1] in FAILED:
                    bad = 1 if st[1] in FAILED else 0
                    r.status = f"{st[0]} → {st[1]}: {got[bad].reason or ''}"
                    r.why = f"failed in the {'candidate' if bad else 'baseline'}"
                    rows.append(r)
                    continue
                if "wrong" in st and st[0] != st[1]:
                    wrong = got[1] if st[1] == "wrong" else got[0]
                    r.status = f"{st[0]} → {st[1]}: {(wrong.check.worst if wrong.check else '') or ''}"
                    r.why = f"outputs wrong in the {'candidate' if st[1] == 'wrong' else 'baseline'}"
                    rows.append(r)
                    continue
                med = [process_medians(g, clock) for g in got]
                if med[0] is None or med[1] is None:
                    nc.append((what, f"no {clock} clock"))
                    continue
                n = min(len(med[0]), len(med[1]))
                r.base, r.cand = med[0][:n], med[1][:n]
                r.base_loop, r.cand_loop = (_process_loops(g)[:n] for g in got)
                rows.append(r)
    return rows, nc


def _process_loops(row: Row) -> list[float]:
    """Each process's median of the host's loops beside its repeats (timing.host_loops), in process order; empty
    where the row has none (an older tree's worker, a request that did not ask)."""
    t = row.timing
    loops, counts = (t.host_loops, t.counts("device_done")) if t is not None else (None, None)
    if not loops or not counts or sum(counts) != len(loops):
        return []
    return [float(np.median(p)) for p in split(loops, counts)]


def _variant(merged: Any, variant: str) -> Row:
    """A side's row of variant from processes.merge's rows; a failure (every variant's) as a row of its status."""
    if isinstance(merged, dict):  # a failure: every variant's
        return Row.from_dict(merged)
    return next((r for r in merged[0] if r.variant == variant),
                Row(scenario=None, framework="", variant=variant, status="error", reason="no such row"))


def _document(side: Side, scns: list[Any], points: dict[str, list[Params]], answers: Answers,
              fw_env: dict[str, Hello], machine: Json, plan: Plan, started: Any, j: int,
              not_timed: dict[tuple[str, int, str], str] | None = None,
              not_run: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The side's processes as a result document (harness/run/runner.py's shape, without equivalence);
    a (scenario, point, framework) in not_timed has its rows skipped with its reason; not_run (scenarios
    the budget cut, with why) makes the document incomplete."""

    out: dict[str, Any] = {}
    fws = list(fw_env)
    not_timed = not_timed or {}
    for scn in scns:
        rows: list[Row] = []
        for i, params in enumerate(points[scn.name]):
            for fw in fws:
                a = answers.get((scn.name, i, fw), [[], []])[j]
                cut = not_timed.get((scn.name, i, fw))
                merged = processes.merge(a) if a else {"status": "skipped", "reason": cut} if cut else {
                    "status": fw_env[fw].get("status", "skipped"), "reason": fw_env[fw].get("why", "not timed")}
                base = {"scenario": scn.name, "framework": fw}
                if isinstance(merged, dict):  # a failure, every variant's: its keys as it said them, in that order
                    rows.extend(Row.from_dict(base | {"variant": v.name, "hazard": v.hazard} | merged)
                                for v in scn.variants)
                else:
                    rows.extend(merged[0])
            for r in rows:
                if r.point is None:
                    r.point = i
                if r.label is None:
                    r.label = params.get("label", "")
        out[scn.name] = {"timing_phase": processes.phase(rows, None).to_dict(),  # the side's own requests' round trips
                         "title": scn.title, "concept": scn.concept, "metrics_doc": dict(scn.metrics_doc),
                         "variants": [{"name": v.name, "doc": v.doc, "hazard": v.hazard,
                                       "gpu_only": v.gpu_only if isinstance(v.gpu_only, bool) else list(v.gpu_only)}
                                      for v in scn.variants],
                         "points": [p | {"seed": plan.seed} for p in points[scn.name]], "rows": [r.to_dict() for r in rows],
                         "claims": [], "cross_framework": []}
    opts = CompareOptions(scenarios=[s.name for s in scns], frameworks=fws, size=plan.size, examples=1, seed=plan.seed,
                          equivalence=False, argv=["python -m harness regress (interleaved)", side.name, side.label])
    doc = document(opts, started, fw_env, machine, out, not_run or [], not_placed("all"))
    doc["environment"]["host"]["code"] = side.label
    doc["interleaved"] = {"side": side.name, "code": side.label, "python": side.python, "env": dict(side.env)}
    return doc
