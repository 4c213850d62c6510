"""One framework's side of a run: in this process (tests) or in a child process of its own (compare).

A child process per framework keeps a crash, a hang or an out-of-memory in one framework from taking
the others with it; the parent talks to it through a pipe and kills it at the request's timeout.
Requests and answers are plain picklable data: names, params and numpy arrays.

What went wrong becomes a row status: "error" (an exception), "oom" (the framework's own
out-of-memory error, classified by its backend; the worker is then replaced, the only sure way to
hand its memory back), "timeout" (no answer in time: killed) and "crashed" (the process died).
Tests plant each of these with $TRIPTYCH_FAULT (harness/faults.py), which only the child reads.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from typing import Any, Callable

import numpy as np

from harness import backends, faults
from harness.execute import load_impl, run_variants, skip_reason, variant_call
from harness.timeline import trace_variant
from harness.timing import PRESETS, TimingConfig, measure
from harness.equivalence import compare_outputs, relative_error, strided_sample
from scenarios import get as get_scenario
from scenarios.spec import Arrays

SAMPLE_ELEMS = 1 << 16  # per output, for cross-framework checks where the reference is too costly

Progress = Callable[[str], None]


class WorkerError(RuntimeError):
    """The request failed inside the worker; str(self) is a one-line summary, status "error" or "oom"."""

    def __init__(self, message: str, status: str = "error") -> None:
        super().__init__(message)
        self.status = status


class WorkerLost(RuntimeError):
    """The worker process died ("crashed") or hung ("timeout"); it is restarted for the next request."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


def failure(fw: str, e: BaseException) -> tuple[str, str]:
    """(status, one-line summary) of an exception raised while serving fw."""
    summary = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return ("oom" if backends.get(fw).is_out_of_memory(e) else "error"), summary


