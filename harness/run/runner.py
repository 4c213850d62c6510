"""The scenario x framework x variant loop behind `python -m harness compare`.

Per scenario: equivalence first (hypothesis draws small params; every framework's checked variants
against the float64 reference and each other; harness/run/equiv_phase.py), then timing of every variant
at the size preset, one framework at a time so that they never share the GPU's time, each point in
two (CompareOptions.processes) worker processes per framework, interleaved (harness/workers/rounds.py).
Each framework runs in child processes of its own (--isolation process, the default): a crash or
hang costs that framework's rows, marked with what happened, and the rest of the run goes on.

Each framework's allocator is capped at a fraction of the GPU's memory (--gpu-memory-fraction,
$TRIPTYCH_GPU_MEMORY_FRACTION, 0.15 by default) so that the six worker processes, which live side
by side, fit in it together; the fraction is recorded in the result's environment. Every process
measures the host's speed at its start (harness/measure/calibrate.py), recorded beside the GPU ceilings.
"""
from __future__ import annotations

import datetime as _dt
import os
import time
from typing import Any

from harness.measure import calibrate
from harness.run import stops
from harness.workers import cpus, point_cache, rounds
from harness.backends import ceilings_framework
from harness.backends.base import MEMORY_FRACTION_ENV, Unavailable, memory_fraction
from harness.run.equiv_phase import equivalence
from harness.check.judging import cross_check, judge_claims
from harness.report.labels import NAMES
from harness.measure.machine import host_env
from harness.results.model import Row
from harness.run.options import CompareOptions, UI
from harness.workers.ranks import Groups
from harness.results.results import SCHEMA
from harness.run.stops import Stopped
from harness.measure.timing import preset
from harness.workers.worker import WorkerError, WorkerLost, make_worker
from scenarios import get as get_scenario
from scenarios.spec import Scenario

__all__ = ["CompareOptions", "UI", "Stopped", "run_compare"]
Pools = list[dict[str, Any]]  # per process round: {framework: worker}; pools[0] also runs equivalence


def run_compare(opts: CompareOptions, ui: UI) -> dict[str, Any]:
    """The run's result document, also when it was stopped (Ctrl-C, SIGTERM) at any moment after it
    started measuring. It returns with stops deferred (harness/run/stops.py) where a caller's
    stops.handling() holds them, so that the caller writes the document before any signal is honoured."""
    with stops.handling():
        return _run_compare(opts, ui)


def _run_compare(opts: CompareOptions, ui: UI) -> dict[str, Any]:
    started = _dt.datetime.now(_dt.timezone.utc)
    if opts.gpu_memory_fraction is not None:
        os.environ[MEMORY_FRACTION_ENV] = repr(opts.gpu_memory_fraction)  # worker processes inherit it
    pools: Pools = [{fw: make_worker(fw, opts.isolation) for fw in opts.frameworks}
                    for _ in range(opts.timing_processes if opts.timing else 1)]
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
    machine: dict[str, Any] = {}
    rank_groups = Groups(opts.frameworks, opts.world_size, opts.timeout_s)  # started by the first rank scenario
    affinity, ticks = cpus.allowed(), cpus.cpu_times()
    placed = cpus.not_placed(opts.cpus)
    cache: str | None = None
    started_up = False
    try:
        placed = cpus.place(opts.cpus, ui.step)  # before any process starts: each inherits the CPUs kept
        cache = point_cache.start()  # before any worker starts (workers start lazily, below): they inherit its name
        _start_phase(pools, opts, ui, fw_env, available, machine)
        started_up = True
        for scn in scenarios:
            if stopped is None and opts.budget_s is not None and time.perf_counter() - t_start >= opts.budget_s:
                stopped = f"the --budget of {opts.budget_s:g} s was spent before it started"
                ui.note(f"budget spent: {', '.join(x.name for x in scenarios[len(out_scenarios):])} not run")
            if stopped is not None:
                not_run.append({"scenario": scn.name, "why": stopped})
                continue
            try:
                t_scn = time.perf_counter()
                done = _run_scenario(scn, *rank_groups.for_scenario(scn, pools, available, fw_env),
                                     machine, opts, ui)
                stops.raise_if_stopped()  # swallowed on the way: this scenario's rows are not whole
                out_scenarios[scn.name] = done
                out_scenarios[scn.name]["wall_s"] = time.perf_counter() - t_scn
            except (Stopped, KeyboardInterrupt) as e:
                stops.defer()
                stopped = f"the run was stopped ({str(e) or 'SIGINT'}) during {scn.name}"
                not_run.append({"scenario": scn.name, "why": stopped})
                ui.note(f"{stopped}: the scenarios finished before it are kept")
        stops.defer()  # measured: from here on a signal waits until the result is written
    except (Stopped, KeyboardInterrupt) as e:  # while the frameworks started, or between two scenarios
        stops.defer()
        stopped = (f"the run was stopped ({str(e) or 'SIGINT'}) "
                   + ("between two scenarios" if started_up else "while the frameworks started"))
        done_or_said = set(out_scenarios) | {n["scenario"] for n in not_run}
        not_run += [{"scenario": x.name, "why": stopped} for x in scenarios if x.name not in done_or_said]
    finally:
        stops.defer()
        grace = 10.0 if stopped is None else 1.0  # a stopped run ends now: busy workers are killed
        for pool in pools:
            for w in pool.values():
                w.close(grace)
        rank_groups.close(grace)
        if cache is not None:
            point_cache.stop(cache)
        cpus.restore(affinity)  # a caller in this process (the tests) gets its CPUs back
        ui.end()
    placed["steal_share"] = cpus.steal_share(ticks, cpus.cpu_times())
    return _document(opts, started, fw_env, machine, out_scenarios, not_run, placed)


