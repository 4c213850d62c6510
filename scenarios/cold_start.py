"""cold_start — the first call in a fresh process: import, context, the first kernel and its compilation,
with and without each framework's persistent cache.

Every timed run starts one fresh Python process (impls/_shared/child.py) that times its own phases: the
framework's import, the first device array (context creation and the copy of the input), the first call
of a small program (an elementwise tanh and a reduction: compiled, or read from the cache, then run) and
a second call. The harness repeats the run, so its repeats are processes, and a row's metrics are the
medians of the phases over them. `cold_cache` gives every process an empty cache folder; `warm_cache`
one filled by an untimed process in prepare. The program's outputs come back from the child and are
checked like any other.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict, ratio_verdict

SCALE = 1.5  # y = tanh(1.5 x), s = sum(y * x): every term is >= 0, so the sum has no cancellation
WARM_SAVES = 2.0  # a warm cache must cut the first call at least this much
JAX_DEFAULT_MIN_COMPILE_S = 1.0  # jax_persistent_cache_min_compile_time_secs's default


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])
    return {"x": rng.standard_normal(int(p["n"]), dtype=np.float32)}


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    x = inputs["x"].astype(np.float64)
    y = np.tanh(SCALE * x)
    return {"y": y, "s": np.asarray(np.sum(y * x))}


def _m(rows: Mapping[str, dict], variant: str, key: str) -> float:
    return rows[variant]["timing"]["metrics"].get(key, float("nan"))


def _warm_first_call(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    cold, warm = _m(rows, "cold_cache", "first_call_s"), _m(rows, "warm_cache", "first_call_s")
    hits = _m(rows, "warm_cache", "cache_files_added")
    ratio = cold / warm if warm > 0 else float("nan")
    v = ratio_verdict("warm_first_call", fw, ratio, WARM_SAVES, lower_is_confirmed=False,
                      what="first call cold / warm (medians over processes)",
                      numbers={"cold_first_call_s": cold, "warm_first_call_s": warm, "ratio": ratio,
                               "warm_cache_files_added": hits})
    return Verdict(v.claim, fw, v.verdict, f"first call {cold * 1e3:.4g} ms with an empty cache, {warm * 1e3:.4g} ms "
                   f"with a warm one (the warm process added {hits:g} files to it): {v.evidence}", v.numbers)


def _warm_process(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    c, w = rows["cold_cache"]["timing"]["device_done"], rows["warm_cache"]["timing"]["device_done"]
    diff = c["median"] - w["median"]
    noise = (c["iqr"] + w["iqr"]) / 2
    verdict = "confirmed" if diff > noise else ("refuted" if diff < -noise else "inconclusive")
    return Verdict("warm_process", fw, verdict,
                   f"a whole process (start to exit) {c['median']:.3g} s cold vs {w['median']:.3g} s warm: "
                   f"{diff:+.3g} s saved; spread ±{noise:.2g} s",
                   {"cold_process_s": c["median"], "warm_process_s": w["median"], "saved_s": diff})


def _jax_default_caches_nothing(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    if fw != "jax":
        return Verdict("jax_default_min_time", fw, "inconclusive", "a rule of JAX's cache: no minimum elsewhere", {})
    compile_s = _m(rows, "cold_cache", "compile_s")
    if not math.isfinite(compile_s):
        return Verdict("jax_default_min_time", fw, "inconclusive", "XLA's compile time was not reported", {})
    v = ratio_verdict("jax_default_min_time", fw, compile_s, JAX_DEFAULT_MIN_COMPILE_S, lower_is_confirmed=True,
                      what="XLA compile seconds in a cold process", numbers={"compile_s": compile_s})
    return Verdict(v.claim, fw, v.verdict, f"{v.evidence} s: below it, JAX's default keeps nothing", v.numbers)


SCENARIO = Scenario(
    name="cold_start",
    title="The first call in a fresh process: import, context, compile, and the persistent caches",
    concept=(
        "A fresh process pays for the framework's import, the device context, and the compilation of every "
        "program it runs for the first time; the second call pays none of it. Persistent caches keep compiled "
        "programs on disk so that the next process reads them instead of compiling: JAX's compilation cache "
        "(jax_compilation_cache_dir; by default it keeps only programs that took at least 1 s to compile, "
        "jax_persistent_cache_min_compile_time_secs), torch.compile's Inductor and Triton caches "
        "(TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR) and CuPy's kernel cache (CUPY_CACHE_DIR, ~/.cupy/kernel_cache "
        "by default). Every timed run here is a new process that times its own phases; the harness's repeats are "
        "those processes."
    ),
    variants=(
        Variant("cold_cache", "a fresh process with an empty cache folder: import, context, compile, run",
                fresh_process=True),
        Variant("warm_cache", "a fresh process whose cache folder an earlier, untimed process filled with the same "
                              "program", fresh_process=True),
    ),
    params=lambda: S.params(n=st.sampled_from([1, 7, 1000, 4096]), dtype=st.just("float32")),
    sizes={
        "smoke": {"n": 4096, "dtype": "float32"},
        "full": {"n": 1 << 20, "dtype": "float32"},  # 4 MiB: the run is nothing beside the start-up
    },
    max_examples=2,  # each example starts a process per variant and framework
    make_inputs=make_inputs,
    reference=reference,
    tolerance=Tolerance({"float32": (1e-5, 1e-4)}),
    claims=(
        Claim("warm_first_call", f"A warm persistent cache cuts a fresh process's first call at least "
                                 f"{WARM_SAVES:g}x: the program is read, not compiled.", _warm_first_call),
        Claim("warm_process", "A warm cache makes the whole fresh process (import to exit) measurably shorter.",
              _warm_process),
        Claim("jax_default_min_time", "At JAX's default jax_persistent_cache_min_compile_time_secs (1 s) a program "
                                      "this small is never cached: it compiles in less.", _jax_default_caches_nothing),
    ),
    key_apis={
        "torch": ("torch.compile", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                  "torch._dynamo.utils.counters['inductor']['fxgraph_cache_hit']"),
        "cupy": ("cupy.ElementwiseKernel", "cupy.ReductionKernel", "CUPY_CACHE_DIR"),
        "jax": ("jax.jit", "jax.config.update('jax_compilation_cache_dir', d)",
                "jax_persistent_cache_min_compile_time_secs", "jax.monitoring.register_event_listener"),
    },
    framework_notes={
        "torch": "The program is a torch.compile'd function (Inductor: Triton kernels on the GPU, C++ on the CPU). "
                 "Inductor's FX-graph cache and Triton's kernel cache live under TORCHINDUCTOR_CACHE_DIR and "
                 "TRITON_CACHE_DIR (by default /tmp/torchinductor_$USER); Dynamo still traces the Python function in"
                 " every new process, cache or not. Inductor's default pool of compile workers (one process per "
                 "CPU, up to 32; TORCHINDUCTOR_COMPILE_THREADS) starts in the child as it would in a user's "
                 "process: part of the cold start, left as torch sets it (the harness kills the child's process "
                 "group when the child ends, idle workers included). On the CPU a cold process compiles C++ with g++ for about a "
                 "minute on the 2-core CI host, times the harness's repeats: torch's rows run on a GPU only.",
        "cupy": "The program is a cupy.ElementwiseKernel and a cupy.ReductionKernel: NVRTC compiles each on its "
                "first call and CuPy writes the cubin under CUPY_CACHE_DIR (~/.cupy/kernel_cache by default), which "
                "the next process loads instead. CuPy's own kernels (the fills behind cupy.ones, ...) go to the same"
                " folder. No CUDA device, no CuPy.",
        "jax": "The program is one jax.jit (XLA fuses the tanh into the reduction's kernel). The cache folder is set"
               " with jax.config.update('jax_compilation_cache_dir', ...) and "
               "jax_persistent_cache_min_compile_time_secs = 0: at the default of 1 s nothing this small would be "
               "written, so a warm cache would change nothing. Tracing and lowering still run in every process: the "
               "cache saves XLA's compile. The child keeps the harness's memory settings (no 75% preallocation: "
               "memory_pools is about that), so init_s is not the default's start-up on a GPU. Runs on the CPU too.",
    },
    metrics_doc={
        "import_s": "the framework's import, timed inside the child (median over the processes)",
        "init_s": "the first device array: backend or context creation and the input's copy",
        "first_call_s": "the program's first call: trace, compile or cache read, run, wait",
        "second_call_s": "the same call again in the same process",
        "process_s": "the child process from spawn to exit, measured by its parent",
        "cache_files_added": "files the child added to its cache folder (0 where the warm cache served it all)",
        "cache_hits": "persistent-cache hits the framework counted in the child (JAX's /jax/compilation_cache/"
                      "cache_hits events; torch's fxgraph_cache_hit); absent for CuPy, which counts none",
        "compile_s": "XLA's backend compile seconds in the child (JAX only)",
    },
)
