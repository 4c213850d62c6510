"""The scenario x framework x variant loop behind `python -m harness compare`.

Per scenario: equivalence first (hypothesis draws small params; every framework's checked variants
against the float64 reference and each other), then timing of every variant at the size preset,
one framework at a time so that they never share the GPU's time. Each framework runs in a child
process of its own (--isolation process, the default): a crash or hang costs that framework's rows,
marked with what happened, and the rest of the run goes on. A framework lost during equivalence
(its worker hung, died or ran out of memory) is named in the verdict, and the others are checked
against the reference and each other without it.

Each framework's allocator is capped at a fraction of the GPU's memory (--gpu-memory-fraction,
$TRIPTYCH_GPU_MEMORY_FRACTION, 0.3 by default) so that the three worker processes, which live side
by side, fit in it together; the fraction is recorded in the result's environment.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Protocol

import numpy as np

from harness import worker as W
from harness.backends.base import MEMORY_FRACTION_ENV, Unavailable, memory_fraction
from harness.equivalence import compare_key, run_equivalence
from harness.ranks import Groups
from harness.results import SCHEMA
from scenarios import get as get_scenario
from scenarios.spec import Scenario


class UI(Protocol):
    def begin(self, total: int) -> None: ...
    def step(self, text: str) -> None: ...
    def detail(self, text: str) -> None: ...
    def advance(self) -> None: ...
    def note(self, text: str) -> None: ...
    def end(self) -> None: ...


@dataclass
class CompareOptions:
    scenarios: list[str]
    frameworks: list[str]
    size: str
    examples: int
    seed: int
    isolation: str = "process"
    timeout_s: float = 900.0
    equivalence: bool = True
    timing: bool = True
    argv: list[str] = field(default_factory=list)
    gpu_memory_fraction: float | None = None  # None: $TRIPTYCH_GPU_MEMORY_FRACTION or the default
    budget_s: float | None = None  # wall-clock budget: no new scenario starts once it is spent
    world_size: int | None = None  # ranks per framework for rank scenarios (None: GPUs, or 2)


class Stopped(BaseException):  # like KeyboardInterrupt: no `except Exception` may swallow it
    """SIGTERM during a run (SIGINT arrives as KeyboardInterrupt): finish what is done, start nothing."""


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """A run stopped from outside (a job's time limit, `timeout`) keeps the scenarios it finished:
    SIGTERM raises Stopped in the main thread instead of ending the process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        _STOP_SIGNAL[0] = signal.Signals(signum).name
        raise Stopped(_STOP_SIGNAL[0])

    _STOP_SIGNAL[0] = None
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# The signal that raised Stopped, kept because code the signal lands in may swallow the exception:
# hypothesis, interrupted mid-example, reports an internal AssertionError instead of re-raising it.
_STOP_SIGNAL: list[str | None] = [None]


def host_env() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
    }
    try:
        import hypothesis

        env["hypothesis"] = hypothesis.__version__
    except ImportError:  # pragma: no cover - a dependency
        pass
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        if q.returncode == 0 and q.stdout.strip():
            name, driver = [s.strip() for s in q.stdout.strip().splitlines()[0].split(",")]
            env["nvidia_smi_gpu"], env["driver"] = name, driver
    except (OSError, subprocess.TimeoutExpired):
        pass
    env["code"] = code_version()
    return env


