"""donation in PyTorch.

p.add_ writes into p's own storage, queued on the current stream after every earlier kernel that reads p;
a logger holding p (or a view of it) reads the new values once the step has run. The caching allocator
counts when a tensor is allocated, on the host: reading its counters after the call waits for nothing.
"""
from __future__ import annotations

import contextlib

import torch

from harness.measure.metrics import emit
from scenarios.donation import HEAD


def update(p, g, lr):
    """One SGD step, into a new buffer."""
    return torch.add(p, g, alpha=-lr)  # one kernel into a new buffer


def prepare(inputs, params, device):
    # The initial parameters and the gradient uploaded once, untimed; poison() restores p before every run.
    p0 = torch.from_numpy(inputs["p"]).to(device)
    return {"p0": p0, "p": p0.clone(), "g": torch.from_numpy(inputs["g"]).to(device), "lr": float(inputs["lr"]),
            "cuda": device.type == "cuda", "failed": torch.full((min(HEAD, p0.numel()),), float("nan"), device=device)}


def poison(state):
    state["p"].copy_(state["p0"])  # untimed: every run steps from the same parameters
    if state["cuda"]:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()  # the peak counter starts from what is allocated now


@contextlib.contextmanager
def allocated(state):
    """Emit the bytes the block allocated above its start: at its peak, and still at its end (CUDA only).
    Counted in the state's first call (untimed); later calls emit that count and read no counter."""
    count = state["cuda"] and "allocated" not in state
    base = torch.cuda.memory_allocated() if count else 0
    yield
    if count:
        state["allocated"] = {"peak_bytes": torch.cuda.max_memory_allocated() - base,
                              "added_bytes": torch.cuda.memory_allocated() - base}
    for k, v in state.get("allocated", {}).items():
        emit(k, v)


def read_head(old, state):
    """The logger reads the head of the parameters it holds: (what it got, 1 if the read raised, else 0)."""
    try:
        return old[:HEAD].clone(), 0
    except RuntimeError:
        return state["failed"], 1


def run_new_buffer(state):
    p = state["p"]
    with allocated(state):
        head = p[:HEAD].clone()  # the logger's copy, taken before the step
        new = update(p, state["g"], state["lr"])  # one kernel into a new buffer: two copies held
    return {"p": new, "head": head}


def run_in_place(state):
    p = state["p"]
    with allocated(state):
        head = p[:HEAD].clone()  # the logger's copy, taken before the step
        p.add_(state["g"], alpha=-state["lr"])  # one kernel writing p's own storage: no second copy
    return {"p": p, "head": head}


def run_read_after_update(state):
    p = state["p"]
    old = p  # the logger's handle on the parameters: the same storage, not a copy
    p.add_(state["g"], alpha=-state["lr"])
    head, raised = read_head(old, state)  # queued after the step: reads the new values, no error
    emit("read_raised", raised)
    return {"p": p, "head": head}
