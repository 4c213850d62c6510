"""The host's speed as one number: a fixed pure-Python loop's seconds.

The interpreter's speed on the CPU a process runs on, which host-paced rows (launch loops, syncs, small copies)
move with. python_loop_s is the long loop, best of a few runs (a request's start, the calibration); beside_s the
short one timed before each repeat (harness/measure/timing.py, TimingConfig.host_beside): a lent host's CPU may
run a process at one of two speeds about 1.8x apart for the whole of a row and the next process at the other
(docs/design/host_speed.md), and a loop at a request's start is seconds and other rows away from the row. Its own
module because the timer, the calibration (harness/measure/calibrate.py, which imports the timer) and the workers
all take it.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

LOOP = 200_000
BESIDE = 2_000  # about 60 us at the fast speed: short against a repeat of milliseconds, long against perf_counter


def python_loop_s(repeats: int = 5) -> float:
    return best_of(LOOP, repeats)


def beside_s() -> float:
    """The short loop, twice back to back, the faster: the host's speed at this moment. Why twice: a loop run
    straight after a wait (a blocking sync, a sleep) runs slower while the CPU wakes and its caches refill, so that
    one run would also measure how the code before it waited, which the change under test may move."""
    return best_of(BESIDE, 2)


def best_of(iterations: int, runs: int) -> float:
    """The fastest of `runs` runs of a loop of `iterations` additions, in seconds."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        total = 0
        for i in range(iterations):
            total += i
        best = min(best, time.perf_counter() - t0)
    return best


def identity(*where: Callable[..., Any]) -> str:
    """What the loop is and where it runs, hashed: BESIDE, beside_s, best_of and the functions `where` that time it (the
    timer's: harness/measure/timing.py loop_identity), as code: their syntax trees without docstrings, so that a
    comment or a docstring changes nothing. Two trees whose workers say the same time one loop at one place (an
    interleaved regress that reads the loop as a covariate asks both sides; a tree that changed the loop would
    move it with the change)."""
    fns = (beside_s, best_of, *where)
    try:
        text = f"BESIDE={BESIDE}\n" + "".join(code(inspect.getsource(f)) for f in fns)
    except (OSError, TypeError):  # no source to read (a frozen or compiled-only install): the files, whole
        files = dict.fromkeys(inspect.getfile(f) for f in fns)
        text = "".join(Path(f).read_bytes().hex() for f in files)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def code(source: str) -> str:
    """A function's source as its syntax tree without its docstring: what it does, not how it is described."""
    node = ast.parse(textwrap.dedent(source)).body[0]
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        node.body = body[1:]  # type: ignore[attr-defined]
    return ast.dump(node)
