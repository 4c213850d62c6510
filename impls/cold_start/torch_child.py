"""cold_start's child in PyTorch: one fresh process, its phases timed inside it (impls/_shared/child.py).

    python -m impls.cold_start.torch_child DEVICE CACHE_DIR IN.npy OUT.npz
Inductor's and Triton's caches are pointed at CACHE_DIR before torch is imported (Inductor reads the
variables when it first compiles). torch is imported only here, after the clock starts.
"""
import os
import sys
import time

from impls._shared.child import as_child, say  # the standard library alone: before the clock

as_child()

os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(sys.argv[2], "inductor")
os.environ["TRITON_CACHE_DIR"] = os.path.join(sys.argv[2], "triton")
t0 = time.perf_counter()
import torch  # noqa: E402
import numpy as np  # noqa: E402

t_import = time.perf_counter()
from scenarios.cold_start import SCALE  # noqa: E402  (after the clock: hypothesis is no framework's import)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(platform: str, cache: str, src: str, dst: str) -> None:
    from torch._dynamo.utils import counters

    device = torch.device(platform)
    t1 = time.perf_counter()
    x = torch.from_numpy(np.load(src)).to(device)  # context (lazy in torch: made here), copy
    sync(device)
    t2 = time.perf_counter()

    @torch.compile
    def program(x):
        y = torch.tanh(x * SCALE)
        return y, torch.sum(y * x)

    out = program(x)  # Dynamo traces; Inductor compiles (or reads its cache); run
    sync(device)
    t3 = time.perf_counter()
    program(x)  # the in-process cache: Dynamo's guards pass, the compiled code runs
    sync(device)
    t4 = time.perf_counter()
    np.savez(dst, y=out[0].cpu().numpy(), s=out[1].cpu().numpy())
    say({"import_s": t_import - t0, "init_s": t2 - t1, "first_call_s": t3 - t2, "second_call_s": t4 - t3,
         "cache_hits": counters["inductor"]["fxgraph_cache_hit"]})


if __name__ == "__main__":
    main(*sys.argv[1:5])
