"""data_parallel in PyTorch: autograd, DistributedDataParallel (gloo on the CPU, NCCL on GPUs).

Rank processes joined the group before prepare (harness/backends/dist.py). DDP's constructor broadcasts rank 0's
parameters; its reducer all-reduces a bucket from an autograd hook once backward wrote every gradient in it, on
NCCL's own stream; backward() returns only after the last bucket's all-reduce is waited for on the current stream.
DDP keeps its defaults: one bucket in the first step, then buckets rebuilt in the order backward made the gradients
ready, a first of at least 1 MiB and then 25 MiB each (impls/_shared/dp.py bucket_plan). On gloo every all-reduce
blocks the host. Every all-reduce is counted where it is called: DDP's comm hook, the naive loop's _all_reduce."""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from harness.measure.metrics import emit
from impls._shared import dp
from impls._shared import torch_dist as T
from scenarios.data_parallel import sizes


def _model(flat, dims, device):
    """torch.nn.Sequential of Linear layers (ReLU between) holding the flat parameters (W0, b0, W1, b1, ...)."""
    layers = []
    for i, (w, b) in enumerate(dp.unflatten(flat, dims)):
        lin = torch.nn.Linear(*w.shape, device=device)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w).to(device).T)  # W is (out, in) in torch: transposed on the device
            lin.bias.copy_(torch.from_numpy(b))
        layers += [lin, torch.nn.ReLU()] if i < len(dims) - 2 else [lin]
    return torch.nn.Sequential(*layers)


def _grads(model, x, t, accum, sync_each=True):
    """Backward of accum micro-batches into .grad, each / accum; sync_each=False: DDP all-reduces the last (no_sync)."""
    m = x.shape[0] // accum
    for a in range(accum):
        with model.no_sync() if not sync_each and a < accum - 1 else contextlib.nullcontext():
            (torch.nn.functional.mse_loss(model(x[a * m:(a + 1) * m]), t[a * m:(a + 1) * m]) / accum).backward()


def _reducer(model, device, init_sync=True):
    """DDP around model with its default buckets (broadcasts rank 0's parameters unless init_sync=False); a comm
    hook counts each bucket's bytes."""
    ddp, count = T.ddp(model, device, init_sync=init_sync), dp.Tally()

    def hook(tally, bucket):
        tally.add(bucket.buffer().numel() * bucket.buffer().element_size())
        return default_hooks.allreduce_hook(None, bucket)  # DDP's own: all-reduce, divide by world size

    ddp.register_comm_hook(count, hook)
    return ddp, count


def prepare(inputs, params, device):
    own = lambda: _model(inputs["init_own"], sizes(params), device)  # noqa: E731 - this rank's own draw
    s = {"x": torch.from_numpy(inputs["x"]).to(device), "t": torch.from_numpy(inputs["t"]).to(device),
         "lr": float(params["lr"]), "accum": int(params["accum"]), "rank": dist.get_rank(),
         "world": dist.get_world_size(), "plain": _model(inputs["init"], sizes(params), device), "naive": own()}
    s["ddp"], s["count"] = _reducer(own(), device)  # DDP broadcasts rank 0's weights
    s["own"], s["own_count"] = _reducer(own(), device, init_sync=False)
    s["naive_count"] = dp.Tally()
    for q in s["naive"].parameters():
        dist.broadcast(q.data, src=0)
    s["starts"] = {k: [q.detach().clone() for q in s[k].parameters()] for k in ("plain", "ddp", "own", "naive")}
    s["grad_bytes"] = sum(q.numel() * q.element_size() for q in s["plain"].parameters())
    return s


def barrier(state):
    dist.barrier()


def poison(state):
    barrier(state)  # untimed, before every repeat: the ranks start together


def _train(state, key, accum, mine, sync_each=True, reduce=lambda model: None, count=None):
    """`steps` SGD steps of state[key] from its start, on the global batch or this rank's shard;
    reduce(model) runs between backward and the step; with count, _emit(state, count) after."""
    model = state[key]
    with torch.no_grad():
        for q, q0 in zip(model.parameters(), state["starts"][key]):
            q.copy_(q0)
    opt = torch.optim.SGD(model.parameters(), lr=state["lr"])
    for k in range(state["x"].shape[0]):
        opt.zero_grad(set_to_none=True)
        x, t = (dp.shard(a[k], state["rank"], state["world"]) if mine else a[k] for a in (state["x"], state["t"]))
        _grads(model, x, t, accum, sync_each)
        reduce(model)
        opt.step()
    if count is not None:
        _emit(state, count)
    return {"params": T.flat_params(model)}


def _emit(state, count):
    """Per step: the bytes and all-reduce calls counted over the call (then reset)."""
    dp.emit_per_step(state["x"].shape[0], *count.take(), state["grad_bytes"])


def _comm_seconds(state):
    """The naive step's all-reduces alone (one per gradient tensor), synchronized before and after: the median
    of 5 after one warm-up, measured once, in the variant's first (untimed) call."""
    if "comm_s" not in state:
        bufs = [torch.zeros_like(q) for q in state["naive"].parameters()]
        sync = torch.cuda.synchronize if state["x"].is_cuda else (lambda: None)

        def run():
            for b in bufs:
                dist.all_reduce(b)
            sync()
        state["comm_s"] = dp.median_seconds(sync, run)
    return state["comm_s"]


def run_single_process(state):
    return _train(state, "plain", 1, mine=False)


def run_grad_accumulation(state):
    return _train(state, "plain", state["accum"], mine=False)


def _naive(state, key):
    def reduce(model):
        for q in model.parameters():  # one tensor at a time, after backward: no overlap; its bytes counted
            state["naive_count"].add(q.grad.numel() * q.grad.element_size())
            dist.all_reduce(q.grad)
            q.grad /= state["world"]

    return _train(state, key, 1, mine=True, reduce=reduce, count=state["naive_count"])


def run_ddp_naive(state):
    emit("comm_s", _comm_seconds(state))
    return _naive(state, "naive")


def run_ddp_bucketed_overlap(state):
    return _train(state, "ddp", 1, mine=True, count=state["count"])  # DDP's reducer: buckets from autograd hooks


def run_ddp_accumulate_no_sync(state):
    return _train(state, "ddp", state["accum"], mine=True, sync_each=False, count=state["count"])


def run_unsynced_init(state):
    return _train(state, "own", 1, mine=True, count=state["own_count"])  # bug: init_sync=False, ranks keep own draws
