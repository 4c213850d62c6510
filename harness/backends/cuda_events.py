"""Raw CUDA timing through CuPy: the median of a few event-timed repeats on one stream. The machine
ceilings (CupyBackend.ceilings) time this way; the collectives' raw NCCL floor times on the rows' own
clock instead (nccl_floor.py: host wall time to a full sync over back-to-back calls)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np


def median_s(cp: Any, stream: Any, fn: Callable[[], Any], reps: int = 5,
             before: Callable[[], Any] | None = None) -> float:
    """fn once as a warm-up, then `reps` times between two CUDA events on `stream`, each repeat waited
    for; `before` (untimed) runs before every call, after the stream has drained."""
    times = []
    for i in range(reps + 1):
        stream.synchronize()
        if before is not None:
            before()
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(stream)
        fn()
        b.record(stream)
        b.synchronize()
        if i:
            times.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
    return float(np.median(times))
