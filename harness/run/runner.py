"""The scenario x framework x variant loop behind `python -m harness compare`: one Run.

Per scenario: equivalence first (hypothesis draws small params; every framework's checked variants
against the float64 reference and each other; harness/run/equiv_phase.py), then timing of every variant
at the size preset, one framework at a time so that they never share the GPU's time, each point in
two (CompareOptions.processes) worker processes per framework, interleaved (harness/workers/processes.py).
Each framework runs in child processes of its own (--isolation process, the default): a crash or
hang costs that framework's rows, marked with what happened, and the rest of the run goes on.

Each framework's allocator is capped at a fraction of the GPU's memory (--gpu-memory-fraction,
$TRIPTYCH_GPU_MEMORY_FRACTION, 0.15 by default) so that the six worker processes, which live side
by side, fit in it together; the fraction is recorded in the result's environment. Every process
measures the host's speed at its start (harness/measure/calibrate.py), recorded beside the GPU ceilings.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from harness.measure import calibrate
from harness.measure.calibrate import Calibration
from harness.run import stops
from harness.workers import cpus, point_cache, processes
from harness.backends import backend_class, ceilings_framework
from harness.backends.base import DEFAULT_MEMORY_FRACTION, MEMORY_FRACTION_ENV, Unavailable, memory_fraction
from harness.run.equiv_phase import equivalence, examples
from harness.check.judging import cross_check, judge_claims
from harness.report.labels import NAMES
from harness.measure.machine import Facts, host_env
from harness.results.model import Json, Phase, Row
from harness.run.options import CompareOptions, UI
from harness.run.parser import UsageError
from harness.workers.ranks import Groups, Workers
from harness.results.results import SCHEMA
from harness.run.stops import Stopped
from harness.measure.timing import preset
from harness.workers.protocol import Hello
from harness.workers.worker import WorkerError, WorkerLost, make_worker
from scenarios import get as get_scenario
from scenarios.spec import Arrays, Params, Scenario
from harness.workers.ranks import default_world_size
from scenarios import ORDER

__all__ = ["CompareOptions", "UI", "Stopped", "Run", "run_compare", "document"]


NOT_REACHED = "not reached: the run was still going when this checkpoint was written"


def run_compare(opts: CompareOptions, ui: UI,
                checkpoint: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The run's result document (Run.execute). checkpoint(document so far), where given, after every
    scenario: a run killed outright (SIGKILL, a machine that dies) leaves what it had finished."""
    return Run(opts, ui, checkpoint).execute()


