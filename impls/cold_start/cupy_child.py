"""cold_start's child in CuPy: one fresh process, its phases timed inside it (impls/_shared/child.py).

    python -m impls.cold_start.cupy_child DEVICE CACHE_DIR IN.npy OUT.npz
CuPy's kernel cache is pointed at CACHE_DIR before cupy is imported (CuPy reads CUPY_CACHE_DIR when it
compiles). cupy is imported only here, after the clock starts.
"""
import os
import sys
import time

from impls._shared.child import as_child, say  # the standard library alone: before the clock

as_child()

os.environ["CUPY_CACHE_DIR"] = sys.argv[2]
t0 = time.perf_counter()
import cupy  # noqa: E402
import numpy as np  # noqa: E402

t_import = time.perf_counter()
from scenarios.cold_start import SCALE  # noqa: E402  (after the clock: hypothesis is no framework's import)


def main(platform: str, cache: str, src: str, dst: str) -> None:
    t1 = time.perf_counter()
    x = cupy.asarray(np.load(src))  # context, pool, copy (on the legacy default stream)
    cupy.cuda.Device().synchronize()
    t2 = time.perf_counter()
    # Compiled by NVRTC at their first call (or loaded from the cache folder's cubin), then launched.
    tanh = cupy.ElementwiseKernel("T x", "T y", f"y = tanh(x * (T){SCALE})", "cold_start_tanh")
    dot = cupy.ReductionKernel("T x", "T s", f"tanh(x * (T){SCALE}) * x", "a + b", "s = a", "0", "cold_start_dot")
    out = tanh(x), dot(x)
    cupy.cuda.Device().synchronize()
    t3 = time.perf_counter()
    tanh(x), dot(x)  # the in-process cache: launches only
    cupy.cuda.Device().synchronize()
    t4 = time.perf_counter()
    np.savez(dst, y=cupy.asnumpy(out[0]), s=cupy.asnumpy(out[1]))
    say({"import_s": t_import - t0, "init_s": t2 - t1, "first_call_s": t3 - t2, "second_call_s": t4 - t3})


if __name__ == "__main__":
    main(*sys.argv[1:5])