def _start_phase(pools: Pools, opts: CompareOptions, ui: UI, fw_env: dict[str, Any],
                 available: list[str], machine: dict[str, Any]) -> None:
    """Start every worker side by side; each measures the host's speed; on a full-size GPU run, the
    first worker of the backend that measures ceilings (backends.ceilings_framework) measures the GPU's."""
    ui.step(f"starting {', '.join(pools[0])}" + (f" ({len(pools)} processes each)" if len(pools) > 1 else ""))
    for fw, info in _start_all(pools, opts).items():
        fw_env[fw] = info
        if info["available"]:
            available.append(fw)
        else:
            ui.note(f"{fw}: {info.get('status', 'skipped')} — {info['why']}")
        ui.advance()
    if opts.timing:
        ui.step("measuring the host's speed in every process (tiny op, Python loop)")
        machine["calibration"] = {fw: [_calibrate(pool[fw], opts) for pool in pools] for fw in available}
    meter = ceilings_framework()
    if meter in available and opts.timing and opts.size == "full":
        ui.step(f"measuring the machine's ceilings (raw CUDA via {NAMES[meter]})")
        try:
            machine.update(pools[0][meter].request("ceilings", timeout=opts.timeout_s))
        except (WorkerError, WorkerLost) as e:
            ui.note(f"ceilings not measured: {e}")


def _calibrate(w: Any, opts: CompareOptions) -> dict[str, Any]:
    try:
        return w.request("calibrate", timeout=opts.timeout_s)
    except (WorkerError, WorkerLost) as e:
        return {"error": str(e)}


def _document(opts: CompareOptions, started: _dt.datetime, fw_env: dict[str, Any], machine: dict[str, float],
              out_scenarios: dict[str, Any], not_run: list[dict[str, str]], placed: dict[str, Any]) -> dict[str, Any]:
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
                        "gpu_memory_fraction": _fraction_in_effect(), "cpus": placed},
        "scenarios": out_scenarios,
        "complete": not not_run,
        "not_run": not_run,  # scenarios asked for but not run (budget spent, run stopped), with why
        "timing_phase": rounds.run_phase(out_scenarios),  # its wall time against the time inside timed calls
        "host_speed": calibrate.host_series(machine, out_scenarios),  # the Python loop over the run
    }


def _run_scenario(scn: Scenario, pools: Pools, available: list[str], fw_env: dict[str, Any],
                  machine: dict[str, Any], opts: CompareOptions, ui: UI) -> dict[str, Any]:
    """Equivalence, then timing of every point x framework x variant, claims and cross-checks."""
    entry: dict[str, Any] = {"title": scn.title, "concept": scn.concept, "metrics_doc": dict(scn.metrics_doc),
                             "variants": [{"name": v.name, "doc": v.doc, "hazard": v.hazard,
                                           "gpu_only": v.gpu_only if isinstance(v.gpu_only, bool)
                                           else list(v.gpu_only)} for v in scn.variants]}
    if opts.equivalence:
        ui.step(f"{scn.name} · equivalence ({opts.examples} examples, {', '.join(available) or 'none'})")
        entry["equivalence"] = eq = equivalence(scn, pools[0], available, opts, stops.raise_if_stopped)
        if eq["status"] == "failed":
            ui.note(f"{scn.name}: EQUIVALENCE FAILED\n{eq['message']}")
        ui.advance()
    rows: list[dict[str, Any]] = []
    on_cpu = frozenset(fw for fw, e in fw_env.items() if e.get("available") and not e.get("on_gpu"))
    points = scn.points(opts.size)  # the seed is the requests' own (harness/workers/protocol.py)
    entry["points"] = [p | {"seed": opts.seed} for p in points]
    if opts.timing:
        why = _rank_ceilings(scn, points, pools, available, fw_env, machine, opts, ui)
        if why:
            entry["floor_why"] = why
        entry["claims"], entry["cross_framework"] = [], []
        t_timing = time.perf_counter()
        for i, params in enumerate(points):
            label = params.get("label", "")
            typed, samples = _time_point(scn, params, pools, fw_env, opts, ui)
            point_cache.clear()
            for r in typed:
                r.point, r.label = i, label
                _add_floor(scn, params, machine, r)
            point_rows = [r.to_dict() for r in typed]  # claims, cross-checks and the document read dicts
            xc = cross_check(scn, params, samples)
            if xc is not None:
                entry["cross_framework"].append(xc | {"point": i, "label": label})
            entry["claims"].extend(c | {"point": i, "label": label}
                                   for c in judge_claims(scn, params, point_rows, on_cpu))
            rows.extend(point_rows)
        entry["timing_phase"] = rounds.phase(rows, time.perf_counter() - t_timing)
    entry["rows"] = rows
    return entry


