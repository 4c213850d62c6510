"""memory_pools' child: one fresh process with the frameworks' default allocator settings, which the
harness's workers do not have (impls/_shared/child.py drops the harness's overrides).

    python -m impls.memory_pools.child FW MODE ORDINAL N XS_JSON
MODE fresh_process: the driver's count before anything, after FW's first array, after the cycles' arrays
are freed, after releasing the pool. MODE beside_jax: JAX, with its defaults, makes the first array;
then FW asks for SECOND_FRACTION of the GPU (one cycle of that size), then runs the cycles. The driver's
count is device-wide: the harness's other processes are idle meanwhile.
"""
import importlib
import json
import sys

import numpy as np

from impls._shared.child import as_child, driver_memory, say
from scenarios.memory_pools import SECOND_FRACTION

as_child()

# Words of the allocators' out-of-memory errors (the harness's backends read the same ones; an impl imports no
# backend): torch's and CuPy's CUDA errors, XLA's RESOURCE_EXHAUSTED.
OOM_WORDS = ("out of memory", "resource_exhausted", "cudaerrormemoryallocation", "cublas_status_alloc_failed")


def used(ordinal: int) -> dict:
    m = driver_memory(ordinal)
    if m is None:
        raise RuntimeError("no driver count of the GPU's memory: neither NVML (pynvml) nor nvidia-smi answered")
    return m


def main(fw: str, mode: str, ordinal: str, n: str, xs: str) -> None:
    i, x = int(ordinal), np.asarray(json.loads(xs), np.float32)
    r0 = used(i)
    got = {"total_bytes": r0["total"]}
    if mode == "beside_jax":
        import jax

        jax.device_put(np.zeros(1, np.float32), jax.devices()[i]).block_until_ready()  # JAX's first array
        got["jax_held_bytes"] = used(i)["used"] - r0["used"]
    impl = importlib.import_module(f"impls.memory_pools.{fw}_impl")
    device = impl.device_of(i)
    state = impl.prepare({"x": x}, {"n": int(n)}, device)  # FW's first array: the input, on the device
    state["x"].tolist()  # waits for it
    r1 = used(i)
    got["first_array_bytes"] = r1["used"] - r0["used"]
    if mode == "beside_jax":
        big = int(SECOND_FRACTION * r0["total"]) // 4  # float32 elements
        try:
            impl.cycles(impl.prepare({"x": x[:1]}, {"n": big}, device), False)["peaks"].tolist()
            got["second_alloc_failed"] = 0
        except Exception as e:  # noqa: BLE001 - only running out of memory is the finding; the rest fails
            if not any(w in str(e).lower() for w in OOM_WORDS):
                raise
            got["second_alloc_failed"] = 1
            got["second_alloc_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
        impl.release(state)
    peaks = impl.cycles(state, False)["peaks"].tolist()  # waits for the cycles: their arrays are freed
    got["held_after_free_bytes"] = impl.held(state)
    got["driver_held_bytes"] = used(i)["used"] - r1["used"]
    impl.release(state)
    got["driver_released_bytes"] = used(i)["used"] - r1["used"]
    say({k: v for k, v in got.items() if v is not None} | {"peaks": peaks})


if __name__ == "__main__":
    main(*sys.argv[1:6])
