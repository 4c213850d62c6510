"""zero in PyTorch: DDP + torch.optim.Adam (ddp); stage 1 written out (the parameters and gradients in
impls/_shared/zero.py's padded flat layout, each layer's gradient reduce-scattered in place after backward,
torch.optim.Adam on this rank's chunks, each layer's parameters all-gathered in place); FSDP2's fully_shard with
reshard_after_forward False (≈ stage 2) or True (stage 3). Over torch.distributed (gloo on the CPU with a CPU
device mesh, NCCL on GPUs).

On NCCL, DDP's reducer and FSDP2 issue their collectives on their own streams and make the current stream wait
before it reads the results; stage 1's reduce-scatters and all-gathers run on the current stream after
backward, in order (no overlap, as CuPy's). On gloo every collective blocks the host. A stage's wrapper and
optimizer are built once, by its first (untimed) run (DDP broadcasts, allocates its buckets; fully_shard keeps
this rank's dim-0 chunks as DTensors); a timed run resets the parameters in place, empties Adam's state and
steps; the harness reads the result back (gathered) after it, untimed, as the CuPy and JAX runs do."""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from impls._shared import dp
from impls._shared import torch_dist as T
from impls._shared import zero as Z
from impls.data_parallel.torch_impl import _model
from scenarios.zero import sizes

_MESH = {}  # one 1-D device mesh per process (it wraps the default process group)


def prepare(inputs, params, device):
    rank, n = dist.get_rank(), dist.get_world_size()
    if device.type not in _MESH:  # a CPU mesh on the CPU: without one FSDP2 would pick CUDA where present
        _MESH[device.type] = init_device_mesh(device.type, (n,))
    shard = lambda a: [torch.from_numpy(dp.shard(b, rank, n).copy()).to(device) for b in a]  # noqa: E731
    return {"x": shard(inputs["x"]), "t": shard(inputs["t"]), "init": inputs["init"], "dims": sizes(params),
            "device": device, "lr": float(params["lr"]), "eps": float(params["eps"]), "n": n, "rank": rank, "sent": {},
            "start": [q.detach() for q in _model(inputs["init"], sizes(params), device).parameters()],
            "wrapped": {}}  # a stage's wrapper, built by its first (untimed) run


def barrier(state):
    dist.barrier()


def poison(state):
    if state["device"].type == "cuda":  # untimed: the device idle and the peak counter reset before a run
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    barrier(state)  # untimed, before every repeat: the ranks start together


