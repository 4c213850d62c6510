"""The one way an impl reports an extra number (CPU iterations while waiting, bytes copied, ...).

    from harness.measure.metrics import emit
    emit("cpu_iters_while_waiting", n)

The harness collects what a run emits and reports the median over the timed repeats. Outside a
harness run, emit() does nothing, so impls stay usable on their own.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

_sink: dict[str, float] | None = None


def emit(name: str, value: float) -> None:
    if _sink is not None:
        _sink[name] = float(value)


@contextlib.contextmanager
def collecting() -> Iterator[dict[str, float]]:
    global _sink
    previous, _sink = _sink, {}
    try:
        yield _sink
    finally:
        _sink = previous
