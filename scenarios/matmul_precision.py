"""matmul_precision — a float32 GEMM is not the same computation in the three frameworks.

C = A @ B in float32, four ways: each framework's default, full float32 in all three, TF32 in all
three, and bf16 operands as a reference point. The harness pins every process to full float32; each
variant sets its framework's precision for its own call and restores it. The default is what a fresh
child process reads with none of the harness's pins (impls/matmul_precision/defaults.py), so a user's own
setting (CUPY_TF32=1, say) makes it differ and the claim about it fail. The error against float64 is
computed by the harness, untimed, from the timed call's outputs (output_metrics). Each timed sample is
CALLS back-to-back GEMMs (nccl-tests' -n): one call's dispatch would otherwise sit in device-done, and
a TF32 GEMM of 0.4 ms is short enough for JAX's 0.1-0.2 ms dispatch to show. The speed-up claim reads the
kernel clock, the device's own time.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict

# |out - ref| <= atol + rtol * |ref|, the output at unit scale (make_inputs). Full float32 stays near 2e-6
# of the scale; TF32 keeps 10 mantissa bits (median error ~2e-4, max ~2e-3 of the scale, more where cuBLAS
# truncates instead of rounding); bf16 keeps 7, and its product is rounded to bf16 (max ~2e-2).
# Full float32: a dot product of k terms errs by ~sqrt(k) x 2^-24 of the unit-scaled output, its largest over
# 16 M outputs a few times that; a GPU run put 8192^3's worst at 2.4e-5 (cuBLAS; JAX 1.1e-5). TF32's median
# error (~2e-4) is 4x over, so a TF32 GEMM still fails this tolerance.
FP32 = Tolerance({"float32": (1e-5, 5e-5)})
TF32 = Tolerance({"float32": (1e-2, 1e-2)})
BF16 = Tolerance({"float32": (2e-2, 5e-2)})
CALLS = 10  # back-to-back GEMMs per timed sample


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])
    m, k, n = int(p["m"]), int(p["k"]), int(p["n"])
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    b *= np.float32(1.0 / math.sqrt(k))  # C at unit scale whatever k: one tolerance fits every size
    return {"a": a, "b": b}


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    return {"c": inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)}


def errors(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], p: Params) -> dict[str, float]:
    """|C - C64| over the reference's root mean square: the largest and the median element."""
    ref = np.asarray(want["c"], dtype=np.float64)
    err = np.abs(np.asarray(got["c"], dtype=np.float64) - ref)
    scale = float(np.sqrt(np.mean(ref * ref))) or 1.0
    return {"err_max": float(err.max()) / scale, "err_median": float(np.median(err)) / scale}


def floor(p: Params, machine: Mapping[str, float], variant: str) -> float | None:
    # The machine's fp32 ceiling is an 8192^3 float32 cuBLAS GEMM with TF32 off: a floor for full float32 only.
    if variant != "matched_fp32" or "fp32_flops" not in machine:
        return None
    return 2.0 * int(p["m"]) * int(p["k"]) * int(p["n"]) / machine["fp32_flops"]


def _err(rows: Mapping[str, dict], variant: str) -> float:
    return float(rows[variant]["timing"]["metrics"]["err_median"])


DEFAULT_IS = {"torch": "matched_fp32", "cupy": "matched_fp32", "jax": "matched_tf32"}


