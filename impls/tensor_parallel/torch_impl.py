"""tensor_parallel in PyTorch: Megatron's f and g as autograd Functions (explicit), and DTensor's
ColwiseParallel / RowwiseParallel (parallelize_module), over torch.distributed (gloo on the CPU).

On NCCL a collective is enqueued on the current stream and returns at once; on gloo it blocks the
host. Autograd runs the backward collectives where the forward put their Functions.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils._python_dispatch import TorchDispatchMode

from impls._shared import tensor_parallel as tp
from scenarios.tensor_parallel import shard_of

_MESH = {}  # one 1-D device mesh per process (it wraps the default process group)


def prepare(inputs, params, device):
    rank, n = dist.get_rank(), dist.get_world_size()
    whole = {k: torch.from_numpy(v).to(device) for k, v in inputs.items()}
    s = shard_of(params, rank)
    shard = {"w1": whole["w1"][:, s], "b1": whole["b1"][s], "w2": whole["w2"][s], "b2": whole["b2"]}
    if device.type not in _MESH:  # a CPU mesh on the CPU: without one it would pick CUDA where present
        _MESH[device.type] = init_device_mesh(device.type, (n,))
    model = torch.nn.Sequential(torch.nn.Linear(*whole["w1"].shape), torch.nn.ReLU(),
                                torch.nn.Linear(*whole["w2"].shape)).to(device)
    with torch.no_grad():  # nn.Linear keeps W as (out, in)
        for lin, (w, b) in ((model[0], ("w1", "b1")), (model[2], ("w2", "b2"))):
            lin.weight.copy_(whole[w].T)
            lin.bias.copy_(whole[b])
    parallelize_module(model, _MESH[device.type], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    comm = tp.Collectives(n, _all_reduce, lambda a: _all_gather(n, a))
    return {"whole": whole, "shard": shard, "rank": rank, "cols": s, "comm": comm, "model": model}


def barrier(state):
    dist.barrier()


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _all_reduce(a):
    a = a.clone()  # autograd may still need the input
    dist.all_reduce(a, op=dist.ReduceOp.SUM)
    return a


def _all_gather(n, a):
    out = torch.empty((n * a.shape[0],) + tuple(a.shape[1:]), dtype=a.dtype, device=a.device)
    dist.all_gather_into_tensor(out, a.contiguous())  # concatenated along dim 0: rank j's block is out[j]
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


def _same(a):
    return a.view_as(a)


def _leaves(state, names):
    src = {**state["whole"], **state["shard"]} if names == "shard" else state["whole"]
    return {k: src[k].detach().clone().requires_grad_() for k in ("x", "target", "w1", "b1", "w2", "b2")}


def _outputs(t, y, cols=slice(None)):
    return {"y": y.detach(), "dx": t["x"].grad, "dw1": t["w1"].grad[:, cols], "db1": t["b1"].grad[cols],
            "dw2": t["w2"].grad[cols], "db2": t["b2"].grad}


def _backward(state, y, target):
    state["comm"].phase = "bwd"
    torch.nn.functional.mse_loss(y, target).backward()


def run_dense(state):
    t = _leaves(state, "whole")
    y = torch.relu(t["x"] @ t["w1"] + t["b1"]) @ t["w2"] + t["b2"]
    torch.nn.functional.mse_loss(y, t["target"]).backward()
    return _outputs(t, y, state["cols"])


def _megatron(state, reduce):
    c, t = state["comm"], _leaves(state, "shard")
    c.start()
    x = _Comm.apply(t["x"], _same, c.all_reduce)  # f: identity forward, all-reduce of dx backward
    partial = torch.relu(x @ t["w1"] + t["b1"]) @ t["w2"]  # column then row parallel: a partial sum
    y = (_Comm.apply(partial, c.all_reduce, _same) if reduce else partial) + t["b2"]  # g; b2 added once
    _backward(state, y, t["target"])
    c.emit()
    return _outputs(t, y)


def run_tp_naive(state):
    c, t, r = state["comm"], _leaves(state, "shard"), state["rank"]
    c.start()
    k = t["w1"].shape[1]
    x = _Comm.apply(t["x"], _same, lambda g: c.all_gather(g).sum(0))  # dx's partial sums gathered, summed
    gather = lambda a: torch.cat(list(c.all_gather(a)), dim=1)  # noqa: E731 - the whole hidden layer
    h = torch.relu(_Comm.apply(x @ t["w1"] + t["b1"], gather, lambda g: g[:, r * k:(r + 1) * k]))
    partial = h[:, r * k:(r + 1) * k] @ t["w2"]  # this rank's rows of the row-parallel linear
    y = _Comm.apply(partial, lambda a: c.all_gather(a).sum(0), _same) + t["b2"]
    _backward(state, y, t["target"])
    c.emit()
    return _outputs(t, y)


def run_tp_megatron(state):
    return _megatron(state, reduce=True)


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
            n = self.comm.n
            self.comm._count((2 * (n - 1) / n if name == "all_reduce" else n - 1) * args[0].nbytes)
        return func(*args, **(kwargs or {}))


def run_tp_sharded(state):
    c, model, w = state["comm"], state["model"], state["whole"]
    model.zero_grad(set_to_none=True)
    x = w["x"].detach().clone().requires_grad_()
    c.start()
    with _Counted(c):
        y = model(x)  # RowwiseParallel hands back a replicated local tensor
        _backward(state, y, w["target"])
    c.emit()
    g = [model[i].weight.grad.to_local().T for i in (0, 2)] + [model[i].bias.grad.to_local() for i in (0, 2)]
    return {"y": y.detach(), "dx": x.grad, "dw1": g[0], "dw2": g[1], "db1": g[2], "db2": g[3]}


def run_row_parallel_without_reduce(state):
    return _megatron(state, reduce=False)  # bug: g forgotten, y stays a partial sum