def code_version() -> str | None:
    """The project's git commit, with "+dirty" when the tree has uncommitted changes to tracked files;
    None where the tree has no .git (a copied working tree, e.g. on a lent GPU machine)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def judge_claims(scn: Scenario, params: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    verdicts = []
    frameworks = sorted({r["framework"] for r in rows if r["status"] == "ok"}, key=lambda f: W.backends.FRAMEWORKS.index(f))
    for claim in scn.claims:
        for fw in frameworks:
            by_variant = {r["variant"]: r for r in rows if r["framework"] == fw and r["status"] == "ok"}
            try:
                v = claim.judge(by_variant, fw, params)
            except KeyError as e:  # a variant the claim needs did not run for this framework
                verdicts.append({"claim": claim.id, "text": claim.text, "framework": fw,
                                 "verdict": "inconclusive", "evidence": f"variant {e} did not run", "numbers": {}})
                continue
            verdicts.append({"claim": claim.id, "text": claim.text, "framework": fw, "verdict": v.verdict,
                             "evidence": v.evidence, "numbers": dict(v.numbers)})
    return verdicts


def cross_check(scn: Scenario, params: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where timed outputs were checked against each framework's own baseline (the reference being
    too costly at this size), compare the baselines' samples across frameworks."""
    samples = [(r["framework"], r.pop("sample")) for r in rows if "sample" in r]
    if len(samples) < 2:
        return None
    (fa, a), problems = samples[0], []
    for fb, b in samples[1:]:
        for key, va in a.items():
            m = compare_key(scn, params, key, b.get(key, np.array([])), va, widen=2.0)
            if m is not None:
                problems.append(f"{fa} vs {fb}: {m.describe()}")
    return {"frameworks": [f for f, _ in samples], "status": "agree" if not problems else "disagree",
            "elements": int(sum(np.asarray(v).size for v in a.values())), "problems": problems}


def run_compare(opts: CompareOptions, ui: UI) -> dict[str, Any]:
    started = _dt.datetime.now(_dt.timezone.utc)
    if opts.gpu_memory_fraction is not None:
        os.environ[MEMORY_FRACTION_ENV] = repr(opts.gpu_memory_fraction)  # worker processes inherit it
    workers = {fw: W.make_worker(fw, opts.isolation) for fw in opts.frameworks}
    fw_env: dict[str, Any] = {}
    available: list[str] = []
    scenarios = [get_scenario(s) for s in opts.scenarios]
    steps = sum(int(opts.equivalence) + (len(opts.frameworks) * len(s.points(opts.size)) if opts.timing else 0)
                for s in scenarios)
    ui.begin(len(opts.frameworks) + steps)
    t_start = time.perf_counter()
    stopped: str | None = None
    not_run: list[dict[str, str]] = []
    out_scenarios: dict[str, Any] = {}
    machine: dict[str, float] = {}
    rank_groups = Groups(opts.frameworks, opts.world_size, opts.timeout_s)  # started by the first rank scenario
    try:
        with _stop_on_sigterm():
            _start_phase(workers, opts, ui, fw_env, available, machine)
            for scn in scenarios:
                if stopped is None and opts.budget_s is not None and time.perf_counter() - t_start >= opts.budget_s:
                    stopped = f"the --budget of {opts.budget_s:g} s was spent before it started"
                    ui.note(f"budget spent: {', '.join(x.name for x in scenarios[len(out_scenarios):])} not run")
                if stopped is not None:
                    not_run.append({"scenario": scn.name, "why": stopped})
                    continue
                try:
                    t_scn = time.perf_counter()
                    done = _run_scenario(scn, *rank_groups.for_scenario(scn, workers, available, fw_env),
                                         machine, opts, ui)
                    if _STOP_SIGNAL[0] is not None:  # swallowed on the way: this scenario's rows are not whole
                        raise Stopped(_STOP_SIGNAL[0])
                    out_scenarios[scn.name] = done
                    out_scenarios[scn.name]["wall_s"] = time.perf_counter() - t_scn
                except (Stopped, KeyboardInterrupt) as e:
                    stopped = f"the run was stopped ({str(e) or 'SIGINT'}) during {scn.name}"
                    not_run.append({"scenario": scn.name, "why": stopped})
                    ui.note(f"{stopped}: the scenarios finished before it are kept")
    except (Stopped, KeyboardInterrupt) as e:  # while the frameworks started
        stopped = f"the run was stopped ({str(e) or 'SIGINT'}) while the frameworks started"
        not_run = [{"scenario": x.name, "why": stopped} for x in scenarios]
    finally:
        for w in workers.values():
            w.close()
        rank_groups.close()
        ui.end()
    return _document(opts, started, fw_env, machine, out_scenarios, not_run)


