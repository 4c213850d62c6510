"""donation in JAX.

Arrays are immutable: the step returns new parameters. With donate_argnums=0, XLA writes them into the
input's buffer and JAX deletes the input array at dispatch, on the host, so a later read raises at once
instead of reading anything. JAX's runtime peak counter cannot be reset: the step's peak is XLA's own
account of the compiled program; the bytes it leaves allocated are measured on a GPU.
"""
from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp

from harness.measure.metrics import emit
from scenarios.donation import HEAD


def update(p, g, lr):
    """One SGD step."""
    return p - lr * g


# The head is read by a program of its own, before the step (as torch and CuPy copy it before theirs): read
# inside the donated step, it made XLA (CPU, jax 0.10) keep a temporary copy of p, two copies again.
HEAD_OF = jax.jit(lambda p: p[:HEAD])
UPDATE_NEW = jax.jit(update, static_argnums=2)
UPDATE_DONATED = jax.jit(update, static_argnums=2, donate_argnums=0)


def prepare(inputs, params, device):
    # The initial parameters and the gradient uploaded once, untimed; poison() gives every run fresh p.
    p0, g, lr = jax.device_put(inputs["p"], device), jax.device_put(inputs["g"], device), float(inputs["lr"])
    # Bytes each compiled step allocates beyond its arguments: outputs and temporaries, less what aliases a donated input.
    extra = {}
    for fn, args in ((HEAD_OF, (p0,)), (UPDATE_NEW, (p0, g, lr)), (UPDATE_DONATED, (p0, g, lr))):
        m = fn.lower(*args).compile().memory_analysis()
        extra[fn] = m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
    return {"p0": p0, "p": jnp.copy(p0), "g": g, "lr": lr, "device": device, "extra": extra,
            "failed": jax.device_put(jnp.full(min(HEAD, p0.size), jnp.nan, p0.dtype), device)}


def poison(state):
    state["p"] = jnp.copy(state["p0"]).block_until_ready()  # untimed: a fresh array to donate, made before
    # the timed call (the harness's synchronize() has nothing to wait on in JAX)


@contextlib.contextmanager
def allocated(state, *programs):
    """Emit the bytes the block allocated above its start: at its peak (XLA's account of the program)
    and still at its end (measured, GPU only: the CPU backend keeps no allocator statistics).
    Counted in the state's first call (untimed); later calls emit that count and read no statistics."""
    stats = state["device"].memory_stats() if "allocated" not in state else None
    yield
    if "allocated" not in state:
        # their temporaries at most: all outputs live
        state["allocated"] = {"peak_bytes": sum(state["extra"][fn] for fn in programs)}
        if stats is not None:
            state["allocated"]["added_bytes"] = state["device"].memory_stats()["bytes_in_use"] - stats["bytes_in_use"]
    for k, v in state["allocated"].items():
        emit(k, v)


def read_head(old, state):
    """The logger reads the head of the parameters it holds: (what it got, 1 if the read raised, else 0)."""
    try:
        return old[:HEAD], 0  # a plain read, as a logger writes it (passed to a jitted function: ValueError)
    except RuntimeError:  # "Array has been deleted with shape=float32[n].": raised on the host, nothing runs
        return state["failed"], 1


def run_new_buffer(state):
    p = state["p"]
    with allocated(state, HEAD_OF, UPDATE_NEW):
        head = HEAD_OF(p)  # the logger's copy, taken before the step
        new = UPDATE_NEW(p, state["g"], state["lr"])  # into a new buffer: two copies held
    return {"p": new, "head": head}


def run_in_place(state):
    p = state["p"]
    with allocated(state, HEAD_OF, UPDATE_DONATED):
        head = HEAD_OF(p)  # the logger's copy, taken before the step
        new = UPDATE_DONATED(p, state["g"], state["lr"])  # into p's buffer, after the head's read; p is deleted
    return {"p": new, "head": head}


def run_read_after_update(state):
    p = state["p"]
    old = p  # the logger's handle on the parameters: the array that is donated below
    new = UPDATE_DONATED(p, state["g"], state["lr"])
    head, raised = read_head(old, state)  # old was deleted at dispatch: the read raises
    emit("read_raised", raised)
    return {"p": new, "head": head}
