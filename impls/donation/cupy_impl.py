"""donation in CuPy.

The in-place step is one elementwise kernel whose output is p itself (read and written by the same
thread), queued on the current stream; a logger holding p (or a view of it) reads the new values once it
has run. CuPy's pool has no peak counter: a MemoryHook counts the pool's allocations and frees on the host.
"""
from __future__ import annotations

import contextlib

import cupy
from cupy.cuda import memory_hook

from harness.measure.metrics import emit
from scenarios.donation import HEAD

# p - lr * g in one kernel. `p -= lr * g` would allocate lr * g, as large as p, before the in-place subtraction.
STEP_NEW = cupy.ElementwiseKernel("T p, T g, T lr", "T out", "out = p - lr * g", "sgd_step_new")
STEP_IN_PLACE = cupy.ElementwiseKernel("T g, T lr", "T p", "p -= lr * g", "sgd_step_in_place")


class _Counted(memory_hook.MemoryHook):
    """Pool allocations and frees inside the block: bytes live above its start, and their peak."""

    name = "donation_counted"

    def __init__(self):
        self.live = self.peak = 0

    def malloc_postprocess(self, **kw):
        self.live += kw["mem_size"]
        self.peak = max(self.peak, self.live)

    def free_postprocess(self, **kw):
        self.live -= kw["mem_size"]


def update(p, g, lr):
    """One SGD step, into a new buffer."""
    return STEP_NEW(p, g, lr)  # one kernel into a new buffer


def prepare(inputs, params, device):
    # The initial parameters and the gradient uploaded once, untimed; poison() restores p before every run.
    with device:
        p0 = cupy.asarray(inputs["p"])
        return {"p0": p0, "p": p0.copy(), "g": cupy.asarray(inputs["g"]), "lr": inputs["lr"][()],
                "failed": cupy.full(min(HEAD, p0.size), cupy.nan, dtype=p0.dtype)}


def poison(state):
    state["p"][...] = state["p0"]  # untimed: every run steps from the same parameters


@contextlib.contextmanager
def allocated(state):
    """Emit the bytes the block allocated above its start: at its peak, and still at its end.
    Counted in the state's first call (untimed); later calls emit that count and run without the hook."""
    if "allocated" not in state:
        with _Counted() as counted:
            yield
        state["allocated"] = {"peak_bytes": counted.peak, "added_bytes": counted.live}
    else:
        yield
    for k, v in state["allocated"].items():
        emit(k, v)


def read_head(old, state):
    """The logger reads the head of the parameters it holds: (what it got, 1 if the read raised, else 0)."""
    try:
        return old[:HEAD].copy(), 0
    except RuntimeError:
        return state["failed"], 1


def run_new_buffer(state):
    p = state["p"]
    with allocated(state):
        head = p[:HEAD].copy()  # the logger's copy, taken before the step
        new = update(p, state["g"], state["lr"])  # one kernel into a new buffer: two copies held
    return {"p": new, "head": head}


def run_in_place(state):
    p = state["p"]
    with allocated(state):
        head = p[:HEAD].copy()  # the logger's copy, taken before the step
        STEP_IN_PLACE(state["g"], state["lr"], p)  # one kernel writing p's own memory: no second copy
    return {"p": p, "head": head}


def run_read_after_update(state):
    p = state["p"]
    old = p  # the logger's handle on the parameters: the same memory, not a copy
    STEP_IN_PLACE(state["g"], state["lr"], p)
    head, raised = read_head(old, state)  # queued after the step: reads the new values, no error
    emit("read_raised", raised)
    return {"p": p, "head": head}
