"""Planted faults, so that tests can prove that one framework's failure costs only its own rows.

    TRIPTYCH_FAULT="<scenario>:<framework>:<kind>[:<op>][,...]"

Only a worker *child process* (``--isolation process``, the default) reads it, at start and before
each request; the parent and ``--isolation none`` ignore it (a planted hang in the parent could not
be timed out). The child inherits the variable from the parent's environment, which is how a test
reaches a process that monkeypatching cannot.

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
"""
from __future__ import annotations

import importlib.abc
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

ENV = "TRIPTYCH_FAULT"
KINDS = ("import", "raise", "oom", "hang", "crash")
OPS = ("equiv", "time", "*")
# What a framework's import pulls in first: refusing it makes `import <framework>` fail.
MODULES = {"torch": "torch", "cupy": "cupy", "jax": "jax"}


class InjectedFault(RuntimeError):
    """Raised by a planted "raise" fault."""


@dataclass(frozen=True)
class Fault:
    scenario: str
    framework: str
    kind: str
    op: str = "*"

    def hits(self, op: str, framework: str, scenario: str | None) -> bool:
        """Equivalence and timing requests only (never hello, ceilings or selfcheck)."""
        return (op in ("equiv", "time") and self.framework == framework and self.op in ("*", op)
                and self.scenario in ("*", scenario) and self.kind != "import")


def parse(text: str) -> list[Fault]:
    """Faults from the variable's text; ValueError (one line) on a malformed entry."""
    from harness.backends import FRAMEWORKS
    from scenarios import ORDER

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
        if kind not in KINDS:
            raise ValueError(f"{ENV}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        if op not in OPS:
            raise ValueError(f"{ENV}: unknown op {op!r} (known: {', '.join(OPS)})")
        faults.append(Fault(scenario, framework, kind, op))
    return faults


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


def arm_worker(framework: str) -> None:
    """At a worker's start: plant the framework's import failure, if asked for."""
    if any(f.framework == framework and f.kind == "import" for f in planted()):
        sys.meta_path.insert(0, _RefuseImport(MODULES[framework]))


def trigger(op: str, framework: str, scenario: str | None, backend: Callable[[], Any]) -> None:
    """Before a worker's request: set off the first planted fault that matches it."""
    for f in planted():
        if not f.hits(op, framework, scenario):
            continue
        if f.kind == "raise":
            raise InjectedFault(f"planted by {ENV}: {scenario}/{framework}/{op} raises")
        if f.kind == "oom":
            _leak(backend())
        if f.kind == "hang":
            threading.Event().wait()  # forever: only the parent's timeout ends it
        if f.kind == "crash":
            sys.stderr.flush()
            os.abort()
