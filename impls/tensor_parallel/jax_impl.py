"""tensor_parallel in JAX: shard_map with psum written where Megatron puts g (jax.grad supplies f),
and plain jit over weights with sharding annotations (XLA's partitioner inserts the collectives).

One process per device, as torch; the processes joined before prepare. Dispatch is asynchronous.
What is communicated is read from the compiled programs (the HLO's collectives), forward alone and
forward with backward, since no call here names the backward collectives.
"""
from __future__ import annotations

import importlib
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.metrics import emit
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
    state = {"whole": {k: jax.device_put(v, device) for k, v in inputs.items()}, "global": glob, "cols": s,
             "dense": jax.jit(_grads(_block)), "n": n}
    annotated = {k: NamedSharding(mesh, v) for k, v in OUT_SPECS.items()}
    state["tp_sharded"] = jax.jit(_grads(_block), out_shardings=annotated)
    for name, block in (("tp_naive", _naive_block), ("tp_megatron", _block_psum), ("hazard", _block)):
        state[name] = jax.jit(jax.shard_map(_stacked(_grads(block)), mesh=mesh, in_specs=(SPECS,),
                                            out_specs={k: P("r") for k in OUT_SPECS}))
        state[name + "_fwd"] = jax.jit(jax.shard_map(_stacked(_forward(block)), mesh=mesh, in_specs=(SPECS,),
                                                     out_specs=P("r")))
    state["tp_sharded_fwd"] = jax.jit(_forward(_block), out_shardings=annotated["y"])
    state["compiled"] = {}  # compiled on first use (the untimed first call): program and what it communicates
    return state


def barrier(state):
    multihost_utils.sync_global_devices("triptych repeat")


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _block(a):
    return jax.nn.relu(a["x"] @ a["w1"] + a["b1"]) @ a["w2"] + a["b2"]


def _block_psum(a):  # inside shard_map: a row-parallel partial sum, completed by g (psum); b2 added once
    return lax.psum(jax.nn.relu(a["x"] @ a["w1"] + a["b1"]) @ a["w2"], "r") + a["b2"]


def _naive_block(a):  # inside shard_map: every linear's output all-gathered
    k, r = a["w1"].shape[1], lax.axis_index("r")
    z = _GATHER(a["x"] @ a["w1"] + a["b1"], "r", axis=1, tiled=True)  # the whole hidden layer
    h = lax.dynamic_slice_in_dim(jax.nn.relu(z), r * k, k, axis=1)  # this rank's rows of the second linear
    return _GATHER(h @ a["w2"], "r").sum(axis=0) + a["b2"]


def _forward(block):
    return lambda a: block(a)


def _grads(block):
    def loss(a):
        y = block(a)
        return jnp.mean((y - a["target"]) ** 2), y

    def step(a):  # jax.grad transposes psum: dx's all-reduce (Megatron's f) comes from autodiff
        d, y = jax.grad(loss, has_aux=True)(a)
        return {"y": y, "dx": d["x"], "dw1": d["w1"], "db1": d["b1"], "dw2": d["w2"], "db2": d["b2"]}
    return step


def _stacked(fn):  # every output with a leading rank axis: out_specs P("r") holds varying and invariant values
    return lambda a: jax.tree.map(lambda v: v[None], fn(a))


_BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2}
_COLLECTIVE = re.compile(r"=\s*(.*?)\s(all-reduce|all-gather|reduce-scatter)(?:-start)?\(")


def _hlo_collectives(compiled, n):
    """(calls, ring wire bytes per rank) of the collectives in a compiled program."""
    calls, wire = 0, 0.0
    for shape, op in _COLLECTIVE.findall(compiled.as_text()):
        size = sum(_BYTES[t] * int(np.prod([int(d) for d in dims.split(",") if d]))
                   for t, dims in re.findall(r"(\w+)\[([\d,]*)\]", shape))
        calls += 1
        wire += size * {"all-reduce": 2 * (n - 1) / n, "all-gather": (n - 1) / n, "reduce-scatter": n - 1}[op]
    return calls, wire


def _compiled(state, name):
    """The variant's program, compiled once, and the collectives of forward alone and of forward + backward."""
    if name not in state["compiled"]:
        both = state[name].lower(state["global"]).compile()
        (fc, fw), (tc, tw) = (_hlo_collectives(state[name + "_fwd"].lower(state["global"]).compile(), state["n"]),
                              _hlo_collectives(both, state["n"]))
        state["compiled"][name] = (both, {"fwd_collectives": fc, "fwd_wire_bytes": fw,
                                          "bwd_collectives": tc - fc, "bwd_wire_bytes": tw - fw})
    return state["compiled"][name]


def _mine(state, name, stacked=True):
    program, counts = _compiled(state, name)
    for k, v in counts.items():
        emit(k, v)
    out = program(state["global"])
    return {k: v.addressable_data(0)[0] if stacked else v.addressable_data(0) for k, v in out.items()}


def run_dense(state):
    out, s = state["dense"](state["whole"]), state["cols"]
    return dict(out, dw1=out["dw1"][:, s], db1=out["db1"][s], dw2=out["dw2"][s])


def run_tp_naive(state):
    return _mine(state, "tp_naive")


def run_tp_megatron(state):
    return _mine(state, "tp_megatron")


def run_tp_sharded(state):
    return _mine(state, "tp_sharded", stacked=False)  # this process's shard of each annotated output


def run_row_parallel_without_reduce(state):
    return _mine(state, "hazard")  # bug: _block inside shard_map, no psum: y stays a partial sum
