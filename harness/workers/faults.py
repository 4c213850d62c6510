"""Planted faults, so that tests can prove that one framework's failure costs only its own rows.

    TRIPTYCH_FAULT="<scenario>:<framework>:<kind>[:<op>][,...]"

Only a worker *child process* (``--isolation process``, the default, and every rank) reads it, once at
its start: its serve loop (harness/workers/protocol.py) wraps the request handler in the faults planted for its
framework (planted_into), so neither the handlers nor the timing code know of them. The parent and
``--isolation none`` ignore it (a planted hang in the parent could not be timed out). The child
inherits the variable from the parent's environment, which is how a test reaches a process that
monkeypatching cannot.

``scenario`` is a scenario name or ``*``; ``op`` is ``equiv`` (equivalence requests), ``time``
(timing requests) or ``*`` (both; the default). Kinds:

    import  the framework fails to import in the worker (a broken install); the scenario is ignored
    raise   the request raises InjectedFault                         -> rows "error"
    oom     the request allocates too much through the framework's own allocator and its real
            out-of-memory error propagates                            -> rows "oom"
            On a GPU it leaks 1 GiB blocks until something stops it: the memory cap (the default
            fraction) or cudaMalloc itself (TRIPTYCH_GPU_MEMORY_FRACTION=1). On the host it asks
            for 1 PiB at once, refused without touching memory.
    hang    the request never answers (the parent's timeout kills the worker) -> rows "timeout"
    crash   the worker aborts (SIGABRT), as a crashing extension would        -> rows "crashed"
    slow<P> (e.g. slow15; the fourth part is then a variant, required) that one variant's timed calls
            take P% longer: each repeat spins inside its timed region for P% of the call's own
            measured device_done time (host_return and device events are not touched)  -> a
            regression of that row alone, for tests of `regress`
    wrong   (the fourth part is then a variant, required) that one variant's outputs in equivalence
            requests come back with one element off by one (the last of its first output), as a
            wrong impl's would                                     -> an equivalence failure naming
            that framework/variant, for tests of equivalence and of `check` (rank groups included)
"""
from __future__ import annotations

import contextlib
import importlib.abc
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from harness.backends import FRAMEWORKS, backend_class
from harness import backends
from harness.workers import execute
from scenarios import ORDER, get
from scenarios.spec import Arrays

ENV = "TRIPTYCH_FAULT"
KINDS = ("import", "raise", "oom", "hang", "crash", "slow<percent>", "wrong")
OPS = ("equiv", "time", "*")
# What a framework's import pulls in first: refusing it makes `import <framework>` fail.
MODULES = {fw: backend_class(fw).module for fw in FRAMEWORKS}


Handler = Callable[[Any, Callable[[str], None]], Any]  # harness/workers/protocol.py's: (Request, progress) -> value


class InjectedFault(RuntimeError):
    """Raised by a planted "raise" fault."""


@dataclass(frozen=True)
class Fault:
    scenario: str
    framework: str
    kind: str
    op: str = "*"  # for "slow" and "wrong": the variant

    @property
    def slow_pct(self) -> float | None:
        return float(self.kind[4:]) if self.kind.startswith("slow") else None

    def hits(self, op: str, framework: str, scenario: str | None) -> bool:
        """Equivalence and timing requests only (never hello, ceilings or selfcheck)."""
        return (op in ("equiv", "time") and self.framework == framework and self.op in ("*", op)
                and self.scenario in ("*", scenario) and self.kind not in ("import", "wrong") and self.slow_pct is None)