class _Wrapped:
    """One stage's model and optimizer, from the initial parameters."""

    def __init__(self, state, stage):
        model, dev = _model(state["init"], state["dims"], state["device"]), state["device"]
        self.flat = None
        if stage == "ddp":
            model = T.ddp(model, dev, gradient_as_bucket_view=True)  # the gradients are views of DDP's buckets
        elif stage == "zero1":  # the parameters and their .grad views of two padded flat buffers; Adam on the chunks
            lay, r = Z.Layout(state["dims"], state["n"]), state["rank"]
            self.lay, self.flat = lay, (torch.zeros(lay.total, device=dev), torch.zeros(lay.total, device=dev))
            for i, lin in enumerate(m for m in model if isinstance(m, torch.nn.Linear)):
                lin.weight.data, lin.bias.data = lay.layer(lay.seg(self.flat[0], i), i, out_in=True)  # W: (out, in)
                lin.weight.grad, lin.bias.grad = lay.layer(lay.seg(self.flat[1], i), i, out_in=True)
            self.mine = [lay.own(self.flat[0], i, r) for i in range(len(lay.chunk))]
            for i, q in enumerate(self.mine):
                q.grad = lay.own(self.flat[1], i, r)  # the reduce-scatter's in-place result
        else:
            for layer in (m for m in model if isinstance(m, torch.nn.Linear)):  # an all-gather / reduce-scatter each
                fully_shard(layer, mesh=_MESH[dev.type], reshard_after_forward=stage == "zero3")
            fully_shard(model, mesh=_MESH[dev.type], reshard_after_forward=stage == "zero3")
        self.opt = torch.optim.Adam(self.mine if stage == "zero1" else model.parameters(),
                                    lr=state["lr"], eps=state["eps"])
        self.model, self.buckets = model, stage == "ddp"

    def reset(self, state):
        """The initial parameters into this rank's shards, no Adam state (step 1 makes it): DDP needs no broadcast."""
        with torch.no_grad():
            for q, q0 in zip(self.model.parameters(), state["start"]):  # a DTensor: FSDP2's dim-0 chunk of q0
                part = q0[Z.dim0_chunk(q0.shape[0], state["rank"], state["n"])] if isinstance(q, DTensor) else q0
                T.local(q).copy_(part)
        if self.flat is None:
            self.opt.zero_grad(set_to_none=True)
        self.opt.state.clear()

    def resident(self):
        """Bytes this stage keeps allocated between runs: its parameters (local shards) and its gradient buffers."""
        return sum(T.local(a).nbytes for a in (self.flat or self.model.parameters())) * (2 if self.buckets else 1)

    def held(self):
        """Bytes of this rank's parameters, gradients and optimizer state (local shards), at the optimizer step."""
        ps = list(self.model.parameters())
        optim = sum(T.local(v).nbytes for s in self.opt.state.values() for v in s.values() if torch.is_tensor(v))
        if self.flat is not None:  # the flat buffers the parameters and gradients are views of
            return {"param_bytes": self.flat[0].nbytes, "grad_bytes": self.flat[1].nbytes, "optim_bytes": optim}
        return {"param_bytes": sum(T.local(q).nbytes for q in ps),
                "grad_bytes": sum(T.local(q.grad).nbytes for q in ps if q.grad is not None), "optim_bytes": optim}

    def step(self, state, x, t):
        """One step; stage 1: the gradient summed into this rank's chunks, Adam on them, every chunk gathered."""
        if self.flat is None:
            self.opt.zero_grad(set_to_none=True)
        else:
            self.flat[1].zero_()  # backward accumulates into the .grad views
        torch.nn.functional.mse_loss(self.model(x), t).backward()
        if self.flat is not None:
            for i in range(len(self.lay.chunk)):  # in place: recv = send + rank x count
                T.REDUCE_SCATTER(self.lay.own(self.flat[1], i, state["rank"]), self.lay.seg(self.flat[1], i))
            torch._foreach_div_([q.grad for q in self.mine], float(state["n"]))
        self.opt.step()
        if self.flat is not None:
            for i, q in enumerate(self.mine):  # in place: send = recv + rank x count
                T.ALL_GATHER(self.lay.seg(self.flat[0], i), q)


def _train(state, stage):
    """`steps` Adam steps; a stage's first run counts every collective of the call after the wrapper's construction
    under T.Sent (per step: what the timed call sends, a gather of the result included if it did one)."""
    w = state["wrapped"][stage] = state["wrapped"].get(stage) or _Wrapped(state, stage)
    cuda = state["device"].type == "cuda"
    sent = T.Sent(state["n"]) if stage not in state["sent"] else None
    with sent if sent is not None else contextlib.nullcontext():
        w.reset(state)
        base = torch.cuda.memory_allocated() - w.resident() if cuda else 0  # the allocator's count: no sync
        for x, t in zip(state["x"], state["t"]):
            w.step(state, x, t)
        out = {"params": Z.Readback(lambda: T.flat_params(w.model).cpu().numpy())}  # gathered when read back, untimed
    if sent is not None:
        state["sent"][stage] = {k: b / len(state["x"]) for k, b in sent.sent.items()}
    Z.report(w.held(), state["sent"][stage], torch.cuda.max_memory_allocated() - base if cuda else None)
    return out


def run_ddp(state):
    return _train(state, "ddp")


def run_zero1(state):
    return _train(state, "zero1")


def run_zero2(state):
    return _train(state, "zero2")


def run_zero3(state):
    return _train(state, "zero3")
