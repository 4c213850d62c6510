"""data_parallel in PyTorch: autograd, DistributedDataParallel (gloo on the CPU, NCCL on GPUs).

Rank processes joined the group before prepare (harness/backends/dist.py). DDP's constructor broadcasts
rank 0's parameters; its reducer all-reduces a bucket from an autograd hook as soon as backward has
written every gradient in it, on NCCL's own stream, and backward() returns only after the last bucket's
all-reduce is waited for on the current stream. On gloo every all-reduce blocks the host.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.metrics import emit
from impls._shared import dp
from scenarios.data_parallel import BUCKETS, sizes


def _model(flat, p, device):
    dims = sizes(p)
    layers = []
    for i, (w, b) in enumerate(dp.unflatten(flat, dims)):
        lin = torch.nn.Linear(*w.shape, device=device)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))  # torch stores W as (out, in)
            lin.bias.copy_(torch.from_numpy(b))
        layers += [lin, torch.nn.ReLU()] if i < len(dims) - 2 else [lin]
    return torch.nn.Sequential(*layers)


def _counting_hook(count, bucket):
    count["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
    count["buckets"] += 1
    return default_hooks.allreduce_hook(None, bucket)  # DDP's own: all-reduce, divide by world size


def _ddp(model, p, device, init_sync=True):
    n = sum(q.numel() for q in model.parameters())
    kw = {"device_ids": [device.index]} if device.type == "cuda" else {}
    ddp = DDP(model, bucket_cap_mb=n * 4 / BUCKETS / 2**20, init_sync=init_sync, **kw)
    count = {"bytes": 0, "buckets": 0}
    ddp.register_comm_hook(count, _counting_hook)
    return ddp, count


def prepare(inputs, params, device):
    s = {"x": torch.from_numpy(inputs["x"]).to(device), "t": torch.from_numpy(inputs["t"]).to(device),
         "lr": float(params["lr"]), "accum": int(params["accum"]), "rank": dist.get_rank(),
         "world": dist.get_world_size(), "plain": _model(inputs["init"], params, device)}
    s["ddp"], s["count"] = _ddp(_model(inputs["init_own"], params, device), params, device)  # broadcasts rank 0's
    s["own"], s["own_count"] = _ddp(_model(inputs["init_own"], params, device), params, device, init_sync=False)
    s["naive"] = _model(inputs["init_own"], params, device)
    for q in s["naive"].parameters():
        dist.broadcast(q.data, src=0)
    s["starts"] = {k: [q.detach().clone() for q in s[k].parameters()] for k in ("plain", "ddp", "own", "naive")}
    s["grad_bytes"] = sum(q.numel() * q.element_size() for q in s["plain"].parameters())
    return s


def barrier(state):
    dist.barrier()


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _restart(state, key):
    model = state[key]
    with torch.no_grad():
        for q, q0 in zip(model.parameters(), state["starts"][key]):
            q.copy_(q0)
    return model, torch.optim.SGD(model.parameters(), lr=state["lr"])


def _flat(model):
    mods = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return torch.cat([t for m in mods for t in (m.weight.detach().T.reshape(-1), m.bias.detach())])


def _mine(state, k):
    return dp.shard(state["x"][k], state["rank"], state["world"]), dp.shard(state["t"][k], state["rank"], state["world"])


def _loss(model, x, t):
    return torch.nn.functional.mse_loss(model(x), t)


def _micro_steps(state, key, accum, batch, sync_each=True):
    """`steps` SGD steps, each over `accum` micro-batches of batch(k); with sync_each False the all-
    reduce of every micro-batch but the last is skipped (DDP's no_sync)."""
    model, opt = _restart(state, key)
    for k in range(state["x"].shape[0]):
        opt.zero_grad(set_to_none=True)
        x, t = batch(k)
        m = x.shape[0] // accum
        for a in range(accum):
            quiet = not sync_each and a < accum - 1
            with model.no_sync() if quiet else torch.enable_grad():
                (_loss(model, x[a * m:(a + 1) * m], t[a * m:(a + 1) * m]) / accum).backward()
        opt.step()
    return {"params": _flat(getattr(model, "module", model))}


def _emit_counted(state, count_key):
    count, steps = state[count_key], state["x"].shape[0]
    emit("allreduce_bytes", count["bytes"] / steps)
    emit("buckets", count["buckets"] / steps)
    emit("grad_bytes", state["grad_bytes"])
    count["bytes"] = count["buckets"] = 0


def run_single_process(state):
    return _micro_steps(state, "plain", 1, lambda k: (state["x"][k], state["t"][k]))


def run_grad_accumulation(state):
    return _micro_steps(state, "plain", state["accum"], lambda k: (state["x"][k], state["t"][k]))


def run_ddp_naive(state):
    model, opt = _restart(state, "naive")
    comm = 0.0
    for k in range(state["x"].shape[0]):
        opt.zero_grad(set_to_none=True)
        _loss(model, *_mine(state, k)).backward()
        if state["x"].is_cuda:
            torch.cuda.synchronize()  # backward done: what follows is the all-reduces alone
        t0 = time.perf_counter()
        for q in model.parameters():  # one tensor at a time, after backward
            dist.all_reduce(q.grad)
            q.grad /= state["world"]
        if state["x"].is_cuda:
            torch.cuda.synchronize()
        comm += time.perf_counter() - t0
        opt.step()
    emit("comm_s", comm / state["x"].shape[0])
    emit("allreduce_bytes", state["grad_bytes"])
    emit("buckets", sum(1 for _ in model.parameters()))
    emit("grad_bytes", state["grad_bytes"])
    return {"params": _flat(model)}


def run_ddp_bucketed_overlap(state):
    out = _micro_steps(state, "ddp", 1, lambda k: _mine(state, k))
    _emit_counted(state, "count")
    return out


def run_ddp_accumulate_no_sync(state):
    out = _micro_steps(state, "ddp", state["accum"], lambda k: _mine(state, k), sync_each=False)
    _emit_counted(state, "count")
    return out


def run_unsynced_init(state):
    out = _micro_steps(state, "own", 1, lambda k: _mine(state, k))  # bug: init_sync=False, own weights kept
    _emit_counted(state, "own_count")
    return out
