"""tensor_parallel in PyTorch: Megatron's f and g as autograd Functions (explicit), and DTensor's
ColwiseParallel / RowwiseParallel (parallelize_module), over torch.distributed (gloo on the CPU).
On NCCL a collective is enqueued on the current stream and returns at once; on gloo it blocks the
host. Autograd runs the backward collectives where the forward put their Functions."""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils._python_dispatch import TorchDispatchMode

from impls._shared import tensor_parallel as tp
from scenarios.tensor_parallel import shard_of

# torch 2.13 renamed the out-of-place all-gather (all_gather_into_tensor is deprecated); older torch has only that.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_MESH = {}  # one 1-D device mesh per process (it wraps the default process group)
_SAME = lambda a: a.view_as(a)  # noqa: E731 - no collective on this side


def prepare(inputs, params, device):
    rank, n = dist.get_rank(), dist.get_world_size()
    whole, s = {k: torch.from_numpy(v).to(device) for k, v in inputs.items()}, shard_of(params, rank)
    shard = {"w1": whole["w1"][:, s], "b1": whole["b1"][s], "w2": whole["w2"][s], "b2": whole["b2"]}
    if device.type not in _MESH:  # a CPU mesh on the CPU: without one it would pick CUDA where present
        _MESH[device.type] = init_device_mesh(device.type, (n,))
    model = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.ReLU(), torch.nn.Linear(1, 1))
    for lin, w, b in ((model[0], "w1", "b1"), (model[2], "w2", "b2")):  # nn.Linear keeps W as (out, in)
        lin.weight, lin.bias = torch.nn.Parameter(whole[w].T.contiguous()), torch.nn.Parameter(whole[b].clone())
    parallelize_module(model, _MESH[device.type], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    comm = tp.Collectives(n, _all_reduce, lambda a: _all_gather(n, a))
    leaves = lambda d: {k: v.detach().clone().requires_grad_(k != "target") for k, v in d.items()}  # noqa: E731
    return {"whole": whole, "rank": rank, "cols": s, "comm": comm, "model": model,
            "dense": leaves(whole), "tp": leaves({**whole, **shard})}  # autograd leaves, made once


def barrier(state):
    dist.barrier()


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _all_reduce(a):
    dist.all_reduce(a := a.clone(), op=dist.ReduceOp.SUM)  # a copy: autograd may still need the input
    return a


def _all_gather(n, a):
    out = torch.empty((n * a.shape[0],) + tuple(a.shape[1:]), dtype=a.dtype, device=a.device)
    _ALL_GATHER(out, a.contiguous())  # concatenated along dim 0: rank j's block is out[j]
    return out.view((n,) + tuple(a.shape))


class _Comm(torch.autograd.Function):
    """One collective (or none) in forward, another in backward: Megatron's f and g, and the naive gathers."""
    @staticmethod
    def forward(ctx, a, fwd, bwd):
        ctx.bwd = bwd
        return fwd(a)
    @staticmethod
    def backward(ctx, g):
        return ctx.bwd(g), None, None


class _Forward:
    """The block's forward on autograd leaves t, through the counted collectives c; returns y."""
    @staticmethod
    def dense(t, c):
        return torch.relu(t["x"] @ t["w1"] + t["b1"]) @ t["w2"] + t["b2"]
    @staticmethod
    def megatron(t, c, reduce=True):
        x = _Comm.apply(t["x"], _SAME, c.all_reduce)  # f: identity forward, all-reduce of dx backward
        partial = torch.relu(x @ t["w1"] + t["b1"]) @ t["w2"]  # column then row parallel: a partial sum
        return (_Comm.apply(partial, c.all_reduce, _SAME) if reduce else partial) + t["b2"]  # g; b2 added once

    @staticmethod
    def naive(t, c, r):
        k = t["w1"].shape[1]
        x = _Comm.apply(t["x"], _SAME, lambda g: c.all_gather(g).sum(0))  # dx's partial sums gathered, summed
        whole = lambda a: torch.cat(list(c.all_gather(a)), dim=1)  # noqa: E731 - the whole hidden layer
        h = torch.relu(_Comm.apply(x @ t["w1"] + t["b1"], whole, lambda g: g[:, r * k:(r + 1) * k]))
        partial = h[:, r * k:(r + 1) * k] @ t["w2"]  # this rank's rows of the row-parallel linear
        return _Comm.apply(partial, lambda a: c.all_gather(a).sum(0), _SAME) + t["b2"]


def _step(state, forward, *args):
    """Forward, backward on autograd leaves (dense: whole block, else this rank's shard); emits collectives."""
    c, dense = state["comm"], forward is _Forward.dense
    t, cols = (state["dense"], state["cols"]) if dense else (state["tp"], slice(None))
    for v in t.values():
        v.grad = None  # a fresh gradient each step; the previous step's outputs stay as they were
    c.start()
    y = forward(t, c, *args)
    c.phase = "bwd"
    (0.5 * ((y - t["target"]) ** 2).sum()).backward()  # the spec's loss
    c.emit()
    return {"y": y.detach(), "dx": t["x"].grad, "dw1": t["w1"].grad[:, cols], "db1": t["b1"].grad[cols],
            "dw2": t["w2"].grad[cols], "db2": t["b2"].grad}  # this rank's shard of the outputs


def run_dense(state):
    return _step(state, _Forward.dense)


def run_tp_naive(state):
    return _step(state, _Forward.naive, state["rank"])


def run_tp_megatron(state):
    return _step(state, _Forward.megatron)


class _Counted(TorchDispatchMode):
    """Counts the functional collectives DTensor issues (ring bytes, as tp.Collectives counts them)."""
    def __init__(self, comm):
        super().__init__()
        self.comm = comm
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented  # let DTensor desugar its op into collectives first (as CommDebugMode does)
        name = func.__name__.split(".")[0]
        if func.namespace == "_c10d_functional" and name in ("all_reduce", "all_gather_into_tensor"):
            self.comm.issued("all_reduce" if name == "all_reduce" else "all_gather", args[0].nbytes)
        return func(*args, **(kwargs or {}))


def run_tp_sharded(state):
    c, model, w, x = state["comm"], state["model"], state["whole"], state["tp"]["x"]
    model.zero_grad(set_to_none=True)
    x.grad, counted = None, state.get("sharded_comm")
    c.start()
    # DTensor's collectives counted in the first (untimed) call alone: the mode sees every op; later calls emit that
    with _Counted(c) if counted is None else contextlib.nullcontext():
        y = model(x)  # RowwiseParallel hands back a replicated local tensor
        c.phase = "bwd"
        (0.5 * ((y - w["target"]) ** 2).sum()).backward()
    c.calls, c.wire = ({**d} for d in state.setdefault("sharded_comm", (c.calls, c.wire)))
    c.emit()
    g = [model[i].weight.grad.to_local().T for i in (0, 2)] + [model[i].bias.grad.to_local() for i in (0, 2)]
    return {"y": y.detach(), "dx": x.grad, "dw1": g[0], "dw2": g[1], "db1": g[2], "db2": g[3]}


def run_row_parallel_without_reduce(state):
    return _step(state, _Forward.megatron, False)  # bug: g forgotten, y stays a partial sum
