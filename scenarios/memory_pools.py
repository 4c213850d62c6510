"""memory_pools — where freed memory goes: the frameworks' pools, what they keep, and what that costs a
second framework in the same process.

Each run makes `cycles` device arrays of `n` float32 one after another; cycle k fills its array with x[k]
and keeps only the array's maximum, then frees it. The outputs are those maxima (bit-exact: x itself).
`raw` allocates with cudaMalloc and frees with cudaFree; `pooled` goes through the framework's allocator,
which keeps the freed block for the next cycle; `released` also hands the pool's memory back after each
cycle. The framework's own counters say what the pool holds once the arrays are gone. Two variants start
a fresh process (impls/_shared/child.py) with the frameworks' real defaults, which the harness's workers
do not have: `fresh_process` reads the driver's count after the first array, after the cycles and after
releasing; `beside_jax` lets JAX make its first array (and its default pool) before this framework asks
for 40% of the GPU.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict

SECOND_FRACTION = 0.4  # beside_jax asks for this share of the GPU: more than JAX's default pool leaves
JAX_DEFAULT_FRACTION = 0.75  # XLA_PYTHON_CLIENT_MEM_FRACTION's default, preallocated at the first array
# Below this the pools carve arrays out of shared segments (torch's small pool: 2 MiB segments for tensors up
# to 1 MiB, which any live small tensor keeps) and the driver counts in 2 MiB pages (nvidia-smi in MiB): the
# claims about what is held are not judged there.
MIN_JUDGED_BYTES = 16 << 20


def nbytes(p: Params) -> int:
    return int(p["n"]) * 4


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])
    return {"x": rng.uniform(0.5, 2.0, int(p["cycles"])).astype(np.float32)}


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    return {"peaks": inputs["x"].astype(np.float64)}  # a fill's maximum is the fill value


def _m(rows: Mapping[str, dict], variant: str, key: str) -> float:
    return rows[variant]["timing"]["metrics"].get(key, float("nan"))


def _faster(claim: str, slow: str, fast: str):
    def judge(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
        s, f = rows[slow]["timing"]["device_done"], rows[fast]["timing"]["device_done"]
        if not np.isfinite(_m(rows, fast, "held_after_free_bytes")):  # the CPU: no device pool, nothing to release
            return Verdict(claim, fw, "inconclusive", "no device pool here (the CPU): the cycles go through the "
                           "host's allocator, and releasing is a no-op", {})
        diff = s["median"] - f["median"]
        noise = (s["iqr"] + f["iqr"]) / 2
        verdict = "confirmed" if diff > noise else ("refuted" if diff < -noise else "inconclusive")
        per = int(p["cycles"])
        return Verdict(claim, fw, verdict, f"{slow} {s['median'] / per * 1e6:.4g} µs per cycle vs {fast} "
                       f"{f['median'] / per * 1e6:.4g} µs ({s['median'] / f['median']:.3g}x); spread ±"
                       f"{noise / per * 1e6:.2g} µs per cycle",
                       {f"{slow}_s": s["median"], f"{fast}_s": f["median"], "ratio": s["median"] / f["median"]})
    return judge


def _pool_holds(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    held, after = _m(rows, "pooled", "held_after_free_bytes"), _m(rows, "released", "held_after_free_bytes")
    nums = {"pooled_held_bytes": held, "released_held_bytes": after, "array_bytes": nbytes(p)}
    if not (np.isfinite(held) and np.isfinite(after)):
        return Verdict("pool_holds", fw, "inconclusive", "no pool counters on this device (the CPU)", nums)
    if nbytes(p) < MIN_JUDGED_BYTES:
        return Verdict("pool_holds", fw, "inconclusive", f"an array of {nbytes(p) / 2**20:.3g} MiB shares the pool's "
                       f"segments with the run's small arrays; judged from {MIN_JUDGED_BYTES >> 20} MiB", nums)
    if fw == "jax":  # no call empties JAX's pool: deleting the arrays leaves their bytes in it
        ok = held >= nbytes(p) and after >= nbytes(p)
    else:
        ok = held >= nbytes(p) and after < nbytes(p)
    return Verdict("pool_holds", fw, "confirmed" if ok else "refuted",
                   f"once the arrays are gone the pool holds {held / 2**20:.4g} MiB (an array is "
                   f"{nbytes(p) / 2**20:.4g} MiB); after releasing it, {after / 2**20:.4g} MiB", nums)


def _driver_holds(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    first = _m(rows, "fresh_process", "first_array_bytes")
    held, after = _m(rows, "fresh_process", "driver_held_bytes"), _m(rows, "fresh_process", "driver_released_bytes")
    nums = {"first_array_bytes": first, "driver_held_bytes": held, "driver_released_bytes": after,
            "array_bytes": nbytes(p)}
    if nbytes(p) < MIN_JUDGED_BYTES:
        return Verdict("driver_holds", fw, "inconclusive", f"an array of {nbytes(p) / 2**20:.3g} MiB is below what "
                       f"the driver's count shows apart from the pool's first segment; judged from "
                       f"{MIN_JUDGED_BYTES >> 20} MiB", nums)
    if fw == "jax":  # the pool was taken at the first array: freeing and "releasing" change nothing
        ok = first + after >= nbytes(p)
    else:
        ok = held >= 0.9 * nbytes(p) and after < 0.5 * nbytes(p)
    return Verdict("driver_holds", fw, "confirmed" if ok else "refuted",
                   f"the driver counts {first / 2**20:.4g} MiB after the first array, {held / 2**20:+.4g} MiB "
                   f"more once the cycles' arrays are freed, {after / 2**20:+.4g} MiB after releasing (an array is "
                   f"{nbytes(p) / 2**20:.4g} MiB)", nums)


def _first_array(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    share = _m(rows, "fresh_process", "first_array_bytes") / _m(rows, "fresh_process", "total_bytes")
    if not np.isfinite(share):
        return Verdict("first_array", fw, "inconclusive", "the driver's count was not read", {})
    ok = share >= JAX_DEFAULT_FRACTION - 0.05 if fw == "jax" else share < 0.05
    return Verdict("first_array", fw, "confirmed" if ok else "refuted",
                   f"a fresh process with one 4-byte array holds {share:.1%} of the GPU by the driver's count "
                   f"(context included)", {"first_array_share": share})


def _starves(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    failed = _m(rows, "beside_jax", "second_alloc_failed")
    jax_share = _m(rows, "beside_jax", "jax_held_bytes") / _m(rows, "beside_jax", "total_bytes")
    if not np.isfinite(failed):
        return Verdict("second_framework_starves", fw, "inconclusive", "not measured", {})
    return Verdict("second_framework_starves", fw, "confirmed" if failed >= 0.5 else "refuted",
                   f"with JAX's default pool holding {jax_share:.1%} of the GPU, {fw}'s {SECOND_FRACTION:.0%} "
                   f"allocation {'failed' if failed >= 0.5 else 'succeeded'} (the error goes to the worker's stderr)",
                   {"second_alloc_failed": failed, "jax_share": jax_share})


SCENARIO = Scenario(
    name="memory_pools",
    title="Where freed memory goes: pools, what they keep, and the second framework",
    concept=(
        "Asking the driver for memory (cudaMalloc) and giving it back (cudaFree, which waits for the device) is "
        "slow, so every framework keeps a pool: a freed array's block stays with the process for the next one. "
        "The pool's bytes stay taken for everyone else — the driver counts them as used until the pool is "
        "emptied (torch.cuda.empty_cache, cupy.get_default_memory_pool().free_all_blocks). JAX goes further: its "
        "first array preallocates 75% of the GPU (XLA_PYTHON_CLIENT_PREALLOCATE, XLA_PYTHON_CLIENT_MEM_FRACTION) "
        "and nothing gives it back while the process lives, so a second framework in the same process finds "
        "a quarter of the GPU left."
    ),
    variants=(
        Variant("raw", "cudaMalloc and cudaFree for every array (cupy.cuda.runtime.malloc/free)", gpu_only=True),
        Variant("pooled", "the framework's allocator: the freed block stays in its pool for the next cycle"),
        Variant("released", "the same, then the pool's free memory goes back to the driver after every cycle"),
        Variant("fresh_process", "a new process with the framework's default allocator settings: the driver's count "
                                 "after its first array, after the cycles, after releasing", gpu_only=True,
                fresh_process=True),
        Variant("beside_jax", "a new process where JAX, with its defaults, makes the first array; then this "
                              f"framework asks for {SECOND_FRACTION:.0%} of the GPU and runs the cycles",
                gpu_only=True, fresh_process=True),
    ),
    params=lambda: S.params(n=S.dims(1, 4096), cycles=st.integers(1, 6)),
    sizes={
        "smoke": [{"n": 1 << 14, "cycles": 8, "label": "64 KiB"}, {"n": 1 << 18, "cycles": 8, "label": "1 MiB"}],
        # One point: each point costs fresh_process and beside_jax five new processes per framework and row
        # (about two minutes on a GPU); below MIN_JUDGED_BYTES the claims about held bytes are not judged.
        "full": [{"n": 1 << 28, "cycles": 8, "label": "1 GiB"}],
    },
    max_examples=2,  # each example starts a process per variant and framework
    make_inputs=make_inputs,
    reference=reference,
    tolerance=Tolerance({"float32": (0.0, 0.0)}),
    claims=(
        Claim("pool_faster", "A cycle through the pool is faster than cudaMalloc + cudaFree.",
              _faster("pool_faster", "raw", "pooled"), gpu_only=True),
        Claim("release_costs", "Handing the pool's memory back after every cycle makes every cycle pay for the "
                               "allocation again.", _faster("release_costs", "released", "pooled"), gpu_only=True),
        Claim("pool_holds", "Once the arrays are freed the pool still holds their bytes, until it is emptied "
                            "(torch.cuda.empty_cache, free_all_blocks); JAX has no call that empties its pool.",
              _pool_holds, gpu_only=True),
        Claim("driver_holds", "The driver counts a pool's freed bytes as used until the pool is emptied (torch, "
                              "CuPy); JAX's preallocated pool counts as used from the first array on, released or not.",
              _driver_holds, gpu_only=True),
        Claim("first_array", "JAX holds its preallocated 75% of the GPU from the first array on; torch and CuPy "
                             "hold what they were asked for.", _first_array, gpu_only=True),
        Claim("second_framework_starves", f"Beside JAX's default pool, a second framework in the same process "
                                          f"cannot allocate {SECOND_FRACTION:.0%} of the GPU.", _starves,
              gpu_only=True),
    ),
    key_apis={
        "torch": ("torch.cuda.memory_reserved", "torch.cuda.memory_allocated", "torch.cuda.empty_cache",
                  "PYTORCH_NO_CUDA_MEMORY_CACHING"),
        "cupy": ("cupy.cuda.runtime.malloc / free", "cupy.get_default_memory_pool().total_bytes / used_bytes",
                 "free_all_blocks"),
        "jax": ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
                "Device.memory_stats()", "jax.Array.delete"),
    },
    framework_notes={
        "torch": "No raw cudaMalloc path in torch's API: the closest is PYTORCH_NO_CUDA_MEMORY_CACHING=1, which "
                 "makes the caching allocator call cudaMalloc/cudaFree for every tensor, but it is read once when "
                 "CUDA starts (the harness's worker has started it), so `raw` is not run. The pool's counters: "
                 "memory_reserved minus memory_allocated; torch.cuda.empty_cache releases the unused cached blocks. "
                 "beside_jax: torch raises torch.OutOfMemoryError after its allocator has emptied its own cache and "
                 "retried.",
        "cupy": "raw wraps cupy.cuda.runtime.malloc's pointer in an ndarray (UnownedMemory) and waits for the stream"
                " before cupy.cuda.runtime.free (cudaFree would wait for the device anyway). The pool's counters: "
                "get_default_memory_pool().total_bytes() minus used_bytes(); free_all_blocks() releases.",
        "jax": "No raw path: XLA_PYTHON_CLIENT_ALLOCATOR=platform allocates and frees on demand, but it is read when"
               " the backend starts, so `raw` is not run. The harness's workers run with preallocation off and a "
               "capped pool (XLA's BFC allocator grows on demand up to the cap and never shrinks); `released` "
               "deletes each array (jax.Array.delete), the closest idiom: nothing returns the pool's memory to the "
               "driver, and jax.clear_caches() drops compiled programs, not memory. The pool's counters: "
               "memory_stats()'s pool_bytes (else bytes_reserved) minus bytes_in_use, read after the run's last "
               "program is done (its blocks return to the pool only then): JAX's pooled and released runs wait "
               "inside the call. fresh_process runs with JAX's defaults: 75% preallocated at the first array. "
               "beside_jax is the other frameworks' row: JAX is the first framework there.",
    },
    metrics_doc={
        "held_after_free_bytes": "bytes the framework's pool holds that no array uses, by its own counters, once the "
                                 "run's arrays are freed (GPU only)",
        "first_array_bytes": "fresh_process: the driver's count after the process's first array minus before the "
                             "process started (CUDA context and the pool's first segment, or JAX's whole pool)",
        "driver_held_bytes": "fresh_process: the driver's count after the cycles' arrays were freed minus after the "
                             "first array",
        "driver_released_bytes": "fresh_process: the same after releasing the pool (JAX: deleting and clearing caches)",
        "total_bytes": "the GPU's memory, by the driver",
        "second_alloc_failed": "beside_jax: 1 when this framework could not allocate its share beside JAX's pool",
        "jax_held_bytes": "beside_jax: the driver's count after JAX's first array minus before the process started",
    },
)