def _rank_ceilings(scn: Scenario, points: list[dict[str, Any]], pools: Pools, available: list[str],
                   fw_env: dict[str, Any], machine: dict[str, Any], opts: CompareOptions, ui: UI) -> str | None:
    """A rank scenario's raw floors, measured by the ranks of the backend that measures ceilings before its
    timing, into the machine ceilings (as the raw cudaMemcpy rates are at the start); why some or all are
    absent, or None."""
    if not scn.rank_ceilings:
        return None
    meter = ceilings_framework()
    if meter is None:
        return "no raw floor: no backend measures it"
    if meter not in available:
        return f"no raw floor: it is measured by the {NAMES[meter]} ranks (NCCL), " + (
            f"unavailable here ({fw_env[meter]['why']})" if meter in fw_env else "not in this run")
    ui.step(f"{scn.name} · raw floor (the {NAMES[meter]} ranks, NCCL without a framework)")
    try:
        got = pools[0][meter].request("ceilings", points=points, timeout=opts.timeout_s)
    except (WorkerError, WorkerLost) as e:
        ui.note(f"{scn.name}: raw floor not measured: {e}")
        return f"raw floor not measured: {e}"
    machine.update(got["ceilings"])
    return "; ".join(f"{k}: {why}" for k, why in got["not_measured"].items()) or None


def _time_point(scn: Scenario, params: dict[str, Any], pools: Pools, fw_env: dict[str, Any], opts: CompareOptions,
                ui: UI) -> tuple[list[Row], list[tuple[str, dict[str, Any]]]]:
    """(every framework's rows at this point, [(framework, baseline output sample)])."""
    label = params.get("label", "")
    where = f"{scn.name}{' · ' + label if label else ''}"
    running = [fw for fw in opts.frameworks if fw_env[fw]["available"]]
    got = rounds.time_point(pools, running, scn, params, opts.timing_config or preset(opts.size), opts.timeout_s,
                            lambda fw, text: ui.step(f"{where} · {fw} · {text}"),
                            lambda fw, text: ui.detail(f"{where} · {fw} · {text}"), seed=opts.seed)
    rows: list[Row] = []
    samples: list[tuple[str, dict[str, Any]]] = []
    for fw in opts.frameworks:
        merged = rounds.merge(got[fw]) if fw in got else {"status": fw_env[fw].get("status", "skipped"),
                                                          "reason": fw_env[fw]["why"]}
        if isinstance(merged, dict):
            if merged["status"] != "skipped":
                ui.note(f"{scn.name}/{fw}: {merged['status']} — {merged['reason']}")
            rows.extend(Row(scenario=scn.name, framework=fw, variant=v.name, hazard=v.hazard, status=merged["status"],
                            reason=merged["reason"]) for v in scn.variants)
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


def _fraction_in_effect() -> float | str:
    try:
        return memory_fraction()
    except Unavailable as e:
        return str(e)


def _start_all(pools: Pools, opts: CompareOptions) -> dict[str, dict[str, Any]]:
    """Import each framework and pick its device in every worker, child processes side by side; a
    framework is available where every one of its workers started."""

    def hello(w: Any) -> dict[str, Any]:
        try:
            return w.request("hello", timeout=opts.startup_timeout_s)
        except (WorkerError, WorkerLost) as e:  # broken (crashed, hung, raised): failed, not skipped
            return {"available": False, "why": f"failed to start: {e}", "env": {}, "on_gpu": False,
                    "status": e.status}

    workers = [(fw, w) for pool in pools for fw, w in pool.items()]
    if opts.isolation != "process":
        infos = [hello(w) for _, w in workers]
    else:
        from concurrent.futures import ThreadPoolExecutor

        ex = ThreadPoolExecutor(len(workers))
        try:
            infos = list(ex.map(lambda fw_w: hello(fw_w[1]), workers))
        except BaseException:  # a stop while a framework hangs at start-up: kill, do not wait out its timeout
            for _, w in workers:
                w.kill()
            raise
        finally:
            ex.shutdown(wait=False)
    out: dict[str, dict[str, Any]] = {}
    for (fw, _), info in zip(workers, infos):
        if fw not in out or (out[fw]["available"] and not info["available"]):
            out[fw] = info
    return out


def _add_floor(scn: Scenario, params: dict[str, Any], machine: dict[str, float], row: Row) -> None:
    """The row's physical floor and its % of it; none for a hazard row, whose time is not the computation's."""
    if not row.timed or scn.floor is None or not machine or row.hazard:
        return
    floor = scn.floor(params, machine, row.variant)
    if floor:
        row.floor_s = floor
        row.pct_of_floor = 100.0 * floor / row.timing.device_done["median"]  # type: ignore[union-attr]