def _start_phase(workers: dict[str, Any], opts: CompareOptions, ui: UI, fw_env: dict[str, Any],
                 available: list[str], machine: dict[str, float]) -> None:
    """Start every framework's worker side by side; on a full-size GPU run, measure the ceilings."""
    ui.step(f"starting {', '.join(workers)}")
    for fw, info in _start_all(workers, opts).items():
        fw_env[fw] = info
        if info["available"]:
            available.append(fw)
        else:
            ui.note(f"{fw}: {info.get('status', 'skipped')} — {info['why']}")
        ui.advance()

    if "cupy" in available and opts.timing and opts.size == "full":
        ui.step("measuring the machine's ceilings (raw CUDA via CuPy)")
        try:
            machine.update(workers["cupy"].request("ceilings", timeout=opts.timeout_s))
        except (W.WorkerError, W.WorkerLost) as e:
            ui.note(f"ceilings not measured: {e}")


def _document(opts: CompareOptions, started: _dt.datetime, fw_env: dict[str, Any], machine: dict[str, float],
              out_scenarios: dict[str, Any], not_run: list[dict[str, str]]) -> dict[str, Any]:
    gpu = next((e["env"].get("gpu") for e in fw_env.values() if e.get("env", {}).get("gpu")), None)
    return {
        "schema": SCHEMA,
        "created": started.isoformat(timespec="seconds"),
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": opts.argv,
        "size": opts.size,
        "seed": opts.seed,
        "examples": opts.examples,
        "isolation": opts.isolation,
        "environment": {"gpu": gpu, "host": host_env(), "frameworks": fw_env, "machine": machine,
                        "gpu_memory_fraction": _fraction_in_effect()},
        "scenarios": out_scenarios,
        "complete": not not_run,
        "not_run": not_run,  # scenarios asked for but not run (budget spent, run stopped), with why
    }


def _run_scenario(scn: Scenario, workers: dict[str, Any], available: list[str], fw_env: dict[str, Any],
                  machine: dict[str, float], opts: CompareOptions, ui: UI) -> dict[str, Any]:
    """Equivalence, then timing of every point x framework x variant, claims and cross-checks."""
    entry: dict[str, Any] = {"title": scn.title, "concept": scn.concept,
                             "variants": [{"name": v.name, "doc": v.doc, "hazard": v.hazard,
                                           "gpu_only": v.gpu_only if isinstance(v.gpu_only, bool)
                                           else list(v.gpu_only)} for v in scn.variants]}
    if opts.equivalence:
        ui.step(f"{scn.name} · equivalence ({opts.examples} examples, {', '.join(available) or 'none'})")
        entry["equivalence"] = eq = _equivalence(scn, workers, available, opts)
        if eq["status"] == "failed":
            ui.note(f"{scn.name}: EQUIVALENCE FAILED\n{eq['message']}")
        ui.advance()
    rows: list[dict[str, Any]] = []
    points = [p | {"seed": opts.seed} for p in scn.points(opts.size)]
    entry["points"] = points
    if opts.timing:
        cfg = W.timing_config(opts.size)
        entry["claims"], entry["cross_framework"] = [], []
        for i, params in enumerate(points):
            label = params.get("label", "")
            point_rows: list[dict[str, Any]] = []
            for fw in opts.frameworks:
                ui.step(f"{scn.name}{' · ' + label if label else ''} · {fw} · timing")
                point_rows.extend(_time_one(workers[fw], fw, scn, params, cfg, fw_env[fw], opts.timeout_s, ui))
                ui.advance()
            for r in point_rows:
                r["point"], r["label"] = i, label
                _add_floor(scn, params, machine, r)
            xc = cross_check(scn, params, point_rows)
            if xc is not None:
                entry["cross_framework"].append(xc | {"point": i, "label": label})
            entry["claims"].extend(c | {"point": i, "label": label} for c in judge_claims(scn, params, point_rows))
            rows.extend(point_rows)
    entry["rows"] = rows
    return entry


def _fraction_in_effect() -> float | str:
    try:
        return memory_fraction()
    except Unavailable as e:
        return str(e)


class _FrameworkLost(RuntimeError):
    pass