def _died(fw: str, code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (killed: by the kernel's out-of-memory killer?)" if name == "SIGKILL" else ""
        return f"{fw} worker died of {name}{hint}"
    return f"{fw} worker died (exit code {code})"


def _sample(a: np.ndarray) -> np.ndarray:
    return strided_sample(a, SAMPLE_ELEMS)


# -- request handlers (run inside the worker) ----------------------------------------------------


def hello(fw: str) -> dict[str, Any]:
    b = backends.get(fw)
    ok, why = b.available()
    return {"available": ok, "why": why, "on_gpu": b.on_gpu if ok else False,
            "env": b.env() if ok else {}, "pid": os.getpid()}


def equiv(fw: str, scenario: str, params: dict[str, Any]) -> dict[str, Arrays]:
    b = backends.get(fw).load()
    out = run_variants(get_scenario(scenario), b, params)
    b.free_memory()
    return out


def time_scenario(fw: str, scenario: str, params: dict[str, Any], cfg: TimingConfig,
                  progress: Progress) -> list[dict[str, Any]]:
    """Time every variant at the given params; check the timed outputs; count host syncs."""
    scn = get_scenario(scenario)
    b = backends.get(fw).load()
    impl = load_impl(scenario, fw)
    t_setup = time.perf_counter()
    inputs = scn.make_inputs(params)
    expected = scn.reference(inputs, params) if scn.cheap_reference(params) else None
    setup_s = time.perf_counter() - t_setup  # host inputs and reference: where a run's wall time goes
    against = "reference" if expected is not None else "baseline"
    rows: list[dict[str, Any]] = []
    for v in scn.variants:
        t_variant = time.perf_counter()
        row: dict[str, Any] = {"scenario": scenario, "framework": fw, "variant": v.name, "hazard": v.hazard,
                               "setup_s": setup_s}
        why = skip_reason(scn, v, b, impl)
        if why:
            rows.append(row | {"status": "skipped", "reason": why})
            continue
        progress(f"{v.name}")
        fn = variant_call(impl, v)
        state = impl.prepare(inputs, params, b.device)
        poison = (lambda: impl.poison(state)) if hasattr(impl, "poison") else None
        want = expected
        captured: dict[str, Arrays] = {}
        rel_errs: list[float] = []  # of the checked repeats, for regressions in numbers (not hazards)

        def check(out: Any, want: Arrays | None = want, name: str = v.name, hazard: bool = v.hazard) -> str | None:
            got = b.to_numpy(out)
            captured.setdefault(name, got)
            if want is None:
                return None
            if not hazard:
                rel_errs.append(relative_error(got, want))
            m = compare_outputs(scn, params, got, want)
            return None if m is None else m.describe()

        m = measure(lambda: fn(state), b, cfg, before=poison, check=check, check_every=v.hazard)
        if poison is not None:  # like every run: outputs poisoned (and JAX sources made fresh) untimed
            poison()
            b.synchronize()
        with b.sync_counter() as syncs:
            out = fn(state)
        b.synchronize(out)
        out = state = None  # release device memory before the next variant
        b.free_memory()
        if expected is None and v is scn.baseline:
            expected = captured[v.name]  # later variants are checked against this framework's baseline
        row |= {
            "status": "ok" if m.wrong_repeats == 0 or v.hazard else "wrong",
            "timing": m.to_dict(),
            "check": {"against": against if v is not scn.baseline or against == "reference" else "none",
                      "checked": m.checked_repeats, "wrong": m.wrong_repeats, "worst": m.worst,
                      "max_rel_err": max(rel_errs) if rel_errs else None},
            "host_syncs": syncs.count, "sync_method": syncs.method, "sync_why": syncs.why,
        }
        if against == "baseline" and v is scn.baseline:
            row["sample"] = {k: _sample(a) for k, a in captured[v.name].items()}
        row["wall_s"] = time.perf_counter() - t_variant  # everything for this variant, untimed work included
        rows.append(row)
    if scn.timeline:  # after every timed run, so that no trace (or profiler) disturbs a timing
        for row in rows:
            if row["status"] in ("ok", "wrong"):
                progress(f"{row['variant']} · timeline")
                call = variant_call(impl, scn.variant(row["variant"]))
                row["timeline"] = trace_variant(b, impl, call, inputs, params)
    return rows


def ceilings(fw: str) -> dict[str, float]:
    return backends.get(fw).load().ceilings()


def selfcheck(fw: str) -> list[dict[str, Any]]:
    from harness.selfcheck import selfcheck_rows

    return selfcheck_rows(fw)


HANDLERS: dict[str, Callable[..., Any]] = {"hello": hello, "equiv": equiv, "time": time_scenario,
                                           "ceilings": ceilings, "selfcheck": selfcheck}


def _serve(conn: Any, fw: str | None = None) -> None:
    """Child process main loop: answer ("ok", result) / ("error", summary, traceback, status) per
    request; ("progress", text) messages may come before the answer."""
    # Ctrl-C reaches the whole process group: the parent decides what stops (it closes or kills us),
    # so an idle worker prints no KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if fw is not None:
        faults.arm_worker(fw)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        op, args = msg
        try:
            faults.trigger(op, args[0], args[1] if len(args) > 1 else None, lambda: backends.get(args[0]).load())
            if op == "time":
                result = HANDLERS[op](*args, progress=lambda text: conn.send(("progress", text)))
            else:
                result = HANDLERS[op](*args)
            conn.send(("ok", result))
        except BaseException as e:  # noqa: BLE001 - report everything; the parent decides
            status, summary = failure(args[0], e)
            conn.send(("error", summary, traceback.format_exc(), status))


# -- the parent's handles ------------------------------------------------------------------------


class LocalWorker:
    """Runs requests in this process (tests, --isolation none)."""

    def __init__(self, fw: str) -> None:
        self.fw = fw

    def request(self, op: str, *args: Any, timeout: float | None = None,
                progress: Progress | None = None) -> Any:
        try:
            if op == "time":
                return HANDLERS[op](self.fw, *args, progress=progress or (lambda _t: None))
            return HANDLERS[op](self.fw, *args)
        except Exception as e:  # noqa: BLE001
            status, summary = failure(self.fw, e)
            raise WorkerError(summary, status) from e

    def close(self) -> None:
        pass

    kill = close


class ProcessWorker:
    """A spawned child process per framework (a fresh interpreter: nothing inherited from CUDA)."""

    def __init__(self, fw: str) -> None:
        self.fw = fw
        self._proc: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, self.fw), name=f"triptych-{self.fw}", daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def request(self, op: str, *args: Any, timeout: float | None = None,
                progress: Progress | None = None) -> Any:
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send((op, (self.fw, *args)))
        while True:
            try:
                ready = self._conn.poll(timeout)
            except (EOFError, OSError):
                ready = True
            if not ready:
                self.kill()
                raise WorkerLost(f"{self.fw} worker did not answer within {timeout:g} s (killed)", "timeout")
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                if self._proc is not None:
                    self._proc.join(5)  # the exit code is known only once it has been reaped
                code = self._proc.exitcode if self._proc is not None else None
                self.kill()
                raise WorkerLost(_died(self.fw, code), "crashed") from None
            if msg[0] == "progress":
                if progress is not None:
                    progress(msg[1])
                continue
            if msg[0] == "ok":
                return msg[1]
            status = msg[3] if len(msg) > 3 else "error"
            if status == "oom":
                self.close()  # a fresh process for the next request: all of this one's memory goes back
            raise WorkerError(msg[1], status)

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._conn = None

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(10)
            except (OSError, BrokenPipeError):
                pass
        self.kill()


def make_worker(fw: str, isolation: str) -> LocalWorker | ProcessWorker:
    if isolation == "none":
        return LocalWorker(fw)
    if isolation == "process":
        return ProcessWorker(fw)
    raise ValueError(f"unknown isolation {isolation!r}")


def timing_config(size: str) -> TimingConfig:
    return PRESETS.get(size, PRESETS["full"])
