"""tensor_parallel in JAX: shard_map with psum written where Megatron puts g (jax.grad supplies f),
and plain jit over weights with sharding annotations (XLA's partitioner inserts the collectives).

One process per device, as torch; the processes joined before prepare. Dispatch is asynchronous.
What is communicated is read from the compiled programs (the HLO's collectives), forward alone and
forward with backward, since no call here names the backward collectives.
"""
from __future__ import annotations

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.measure.metrics import emit
from impls._shared import tensor_parallel as tp
from scenarios.tensor_parallel import shard_of

SPECS = {"x": P(), "target": P(), "w1": P(None, "r"), "b1": P("r"), "w2": P("r", None), "b2": P()}
# An all-gather whose result is typed the same on every rank ("invariant"), so that jax.grad does not
# treat the gathered loss as N different losses (plain all_gather's result is "varying": dx came out N x).
_GATHER = getattr(lax, "all_gather_invariant", None) or importlib.import_module("jax._src.lax.parallel").all_gather_invariant
OUT_SPECS = {"y": P(), "dx": P(), "dw1": P(None, "r"), "db1": P("r"), "dw2": P("r", None), "db2": P()}


def prepare(inputs, params, device):
    mesh, n = Mesh(np.array(jax.devices()), ("r",)), jax.process_count()  # one device per process
    s = shard_of(params, jax.process_index())
    local = dict(inputs, w1=inputs["w1"][:, s], b1=inputs["b1"][s], w2=inputs["w2"][s])
    glob = {k: jax.make_array_from_process_local_data(NamedSharding(mesh, SPECS[k]), v, inputs[k].shape)
            for k, v in local.items()}  # this process hands in its shard; the global array spans the mesh
    state = {"whole": {k: jax.device_put(v, device) for k, v in inputs.items()}, "global": glob,
             "dense": jax.jit(_Blocks.shard_of(_Blocks.grads(_Blocks.dense), s)), "dense_fwd": jax.jit(_Blocks.dense),
             "n": n, "compiled": {}}
    annotated = {k: NamedSharding(mesh, v) for k, v in OUT_SPECS.items()}  # XLA partitions the rest
    state["tp_sharded"] = jax.jit(_Blocks.grads(_Blocks.dense), out_shardings=annotated)
    state["tp_sharded_fwd"] = jax.jit(_Blocks.dense, out_shardings=annotated["y"])
    hazard = functools.partial(_Blocks.megatron, reduce=False)
    for name, block, y in (("tp_naive", _Blocks.naive, P()), ("tp_megatron", _Blocks.megatron, P()),
                           ("hazard", hazard, P("r"))):  # the hazard's y differs per rank: its rows end to end
        state[name] = jax.jit(jax.shard_map(_Blocks.grads(block), mesh=mesh, in_specs=(SPECS,),
                                            out_specs=dict(OUT_SPECS, y=y)))
        state[name + "_fwd"] = jax.jit(jax.shard_map(block, mesh=mesh, in_specs=(SPECS,), out_specs=y))
    return state


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _all_reduce(a):  # inside shard_map: jax.grad turns it into Megatron's f in backward
    return lax.psum(a, "r")


def _all_gather(a, axis=0, tiled=False):
    return _GATHER(a, "r", axis=axis, tiled=tiled)


class _Blocks:
    """The block's forward on a dict of arrays (inside shard_map: this process's shard), and the
    program builders around it."""

    @staticmethod
    def dense(a):
        return jax.nn.relu(a["x"] @ a["w1"] + a["b1"]) @ a["w2"] + a["b2"]

    @staticmethod
    def megatron(a, reduce=True):
        partial = jax.nn.relu(a["x"] @ a["w1"] + a["b1"]) @ a["w2"]  # column then row parallel: a partial sum
        return (_all_reduce(partial) if reduce else partial) + a["b2"]  # g; b2 added once

    @staticmethod
    def naive(a):
        k, r = a["w1"].shape[1], lax.axis_index("r")
        z = _all_gather(a["x"] @ a["w1"] + a["b1"], axis=1, tiled=True)  # the whole hidden layer
        h = lax.dynamic_slice_in_dim(jax.nn.relu(z), r * k, k, axis=1)  # this rank's rows of the second linear
        return _all_gather(h @ a["w2"]).sum(axis=0) + a["b2"]  # partial sums gathered, summed here

    @staticmethod
    def grads(block):
        def loss(a):
            y = block(a)
            return 0.5 * jnp.sum((y - a["target"]) ** 2), y  # the spec's loss

        def step(a):
            d, y = jax.grad(loss, has_aux=True)(a)
            return {"y": y, "dx": d["x"], "dw1": d["w1"], "db1": d["b1"], "dw2": d["w2"], "db2": d["b2"]}
        return step

    @staticmethod
    def shard_of(step, s):  # dense reports the gradients of this rank's shard, sliced inside the program
        def sliced(a):
            g = step(a)
            return dict(g, dw1=g["dw1"][:, s], db1=g["db1"][s], dw2=g["dw2"][s])
        return sliced


def _step(state, name, inputs="global"):
    """Run the variant's program (compiled on first use, the untimed first call) and emit the collectives
    of its compiled forward alone and of forward + backward: no call here names the backward ones."""
    a = state[inputs]
    if name not in state["compiled"]:
        both = state[name].lower(a).compile()
        fc, fw = tp.hlo_collectives(state[name + "_fwd"].lower(a).compile().as_text(), state["n"])
        tc, tw = tp.hlo_collectives(both.as_text(), state["n"])
        state["compiled"][name] = (both, {"fwd_collectives": fc, "fwd_wire_bytes": fw,
                                          "bwd_collectives": tc - fc, "bwd_wire_bytes": tw - fw})
    program, counts = state["compiled"][name]
    for k, v in counts.items():
        emit(k, v)
    return program(a)  # global arrays (dense: local ones): the harness reads this process's shard of each


def run_dense(state):
    return _step(state, "dense", "whole")  # one device, the whole block: no collective in its program


def run_tp_naive(state):
    return _step(state, "tp_naive")


def run_tp_megatron(state):
    return _step(state, "tp_megatron")


def run_tp_sharded(state):
    return _step(state, "tp_sharded")


def run_row_parallel_without_reduce(state):
    return _step(state, "hazard")  # bug: g forgotten, y stays a partial sum