def _equivalence(scn: Scenario, workers: dict[str, Any], frameworks: list[str], opts: CompareOptions) -> dict[str, Any]:
    """Equivalence of the frameworks' checked variants. A framework whose worker is lost (hung, died,
    out of memory) fails the verdict with what happened, and the rest are checked again without it."""
    excluded: dict[str, str] = {}
    remaining = list(frameworks)
    while True:
        lost: dict[str, str] = {}

        def execute(fw: str, params: dict[str, Any]) -> Any:
            if not lost:
                try:
                    return workers[fw].request("equiv", scn.name, params, timeout=opts.timeout_s)
                except W.WorkerLost as e:
                    lost[fw] = f"{e.status}: {e}"
                except W.WorkerError as e:
                    if e.status != "oom":
                        raise  # an impl that raises on some params: hypothesis shrinks to the smallest
                    lost[fw] = f"{e.status}: {e}"
            # Sticky: while hypothesis shrinks, no example waits for a lost worker again.
            fw, why = next(iter(lost.items()))
            raise _FrameworkLost(f"{scn.name}/{fw}: {why}")

        eq = run_equivalence(scn, execute, remaining, opts.examples, seed=opts.seed)
        if _STOP_SIGNAL[0] is not None:  # a stop that hypothesis reported as a failure is a stop
            raise Stopped(_STOP_SIGNAL[0])
        if not lost:
            break
        excluded |= lost
        remaining = [f for f in remaining if f not in lost]
        if not remaining:
            break
    d = eq.to_dict()
    if excluded:
        gone = "; ".join(f"{fw} {why}" for fw, why in excluded.items())
        rest = (f"the others ({', '.join(remaining)}) {eq.status} over {eq.examples} examples"
                + (f": {eq.message}" if eq.message and remaining else "")) if remaining else "no framework left"
        d |= {"status": "failed", "frameworks": list(frameworks), "excluded": excluded,
              "message": f"{scn.name}: lost during equivalence: {gone}; {rest}"}
    return d


def _start_all(workers: dict[str, Any], opts: CompareOptions) -> dict[str, dict[str, Any]]:
    """Import each framework and pick its device; child processes start side by side."""

    def hello(w: Any) -> dict[str, Any]:
        try:
            return w.request("hello", timeout=opts.timeout_s)
        except (W.WorkerError, W.WorkerLost) as e:  # broken (crashed, hung, raised): failed, not skipped
            return {"available": False, "why": f"failed to start: {e}", "env": {}, "on_gpu": False,
                    "status": e.status}

    if opts.isolation != "process":
        return {fw: hello(w) for fw, w in workers.items()}
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(len(workers))
    try:
        futures = {fw: pool.submit(hello, w) for fw, w in workers.items()}
        return {fw: f.result() for fw, f in futures.items()}
    except BaseException:  # a stop while a framework hangs at start-up: kill, do not wait out its timeout
        for w in workers.values():
            w.kill()
        raise
    finally:
        pool.shutdown(wait=False)


def _time_one(w: Any, fw: str, scn: Scenario, params: dict[str, Any], cfg: Any, info: dict[str, Any],
              timeout: float, ui: UI) -> list[dict[str, Any]]:
    base = {"scenario": scn.name, "framework": fw}
    if not info["available"]:  # "skipped" (not installed, no GPU) or how its start failed
        return [base | {"variant": v.name, "hazard": v.hazard, "status": info.get("status", "skipped"),
                        "reason": info["why"]}
                for v in scn.variants]
    try:
        rows = w.request("time", scn.name, params, cfg, timeout=timeout,
                         progress=lambda text: ui.detail(f"{scn.name} · {fw} · {text}"))
        for r in rows:  # said at once, not only in the table at the end (a run may not get there)
            if r["status"] == "wrong":
                ui.note(f"{scn.name}/{fw}/{r['variant']}: WRONG — {r['check']['worst']}")
        return rows
    except (W.WorkerLost, W.WorkerError) as e:  # timeout / crashed; error / oom
        status, reason = e.status, str(e)
    ui.note(f"{scn.name}/{fw}: {status} — {reason}")
    return [base | {"variant": v.name, "hazard": v.hazard, "status": status, "reason": reason} for v in scn.variants]


def _add_floor(scn: Scenario, params: dict[str, Any], machine: dict[str, float], row: dict[str, Any]) -> None:
    if row.get("status") not in ("ok", "wrong") or scn.floor is None or not machine:
        return
    floor = scn.floor(params, machine, row["variant"])
    if floor:
        row["floor_s"] = floor
        row["pct_of_floor"] = 100.0 * floor / row["timing"]["device_done"]["median"]
