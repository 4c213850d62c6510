"""torch.distributed machinery that more than one PyTorch impl uses: the collectives under their current names,
a TorchDispatchMode that counts the bytes each c10d collective sends, DDP on the rank's device, and the flat
readback of a model's Linear layers in the scenarios' output layout. Torch-only; importing it touches no GPU."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

from impls._shared import zero as Z

# torch 2.13 renamed these (the old names are deprecated); older torch has only the old ones.
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class Sent(TorchDispatchMode):
    """Counts the bytes a rank sends on a ring for each c10d collective under it (DDP, stage 1's calls, FSDP2)."""

    OPS = {"allreduce": "all_reduce", "all_reduce": "all_reduce", "broadcast": "broadcast", "allgather": "all_gather",
           "all_gather": "all_gather", "reduce_sc": "reduce_scatter"}

    def __init__(self, n):
        super().__init__()
        self.n, self.sent = n, dict.fromkeys(Z.KINDS, 0.0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out, name = func(*args, **(kwargs or {})), str(func)
        kind = next((k for op, k in self.OPS.items() if op in name), None)
        if name.startswith(("c10d.", "_c10d_functional.")) and kind is not None:  # DTensor's are functional
            leaves = [a for a in torch.utils._pytree.tree_leaves((args, out)) if isinstance(a, torch.Tensor)]
            big = max(a.numel() * a.element_size() for a in leaves)  # the whole buffer of a gather / scatter
            self.sent[kind] += Z.wire(kind, big, self.n)
        return out


def ddp(model, device, **kw):
    """DistributedDataParallel around model (its constructor broadcasts rank 0's parameters unless init_sync=False):
    on CUDA over the rank's device (device_ids), on the CPU over none."""
    return DDP(model, **({"device_ids": [device.index]} if device.type == "cuda" else {}), **kw)


def local(a):
    """This rank's part of a DTensor (FSDP2's dim-0 chunk); any other tensor as it is."""
    return a.to_local() if isinstance(a, DTensor) else a


def flat_params(model):
    """The Linear layers' parameters as one flat vector (W0, b0, W1, b1, ...; W as (in, out): torch keeps
    (out, in)), detached; a DTensor's all-gathered first (a collective every rank joins)."""
    mods = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    full = [(a.full_tensor() if isinstance(a, DTensor) else a).detach() for m in mods for a in (m.weight, m.bias)]
    return torch.cat([a.T.reshape(-1) if a.dim() == 2 else a for a in full])