class Run:
    """One compare run and all its state: the options, the progress UI, the timing processes
    (processes.Processes) and the rank groups, the frameworks that started and their environment, the
    machine ceilings, the stop state (stopped, not_run, the budget), and the GPU-memory cap its processes
    share. One object, so that the phases are methods rather than functions handing that state around.
    Nothing starts before execute()."""

    def __init__(self, opts: CompareOptions, ui: UI,
                 checkpoint: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.opts, self.ui = opts, ui
        self.checkpoint = checkpoint  # called with the document so far after every scenario (run_compare)
        self._host: Facts | None = None  # host_env() for the checkpoints, asked at the first
        self.processes: processes.Processes = []  # made in execute(); started by start()
        self.groups: Groups | None = None  # the rank groups, started by the first rank scenario
        self.available: list[str] = []  # the frameworks whose every timing process started
        self.fw_env: dict[str, Hello] = {}  # per framework: what its hello said (available, why, env, on_gpu)
        self.machine: Json = {}  # the host's calibration and the GPU's ceilings (free-form: model.Environment.machine)
        self.scenarios: list[Scenario] = [get_scenario(s) for s in opts.scenarios]
        self.done: dict[str, Any] = {}  # the result's scenarios, as each finishes
        self.stopped: str | None = None  # why the run stopped early (budget spent, a signal), or None
        self.not_run: list[dict[str, str]] = []  # scenarios asked for but not run, with why
        self.placed: dict[str, Any] = cpus.not_placed(opts.cpus)  # the CPUs kept (harness/workers/cpus.py)
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self.t_start = time.perf_counter()

    # -- the GPU memory the run's processes share ---------------------------------------------------

    @staticmethod
    def default_memory_fraction(n_processes: int, frameworks: list[str]) -> float | None:
        """The cap a run without --gpu-memory-fraction (and without $TRIPTYCH_GPU_MEMORY_FRACTION) gets:
        the backends' default, lowered where JAX's pools (a worker and a rank group per process, each keeping
        its pool) would not fit in the GPU together; None: the backends' default as it is."""
        if (not any(backend_class(f).keeps_pool for f in frameworks)
                or DEFAULT_MEMORY_FRACTION * 2 * n_processes <= 1.0):
            return None
        return math.floor(100 / (2 * n_processes)) / 100

    @staticmethod
    def memory_fraction(asked: float | None, n_processes: int, frameworks: list[str]) -> float | None:
        """The cap to set: the one asked for; else None where $TRIPTYCH_GPU_MEMORY_FRACTION says it; else
        the default (default_memory_fraction: JAX's pools must fit)."""
        if asked is not None or os.environ.get(MEMORY_FRACTION_ENV, "").strip():
            return asked
        return Run.default_memory_fraction(n_processes, frameworks)

    @staticmethod
    def check_memory_fits(fraction: float | None, frameworks: list[str], n_processes: int,
                          scenarios: Sequence[str] | None, gpu_present: Callable[[], bool],
                          size: str | None = None, gpu_memory: Callable[[], int | None] = lambda: None,
                          world_size: int | None = None, label: str = "", processes_option: bool = True) -> None:
        """UsageError where the frameworks' caps would not fit in the GPU together (fraction None: the one
        $TRIPTYCH_GPU_MEMORY_FRACTION or the default gives), or where the cap is below what a selected
        scenario's point at `size` holds a process of a selected framework (Scenario.device_bytes, at
        world_size, default the run's; gpu_memory(): the GPU's bytes, None off a GPU, where nothing is
        asked). scenarios: those selected (None: any may run); rank groups are counted only where one needs
        them. JAX's pools are counted only where gpu_present() (asked last: it runs nvidia-smi). label: how
        the message names a cap the caller chose itself; processes_option: whether --processes is the
        caller's to suggest."""
        if fraction is None:
            try:
                fraction = memory_fraction()
            except Unavailable as e:
                raise UsageError(str(e)) from None
            where = label or f"{MEMORY_FRACTION_ENV}={fraction:g}"
        else:
            where = label or f"--gpu-memory-fraction {fraction:g}"
        n_frameworks = len(frameworks)
        if fraction * n_frameworks > 1.0 + 1e-9:
            raise UsageError(f"{where} x {n_frameworks} frameworks is {fraction * n_frameworks:.2f} of the GPU: "
                             "they would not fit in it together")
        ranks = scenarios is None or any(getattr(get_scenario(s), "ranks", False) for s in scenarios)
        keepers = [NAMES[f] for f in frameworks if backend_class(f).keeps_pool]
        pool_processes = n_processes * (2 if ranks else 1)  # each worker, and each process's rank group, keeps a pool
        if keepers and fraction * pool_processes > 1.0 + 1e-9 and gpu_present():
            held = (f"{n_processes} workers and as many rank groups" if ranks
                    else f"{n_processes} workers; no rank scenario is selected")
            raise UsageError(f"{where} x {pool_processes} {'/'.join(keepers)} processes ({held}, each keeping its "
                             f"pool) is {fraction * pool_processes:.2f} of the GPU: use --gpu-memory-fraction "
                             f"{math.floor(100 / pool_processes) / 100:g} or fewer --processes")
        total = gpu_memory() if size is not None else None
        need = Run.largest_need(scenarios, size, frameworks, world_size) if total else None
        if need is not None and fraction * total < need[0]:
            gib, enough = 2.0**30, Run.smallest_fraction(need[0], total)
            most = math.floor(1 / (enough * pool_processes / n_processes) + 1e-9) if keepers else n_processes
            fewer = ("" if not processes_option or most >= n_processes else f" with --processes {most} or fewer"
                     if most else f" (more than {'/'.join(keepers)}'s pools, a worker's and a rank group's, leave "
                                  "room for: run the point without it)")
            raise UsageError(f"{need[1]} at {need[2]} holds at least {need[0] / gib:.2f} GiB in a {NAMES[need[3]]} "
                             f"process (the buffers its impl keeps at once); {where} gives {fraction * total / gib:.2f} "
                             f"GiB of this GPU's {total / gib:.1f}: use --gpu-memory-fraction {enough:.2f} or more"
                             f"{fewer}")

    @staticmethod
    def smallest_fraction(need: int, total: int) -> float:
        """The smallest --gpu-memory-fraction, in hundredths, whose cap holds `need` bytes of a `total`-byte GPU."""
        return math.ceil(100 * need / total) / 100

    @staticmethod
    def largest_need(scenarios: Sequence[str] | None, size: str, frameworks: Sequence[str],
                     world_size: int | None = None) -> tuple[int, str, str, str] | None:
        """(bytes, scenario, point label, framework) of the selected point and framework whose process holds
        the most (Scenario.device_bytes) at world_size (None: the run's default, the number of GPUs), or None
        where no selected scenario says."""

        best = None
        for name in scenarios if scenarios is not None else ORDER:
            scn = get_scenario(name)
            if scn.device_bytes is None or size not in scn.sizes:
                continue
            world = (world_size or default_world_size()) if scn.ranks else None
            for i, p in enumerate(scn.points(size, world)):
                at = p | {"world_size": p.get("world_size", world)} if world else p
                for fw in frameworks:
                    b = int(scn.device_bytes(at, fw))
                    if best is None or b > best[0]:
                        best = (b, name, p.get("label") or str(i), fw)
        return best

    # -- the run ------------------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        """The run's result document, also when it was stopped (Ctrl-C, SIGTERM) at any moment after it
        started measuring. It returns with stops deferred (harness/run/stops.py) where a caller's
        stops.handling() holds them, so that the caller writes the document before any signal is honoured."""
        with stops.handling():
            return self._execute()

    def _execute(self) -> dict[str, Any]:
        opts, ui = self.opts, self.ui
        self.started = _dt.datetime.now(_dt.timezone.utc)
        if opts.gpu_memory_fraction is not None:
            os.environ[MEMORY_FRACTION_ENV] = repr(opts.gpu_memory_fraction)  # worker processes inherit it
        self.processes = [{fw: make_worker(fw, opts.isolation) for fw in opts.frameworks}
                          for _ in range(opts.timing_processes if opts.timing else 1)]
        self.groups = Groups(opts.frameworks, opts.world_size, opts.timeout_s)  # started by the first rank scenario
        steps = sum(int(opts.equivalence) + (len(opts.frameworks) * len(s.points(opts.size, self.groups.world_size))
                                             if opts.timing else 0) for s in self.scenarios)
        ui.begin(len(opts.frameworks) + steps)
        self.t_start = time.perf_counter()
        affinity, ticks = cpus.allowed(), cpus.cpu_times()
        cache: str | None = None
        started_up = False
        try:
            self.placed = cpus.place(opts.cpus, ui.step)  # before any process starts: each inherits the CPUs kept
            cache = point_cache.start()  # before any worker starts (workers start lazily, below): they inherit its name
            self.start()
            started_up = True
            for scn in self.scenarios:
                self._run_or_skip(scn)
            stops.defer()  # measured: from here on a signal waits until the result is written
        except (Stopped, KeyboardInterrupt) as e:  # while the frameworks started, or between two scenarios
            stops.defer()
            self.stop(f"the run was stopped ({str(e) or 'SIGINT'}) "
                      + ("between two scenarios" if started_up else "while the frameworks started"))
        finally:
            stops.defer()
            self.close(10.0 if self.stopped is None else 1.0)  # a stopped run ends now: busy workers are killed
            if cache is not None:
                point_cache.stop(cache)
            cpus.restore(affinity)  # a caller in this process (the tests) gets its CPUs back
            ui.end()
        self.placed["steal_share"] = cpus.steal_share(ticks, cpus.cpu_times())
        return self.document()

    def _run_or_skip(self, scn: Scenario) -> None:
        """Run scn into self.done, or say in not_run why not (budget spent, run stopped)."""
        opts = self.opts
        if self.stopped is None and opts.budget_s is not None and time.perf_counter() - self.t_start >= opts.budget_s:
            self.stopped = f"the --budget of {opts.budget_s:g} s was spent before it started"
            self.ui.note(f"budget spent: {', '.join(x.name for x in self.scenarios[len(self.done):])} not run")
        if self.stopped is not None:
            self.not_run.append({"scenario": scn.name, "why": self.stopped})
            return
        try:
            t_scn = time.perf_counter()
            done = self.scenario(scn)
            stops.raise_if_stopped()  # swallowed on the way: this scenario's rows are not whole
            self.done[scn.name] = done
            self.done[scn.name]["wall_s"] = time.perf_counter() - t_scn
        except (Stopped, KeyboardInterrupt) as e:
            stops.defer()
            self.stopped = f"the run was stopped ({str(e) or 'SIGINT'}) during {scn.name}"
            self.not_run.append({"scenario": scn.name, "why": self.stopped})
            self.ui.note(f"{self.stopped}: the scenarios finished before it are kept")
            return
        self._checkpoint()  # scn is done: a stop from here on is one between two scenarios

    def stop(self, why: str) -> None:
        """The run stopped: every scenario neither done nor already in not_run is not run, for why."""
        self.stopped = why
        self.not_run += self._unsaid(why)

    def _unsaid(self, why: str) -> list[dict[str, str]]:
        """not_run entries, for why, of the scenarios neither done nor already in not_run."""
        said = set(self.done) | {n["scenario"] for n in self.not_run}
        return [{"scenario": x.name, "why": why} for x in self.scenarios if x.name not in said]

    def close(self, grace: float) -> None:
        """Every worker and rank group closed, each given grace seconds to finish."""
        for proc in self.processes:
            for w in proc.values():
                w.close(grace)
        if self.groups is not None:
            self.groups.close(grace)

    def start(self) -> None:
        """Start every worker side by side; each measures the host's speed; on a full-size GPU run, the
        first worker of the backend that measures ceilings (backends.ceilings_framework) measures the GPU's."""
        opts, ui, procs = self.opts, self.ui, self.processes
        ui.step(f"starting {', '.join(procs[0])}" + (f" ({len(procs)} processes each)" if len(procs) > 1 else ""))
        for fw, info in self._hello_all().items():
            self.fw_env[fw] = info
            if info["available"]:
                self.available.append(fw)
            else:
                ui.note(f"{fw}: {info.get('status', 'skipped')} — {info['why']}")
            ui.advance()
        if opts.timing:
            ui.step("measuring the host's speed in every process (tiny op, Python loop)")
            self.machine["calibration"] = {fw: [self._calibrate(proc[fw]) for proc in procs] for fw in self.available}
        meter = ceilings_framework()
        if meter in self.available and opts.timing and opts.size == "full":
            ui.step(f"measuring the machine's ceilings (raw CUDA via {NAMES[meter]})")
            try:
                self.machine.update(procs[0][meter].request("ceilings", timeout=opts.timeout_s))
            except (WorkerError, WorkerLost) as e:
                ui.note(f"ceilings not measured: {e}")

    def _calibrate(self, w: Any) -> Calibration:
        try:
            return w.request("calibrate", timeout=self.opts.timeout_s)
        except (WorkerError, WorkerLost) as e:
            return {"error": str(e)}

    def _hello_all(self) -> dict[str, Hello]:
        """Import each framework and pick its device in every worker, child processes side by side; a
        framework is available where every one of its workers started."""
        opts = self.opts

        def hello(w: Any) -> Hello:
            try:
                return w.request("hello", timeout=opts.startup_timeout_s)
            except (WorkerError, WorkerLost) as e:  # broken (crashed, hung, raised): failed, not skipped
                return {"available": False, "why": f"failed to start: {e}", "env": {}, "on_gpu": False,
                        "status": e.status}

        workers = [(fw, w) for proc in self.processes for fw, w in proc.items()]
        if opts.isolation != "process":
            infos = [hello(w) for _, w in workers]
        else:
            ex = ThreadPoolExecutor(len(workers))
            try:
                infos = list(ex.map(lambda fw_w: hello(fw_w[1]), workers))
            except BaseException:  # a stop while a framework hangs at start-up: kill, do not wait out its timeout;
                for _, w in workers:  # for good: a thread about to start a worker starts none
                    w.stop()
                raise
            finally:
                ex.shutdown(wait=False)
        out: dict[str, Hello] = {}
        for (fw, _), info in zip(workers, infos):
            if fw not in out or (out[fw]["available"] and not info["available"]):
                out[fw] = info
        return out

    def workers_for(self, scn: Scenario) -> Workers:
        """The timing processes, available frameworks and environments that run scn: the single workers,
        or for a rank scenario the rank groups (started by the first that needs them)."""
        single = Workers(self.processes, self.available, self.fw_env)
        return self.groups.for_scenario(scn, *single) if self.groups is not None else single

    def scenario(self, scn: Scenario) -> dict[str, Any]:
        """Equivalence, then timing of every point x framework x variant, claims and cross-checks."""
        opts, ui = self.opts, self.ui
        w = self.workers_for(scn)
        entry: dict[str, Any] = {"title": scn.title, "concept": scn.concept, "metrics_doc": dict(scn.metrics_doc),
                                 "variants": [{"name": v.name, "doc": v.doc, "hazard": v.hazard,
                                               "gpu_only": v.gpu_only if isinstance(v.gpu_only, bool)
                                               else list(v.gpu_only)} for v in scn.variants]}
        if opts.equivalence:
            ui.step(f"{scn.name} · equivalence ({examples(scn, opts)} examples, {', '.join(w.available) or 'none'})")
            entry["equivalence"] = eq = equivalence(scn, w.processes[0], w.available, opts, stops.raise_if_stopped)
            if eq["status"] == "failed":
                ui.note(f"{scn.name}: EQUIVALENCE FAILED\n{eq['message']}")
            ui.advance()
        rows: list[Row] = []
        on_cpu = frozenset(fw for fw, e in w.env.items() if e.get("available") and not e.get("on_gpu"))
        # the seed is the requests' own (harness/workers/protocol.py); one point an operation at one rank
        points = scn.points(opts.size, self.groups.world_size if self.groups is not None else opts.world_size)
        entry["points"] = [p | {"seed": opts.seed} for p in points]
        if opts.timing:
            why = self.rank_ceilings(scn, points, w)
            if why:
                entry["floor_why"] = why
            entry["claims"], entry["cross_framework"] = [], []
            t_timing = time.perf_counter()
            for i, params in enumerate(points):
                label = params.get("label", "")
                typed, samples = self.time_point(scn, params, w)
                point_cache.clear()
                for r in typed:
                    r.point, r.label = i, label
                    add_floor(scn, params, self.machine, r)
                xc = cross_check(scn, params, samples)
                if xc is not None:
                    xc.point, xc.label = i, label
                    entry["cross_framework"].append(xc.to_dict())
                for c in judge_claims(scn, params, typed, on_cpu):
                    c.point, c.label = i, label
                    entry["claims"].append(c.to_dict())
                rows.extend(typed)
            entry["timing_phase"] = processes.phase(rows, time.perf_counter() - t_timing).to_dict()
        entry["rows"] = [r.to_dict() for r in rows]  # the document is plain data until it is written
        return entry

    def rank_ceilings(self, scn: Scenario, points: list[Params], w: Workers) -> str | None:
        """A rank scenario's raw floors, measured by the ranks of the backend that measures ceilings before its
        timing, into the machine ceilings (as the raw cudaMemcpy rates are at the start); why some or all are
        absent, or None."""
        if not scn.rank_ceilings:
            return None
        meter = ceilings_framework()
        if meter is None:
            return "no raw floor: no backend measures it"
        if meter not in w.available:
            return f"no raw floor: it is measured by the {NAMES[meter]} ranks (NCCL), " + (
                f"unavailable here ({w.env[meter]['why']})" if meter in w.env else "not in this run")
        self.ui.step(f"{scn.name} · raw floor (the {NAMES[meter]} ranks, NCCL without a framework)")
        try:
            got = w.processes[0][meter].request("ceilings", points=points, timeout=self.opts.timeout_s)
        except (WorkerError, WorkerLost) as e:
            self.ui.note(f"{scn.name}: raw floor not measured: {e}")
            return f"raw floor not measured: {e}"
        self.machine.update(got["ceilings"])
        return "; ".join(f"{k}: {why}" for k, why in got["not_measured"].items()) or None

    def time_point(self, scn: Scenario, params: Params,
                   w: Workers) -> tuple[list[Row], list[tuple[str, Arrays]]]:
        """(every framework's rows at this point, [(framework, baseline output sample)])."""
        opts, ui, fw_env = self.opts, self.ui, w.env
        label = params.get("label", "")
        where = f"{scn.name}{' · ' + label if label else ''}"
        running = [fw for fw in opts.frameworks if fw_env[fw]["available"]]
        got = processes.time_point(w.processes, running, scn, params, opts.timing_config or preset(opts.size),
                                   opts.timeout_s, lambda fw, text: ui.step(f"{where} · {fw} · {text}"),
                                   lambda fw, text: ui.detail(f"{where} · {fw} · {text}"), seed=opts.seed)
        rows: list[Row] = []
        samples: list[tuple[str, Arrays]] = []
        for fw in opts.frameworks:
            merged = processes.merge(got[fw]) if fw in got else {"status": fw_env[fw].get("status", "skipped"),
                                                                 "reason": fw_env[fw]["why"]}
            if isinstance(merged, dict):
                if merged["status"] != "skipped":
                    ui.note(f"{scn.name}/{fw}: {merged['status']} — {merged['reason']}")
                rows.extend(Row(scenario=scn.name, framework=fw, variant=v.name, hazard=v.hazard,
                                status=merged["status"], reason=merged["reason"]) for v in scn.variants)
            else:
                fw_rows, sample = merged
                for r in fw_rows:  # said at once, not only in the table at the end (a run may not get there)
                    if r.status == "wrong":
                        ui.note(f"{scn.name}/{fw}/{r.variant}: WRONG — {r.check.worst if r.check else ''}")
                rows.extend(fw_rows)
                if sample is not None:
                    samples.append((fw, sample))
            ui.advance()
        return rows, samples

    def document(self) -> dict[str, Any]:
        """The run's result document from what it holds now."""
        return document(self.opts, self.started, self.fw_env, self.machine, self.done, self.not_run, self.placed)

    def _checkpoint(self) -> None:
        """The document so far to self.checkpoint, the scenarios still to come in not_run as not reached;
        a checkpoint that cannot be written is said once and the run goes on (the final write rescues)."""
        if self.checkpoint is None:
            return
        ahead = self._unsaid(NOT_REACHED)
        try:
            if self._host is None:  # once: nvidia-smi and git are not asked again after every scenario
                self._host = host_env()
            self.checkpoint(document(self.opts, self.started, self.fw_env, self.machine, self.done,
                                     self.not_run + ahead, self.placed, host=self._host))
        except OSError as e:
            self.ui.note(f"checkpoint not written ({e.strerror or e}); the run goes on and writes its result "
                         "at the end")
            self.checkpoint = None


def document(opts: CompareOptions, started: _dt.datetime, fw_env: dict[str, Hello], machine: Json,
             out_scenarios: dict[str, Any], not_run: list[dict[str, str]], placed: dict[str, Any],
             host: Facts | None = None) -> dict[str, Any]:
    """A result document of the schema's shape (a Run's, and each side's of an interleaved regress); host:
    host_env() where the caller already has it."""
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
        "row_median": "processes",  # harness/measure/noise.py row_median; older files pooled the repeats
        "environment": {"gpu": gpu, "host": host if host is not None else host_env(), "frameworks": fw_env,
                        "machine": machine, "gpu_memory_fraction": _fraction_in_effect(), "cpus": placed},
        "scenarios": out_scenarios,
        "complete": not not_run,
        "not_run": not_run,  # scenarios asked for but not run (budget spent, run stopped), with why
        # its wall time against the time inside timed calls
        "timing_phase": processes.run_phase([Phase.from_dict(s["timing_phase"]) for s in out_scenarios.values()
                                             if isinstance(s.get("timing_phase"), dict)]).to_dict(),
        "host_speed": calibrate.host_series(machine, out_scenarios),  # the Python loop over the run
    }


def _fraction_in_effect() -> float | str:
    try:
        return memory_fraction()
    except Unavailable as e:
        return str(e)


def add_floor(scn: Scenario, params: Params, machine: Json, row: Row) -> None:
    """The row's physical floor and its % of it; none for a hazard row, whose time is not the computation's."""
    if not row.timed or scn.floor is None or not machine or row.hazard:
        return
    floor = scn.floor(params, machine, row.variant)
    if floor:
        row.floor_s = floor
        row.pct_of_floor = 100.0 * floor / row.timing.clock("device_done").median  # type: ignore[union-attr]