def _default_precision(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    d, f, t = _err(rows, "framework_default"), _err(rows, "matched_fp32"), _err(rows, "matched_tf32")
    nums = {"default_err": d, "fp32_err": f, "tf32_err": t}
    if not t > 10 * f:  # TF32 did not lose digits: the device has no TF32, nothing to tell apart
        return Verdict("default_precision", fw, "inconclusive",
                       f"TF32's error {t:.2g} is not 10x float32's {f:.2g}: no TF32 on this device", nums)
    nearer = "matched_tf32" if abs(math.log(d / t)) < abs(math.log(d / f)) else "matched_fp32"
    ok = nearer == DEFAULT_IS[fw]
    return Verdict("default_precision", fw, "confirmed" if ok else "refuted",
                   f"default's median error {d:.2g} is {nearer.split('_')[1].upper()}'s class "
                   f"(fp32 {f:.2g}, tf32 {t:.2g}); expected {DEFAULT_IS[fw].split('_')[1].upper()}", nums)


def _tf32_error(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    f, t = _err(rows, "matched_fp32"), _err(rows, "matched_tf32")
    return _ratio("tf32_error", fw, t / f, 100.0, f"median error TF32 / float32 ({t:.2g} / {f:.2g})",
                  {"fp32_err": f, "tf32_err": t})


def _tf32_speedup(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    # the kernel clock: the GEMMs' own time on the device, with no host dispatch in it
    f, t = rows["matched_fp32"]["timing"]["kernel"], rows["matched_tf32"]["timing"]["kernel"]
    # The medians' ratio: the harness redraws both medians and calls a ratio inside the noise inconclusive
    # (harness/check/judging.py); quartiles, which it does not redraw, would turn spread into "refuted".
    return _ratio("tf32_speedup", fw, f["median"] / t["median"], 2.0,
                  f"float32 / TF32 median kernel time ({f['median'] * 1e3:.3g} ms / {t['median'] * 1e3:.3g} ms)",
                  {"fp32_s": f["median"], "tf32_s": t["median"]})


def _ratio(claim: str, fw: str, value: float, threshold: float, what: str, nums: dict) -> Verdict:
    ok = value > threshold
    return Verdict(claim, fw, "confirmed" if ok else "refuted",
                   f"{what} = {value:.3g} {'>' if ok else '≤'} {threshold:g}", nums | {"ratio": value})


SCENARIO = Scenario(
    name="matmul_precision",
    title="A float32 matmul is not the same computation in the three",
    concept=(
        "On a GPU with tensor cores a float32 GEMM can round its operands to TF32 (10 mantissa bits) and run "
        "several times faster. JAX lets XLA do that by default; torch has kept it off for matmul since 1.12; "
        "CuPy does it only when asked. The same code ported between them changes its answer in the fourth "
        "digit, and its speed several-fold. Set the precision explicitly, the same way in all three."
    ),
    variants=(
        Variant("framework_default", "each framework's own default for a float32 matmul, as a fresh process "
                "without the harness's pins reads it (set and restored around the call: the harness pins "
                "full float32)", tolerance=TF32),
        Variant("matched_fp32", "full float32 in all three (TF32 off)"),
        Variant("matched_tf32", "TF32 in all three (float32 in memory, operands rounded to TF32 in the "
                "tensor cores, float32 accumulation); TF32 is a tensor-core format: no CPU has it",
                gpu_only=True, tolerance=TF32),
        Variant("bf16", "bf16 operands (converted untimed), float32 accumulation inside the GEMM, the product "
                "returned as bf16 by `@` and cast to float32: a reference point", tolerance=BF16),
    ),
    params=lambda: S.params(m=S.dims(1, 48), k=S.dims(1, 64), n=S.dims(1, 48), dtype=S.float_dtypes("float32")),
    sizes={
        "smoke": {"m": 256, "k": 512, "n": 256, "dtype": "float32"},
        # ~137 GFLOP: ~2.7 ms at full float32 (~50 TFLOP/s), ~0.4 ms at TF32: the GEMM sets the pace, not the
        # launch. 8192^3 took 221 s of a run, most of it the float64 reference on the host.
        "full": {"m": 4096, "k": 4096, "n": 4096, "dtype": "float32"},
    },
    make_inputs=make_inputs,
    reference=reference,
    tolerance=FP32,
    output_metrics=errors,
    claims=(
        Claim("default_precision", "By default a float32 matmul runs at TF32 in JAX and at full float32 in "
              "torch and CuPy.", _default_precision, gpu_only=True),
        Claim("tf32_error", "TF32 costs over two decimal digits: its median error against float64 is over 100x "
              "full float32's.", _tf32_error, gpu_only=True),
        Claim("tf32_speedup", "TF32 makes the float32 matmul over twice as fast.", _tf32_speedup, gpu_only=True),
    ),
    floor=floor,
    calls=lambda p: CALLS,
    agree_by={
        "torch": "full float32 is the default; `torch.set_float32_matmul_precision('high')` for TF32",
        "cupy": "full float32 is the default; `CUPY_TF32=1` before the first float32 matmul for TF32",
        "jax": "`jax.config.update('jax_default_matmul_precision', 'highest')` for full float32 (the default "
               "is TF32-class on Ampere and later), or `precision=` per call",
    },
    key_apis={
        "torch": ("torch.set_float32_matmul_precision('highest' | 'high')", "torch.backends.cuda.matmul.allow_tf32",
                  "Tensor.bfloat16()"),
        "cupy": ("CUPY_TF32=1 (read at the first float32 matmul)", "cupy._core.set_compute_type(float32, "
                 "COMPUTE_TYPE_TF32)", "ml_dtypes.bfloat16"),
        "jax": ("jnp.matmul(precision='highest' | 'F32_F32_F32' | 'TF32_TF32_F32')", "jax.default_matmul_precision",
                "jax_default_matmul_precision"),
    },
    framework_notes={
        "torch": "Default: full float32 (set_float32_matmul_precision('highest'), allow_tf32 False since 1.12). "
                 "'high' allows TF32; the variants set it per call and restore it. cuDNN convolutions keep TF32 "
                 "on by default (torch.backends.cudnn.allow_tf32): only matmul is off.",
        "cupy": "Default: full float32. CUPY_TF32=1 turns TF32 on, but CuPy reads it once, at the first float32 "
                "matmul of the process (cached per dtype): setting it later does nothing. The per-call switch is "
                "the private cupy._core.set_compute_type(numpy.float32, "
                "cupy._core._routines_linalg.COMPUTE_TYPE_TF32) (cuBLAS CUBLAS_COMPUTE_32F_FAST_TF32), which "
                "the variants set and restore. bf16 arrays need CuPy 14 with ml_dtypes.",
        "jax": "Default: precision=None, which lets XLA use TF32 for float32 dots on Ampere and later (the "
               "variant sets the config a fresh process reads, None unless JAX_DEFAULT_MATMUL_PRECISION is set, "
               "because the harness pins it to 'highest'). Per call: precision='highest' or a dot algorithm ('F32_F32_F32', "
               "'TF32_TF32_F32'); globally: jax.config.update('jax_default_matmul_precision', 'highest'). "
               "The CPU backend rejects 'TF32_TF32_F32'.",
    },
    metrics_doc={
        "err_max": "largest |C - C_float64| over the reference's root mean square (computed untimed by the harness)",
        "err_median": "median |C - C_float64| over the reference's root mean square (computed untimed by the harness)",
    },
)