def parse(text: str) -> list[Fault]:
    """Faults from the variable's text; ValueError (one line) on a malformed entry."""

    faults = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        parts = item.split(":")
        if len(parts) not in (3, 4):
            raise ValueError(f"{ENV}: {item!r} is not <scenario>:<framework>:<kind>[:<op>]")
        scenario, framework, kind, op = (*parts, "*") if len(parts) == 3 else parts
        if scenario != "*" and scenario not in ORDER:
            raise ValueError(f"{ENV}: unknown scenario {scenario!r}")
        if framework not in FRAMEWORKS:
            raise ValueError(f"{ENV}: unknown framework {framework!r}")
        if kind.startswith("slow") or kind == "wrong":
            _check_variant(item, kind, scenario, op, len(parts))
        elif kind not in KINDS:
            raise ValueError(f"{ENV}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        elif op not in OPS:
            raise ValueError(f"{ENV}: unknown op {op!r} (known: {', '.join(OPS)})")
        faults.append(Fault(scenario, framework, kind, op))
    return faults


def _check_variant(item: str, kind: str, scenario: str, variant: str, parts: int) -> None:
    try:
        pct = float(kind[4:]) if kind != "wrong" else 1.0
    except ValueError:
        pct = -1.0
    if not 0 < pct <= 1000 or parts != 4 or scenario == "*":
        shape = "wrong" if kind == "wrong" else "slow<percent>"
        raise ValueError(f"{ENV}: {item!r} is not <scenario>:<framework>:{shape}:<variant>")

    try:
        get(scenario).variant(variant)
    except KeyError as e:
        raise ValueError(f"{ENV}: {e.args[0]}") from None


def planted() -> list[Fault]:
    return parse(os.environ.get(ENV, ""))


class _RefuseImport(importlib.abc.MetaPathFinder):
    def __init__(self, module: str) -> None:
        self.module = module

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == self.module or name.startswith(self.module + "."):
            raise ImportError(f"{name} refused to import (planted by {ENV})")
        return None


def _leak(b: Any) -> None:
    """Allocate until the framework's own out-of-memory error, which propagates."""
    if not b.on_gpu:
        b.allocate(1 << 50)
    else:
        held, block = [], 1 << 30
        for _ in range((b.memory_cap.get("bytes") or 0) // block + 4096):  # at most 4 TiB past the cap
            held.append(b.allocate(block))
    raise AssertionError(f"{b.name}: nothing stopped the allocations")


def planted_into(framework: str, handle: Handler) -> Handler:
    """At a worker child's start (harness/workers/protocol.py serve): the request handler with the faults
    planted for this framework around it, and the framework's import refused if that is planted."""
    mine = [f for f in planted() if f.framework == framework]
    if any(f.kind == "import" for f in mine):
        sys.meta_path.insert(0, _RefuseImport(MODULES[framework]))

    def faulty(req: Any, progress: Callable[[str], None]) -> Any:
        _trigger(mine, req.op, framework, req.scenario)
        if req.op == "time":
            with _slowed(mine, framework, req.scenario):
                return handle(req, progress)
        out = handle(req, progress)
        return _spoil(mine, req.scenario, out) if req.op == "equiv" else out

    return faulty


def _trigger(mine: list[Fault], op: str, framework: str, scenario: str | None) -> None:
    """Before a request: set off the first planted fault that matches it."""
    for f in mine:
        if not f.hits(op, framework, scenario):
            continue
        if f.kind == "raise":
            raise InjectedFault(f"planted by {ENV}: {scenario}/{framework}/{op} raises")
        if f.kind == "oom":
            _leak(backends.get(framework).load())
        if f.kind == "hang":
            threading.Event().wait()  # forever: only the parent's timeout ends it
        if f.kind == "crash":
            sys.stderr.flush()
            os.abort()


def _spoil(mine: list[Fault], scenario: str | None, outputs: dict[str, Arrays]) -> dict[str, Arrays]:
    """An equivalence request's {variant: outputs} with a planted "wrong" variant's first output off by
    one at its last element (copied, never the impl's own buffer)."""
    for f in mine:
        if f.kind == "wrong" and f.scenario == scenario and f.op in outputs:
            got = dict(outputs[f.op])
            key = next(iter(got))
            a = np.array(got[key], dtype=np.float64)
            a.reshape(-1)[-1] += 1.0
            got[key] = a.astype(np.asarray(got[key]).dtype)
            outputs = outputs | {f.op: got}
    return outputs


class _Slowdown:
    """A planted slowdown of some variants' calls, for the length of one timing request. Every
    run_<variant> of the impl is wrapped: a planted variant called by the harness (the outermost impl
    call, not one variant calling another, as async_poll calls run_async) notes when a timed region's
    first call starts, and the backend's synchronize(outputs), which ends the region, then busy-waits
    the planted share of the time since that start: the spin is inside device_done, while host_return
    (taken before the synchronize) and device events (stopped before it) are not touched. A synchronize
    without outputs (before a region) forgets the start; so an untimed run of the variant (sync count,
    timeline) is slowed alike."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.share = 0.0
        self.depth = 0  # impl calls in progress: 1 inside the call the harness made

    def call(self, fn: Callable[..., Any], share: float | None) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self.depth == 0 and share is not None and self.started is None:
                self.started, self.share = time.perf_counter(), share
            self.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1

        return wrapped

    def synchronize(self, real: Callable[..., None]) -> Callable[..., None]:
        def synchronize(outputs: Any = None) -> None:
            real(outputs)
            started, self.started = self.started, None
            if started is not None and outputs is not None:
                end = time.perf_counter()
                until = end + self.share * (end - started)
                while time.perf_counter() < until:
                    pass

        return synchronize


@contextlib.contextmanager
def _slowed(mine: list[Fault], framework: str, scenario: str | None) -> Iterator[None]:
    """While a timing request of scenario runs: its planted slow variants slowed (_Slowdown)."""
    slow = {f.op: f.slow_pct / 100 for f in mine if f.slow_pct is not None and f.scenario == scenario}
    if not slow:
        yield
        return

    b, impl, plant = backends.get(framework).load(), execute.load_impl(str(scenario), framework), _Slowdown()
    own = {name: fn for name, fn in vars(impl).items() if name.startswith("run_") and callable(fn)}
    for name, fn in own.items():
        setattr(impl, name, plant.call(fn, slow.get(name[4:])))
    b.synchronize = plant.synchronize(b.synchronize)  # type: ignore[method-assign]  # this instance only
    try:
        yield
    finally:
        del b.synchronize  # the class's again
        for name, fn in own.items():
            setattr(impl, name, fn)
