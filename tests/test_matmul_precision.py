"""matmul_precision: full float32 meets its float64 tolerance on the CPU, the tolerances tell TF32 from
float32, each variant escapes the harness's pinned precision and restores it, and JAX's timed calls
dispatch only the impl's programs."""
from __future__ import annotations

import numpy as np
import pytest

from harness.check.equivalence import compare_outputs
from harness.workers.execute import load_impl, skip_reason
from scenarios import get
from tests.conftest import backend_or_skip
from tests.dispatches import eager_programs, jax_programs

SCN = get("matmul_precision")
P = SCN.params_for_size("smoke") | {"seed": 5}


def _tf32(x: np.ndarray) -> np.ndarray:
    """x rounded to TF32 (10 explicit mantissa bits, to nearest even), kept in float32."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + (1 << 12) - 1 + ((u >> 13) & 1)) >> 13) << 13
    return u.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("fw", ["torch", "cupy", "jax"])
def test_matched_fp32_agrees_with_float64_within_its_tolerance(fw):
    b = backend_or_skip(fw)
    impl = load_impl(SCN.name, fw)
    inputs = SCN.make_inputs(P)
    want = SCN.reference(inputs, P)
    got = b.to_numpy(impl.run_matched_fp32(impl.prepare(inputs, P, b.device)))
    assert compare_outputs(SCN, P, got, want, variant="matched_fp32") is None
    rtol, atol = SCN.tolerance.for_dtype("float32")
    assert SCN.output_metrics(got, want, P)["err_max"] < atol  # the output is at unit scale (make_inputs)


def test_the_float32_tolerance_rejects_tf32_and_the_tf32_tolerance_accepts_it():
    """TF32 rounding that crept into a 'float32' GEMM fails it; the TF32 variants allow it, no more."""
    inputs = SCN.make_inputs(P)
    want = SCN.reference(inputs, P)
    tf32 = {"c": _tf32(inputs["a"]).astype(np.float64) @ _tf32(inputs["b"]).astype(np.float64)}
    assert compare_outputs(SCN, P, tf32, want, variant="matched_fp32") is not None
    assert compare_outputs(SCN, P, tf32, want, variant="matched_tf32") is None
    assert compare_outputs(SCN, P, tf32, want, variant="framework_default") is None
    e = SCN.output_metrics(tf32, want, P)
    assert 1e-5 < e["err_median"] < 1e-3, e  # TF32's class, between float32's (~1e-7) and bf16's (~2e-3)
    wrong = {"c": inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)[::-1]}
    assert compare_outputs(SCN, P, wrong, want, variant="bf16") is not None  # the loosest still catches a wrong product


def test_tf32_needs_a_gpu_and_says_why_on_the_cpu():
    for fw in ("torch", "jax"):
        b = backend_or_skip(fw)
        why = skip_reason(SCN, SCN.variant("matched_tf32"), b, load_impl(SCN.name, fw))
        assert (why is None) == b.on_gpu and (b.on_gpu or "needs a CUDA device" in why)


def test_torch_variants_set_their_precision_for_the_call_and_restore_the_harness_pin():
    torch = pytest.importorskip("torch")
    backend_or_skip("torch")
    impl = load_impl(SCN.name, "torch")
    seen = []
    mm = torch.Tensor.__matmul__
    torch.Tensor.__matmul__ = lambda a, b: seen.append(torch.get_float32_matmul_precision()) or mm(a, b)
    try:
        state = impl.prepare(SCN.make_inputs(P), P, torch.device("cpu"))
        for v in ("framework_default", "matched_fp32", "matched_tf32", "bf16"):
            getattr(impl, f"run_{v}")(state)
            assert torch.get_float32_matmul_precision() == "highest", v  # the harness's pin is back
    finally:
        torch.Tensor.__matmul__ = mm
    assert seen == ["highest", "highest", "high", "highest"]  # torch's default is full float32


def test_jax_default_escapes_the_harness_pin_and_is_compiled_apart():
    """The harness pins jax_default_matmul_precision='highest'; the default variant must trace under
    JAX's own default (DEFAULT precision), and full float32 under HIGHEST: two programs."""
    b = backend_or_skip("jax")
    import jax

    impl = load_impl(SCN.name, "jax")
    state = impl.prepare(SCN.make_inputs(P), P, b.device)
    texts = {}
    default = state["default"]  # read by a fresh, unpinned interpreter: JAX's own, None
    assert default is None
    for level in (default, impl.FP32):
        with impl.precision(level):
            texts[level] = impl.GEMM.lower(state["a"], state["b"]).as_text()
    assert "HIGHEST" not in texts[default] and "DEFAULT" in texts[default]
    assert "HIGHEST" in texts[impl.FP32]
    assert jax.config.jax_default_matmul_precision == "highest"  # restored
    if not b.on_gpu:
        with pytest.raises(ValueError, match="TF32_TF32_F32"), impl.precision(impl.TF32):
            impl.GEMM(state["a"], state["b"])  # the CPU has no TF32: why the variant is gpu_only


@pytest.mark.parametrize("variant", [v.name for v in SCN.variants])
def test_a_timed_jax_variant_dispatches_only_its_own_programs(variant):
    b = backend_or_skip("jax")
    impl = load_impl(SCN.name, "jax")
    if skip_reason(SCN, SCN.variant(variant), b, impl):
        pytest.skip(skip_reason(SCN, SCN.variant(variant), b, impl))
    state = impl.prepare(SCN.make_inputs(P), P, b.device)
    call = getattr(impl, f"run_{variant}")
    b.synchronize(call(state))
    with jax_programs() as ran:
        b.synchronize(call(state))
    assert ran and not eager_programs(ran), ran


def test_the_tf32_speedup_is_the_medians_ratio_which_the_noise_test_redraws():
    from tests.conftest import judge_claim

    def timed(variant, median, q1, q3):
        return {"variant": variant, "timing": {"kernel": {"median": median, "q1": q1, "q3": q3}}}

    rows = [timed("matched_fp32", 2.5e-3, 2.0e-3, 3.0e-3), timed("matched_tf32", 1.0e-3, 0.9e-3, 1.1e-3)]
    v = judge_claim("matmul_precision", "tf32_speedup", rows, {"m": 8, "k": 8, "n": 8, "dtype": "float32"})
    assert v.verdict == "confirmed" and v.numbers["ratio"] == pytest.approx(2.5), v  # q1 / q3 would read 1.8


def test_the_speedup_reads_the_kernel_clock_not_device_done():
    """device-done counts a call's dispatch (JAX's 0.1-0.2 ms beside a 0.4 ms TF32 GEMM): the claim about the
    GEMM's speed reads the device's own time, and without a kernel clock it is not judged at all."""
    from tests.conftest import judge_claim

    def timed(variant, done, kernel):
        return {"variant": variant, "timing": {"device_done": {"median": done, "q1": done, "q3": done},
                                               **({"kernel": {"median": kernel, "q1": kernel, "q3": kernel}}
                                                  if kernel else {})}}

    p = {"m": 8, "k": 8, "n": 8, "dtype": "float32"}
    rows = [timed("matched_fp32", 2.9e-3, 2.7e-3), timed("matched_tf32", 0.56e-3, 0.40e-3)]
    v = judge_claim("matmul_precision", "tf32_speedup", rows, p)
    assert v.numbers["ratio"] == pytest.approx(2.7e-3 / 0.40e-3), v
    from harness.check.judging import judge_with_noise

    claim = next(c for c in SCN.claims if c.id == "tf32_speedup")
    rows = {r["variant"]: r for r in (timed("matched_fp32", 2.9e-3, None), timed("matched_tf32", 0.56e-3, None))}
    v = judge_with_noise(claim, rows, "torch", p, variants=frozenset(v.name for v in SCN.variants))
    assert v["verdict"] == "inconclusive" and "kernel" in v["evidence"], v


def _read_fresh(fw):
    from impls.matmul_precision import defaults

    defaults._READ.pop(fw, None)  # read again, in a new child, under this test's environment
    try:
        return defaults.read(fw)
    finally:
        defaults._READ.pop(fw, None)


@pytest.mark.parametrize("fw, var, planted, want", [
    ("torch", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1", "high"),
    ("jax", "JAX_DEFAULT_MATMUL_PRECISION", "highest", "highest"),
])
def test_the_default_is_read_in_a_fresh_child_without_the_harness_pins(monkeypatch, fw, var, planted, want):
    """A user's own setting is the default that user gets: the child sees it. The same setting pinned by the
    harness (harness/backends/pins.py) is not a default: the child reads the framework's own."""
    pytest.importorskip(fw)
    from harness.backends import pins

    monkeypatch.delenv(pins.RECORD, raising=False)
    monkeypatch.delenv(var, raising=False)
    own = _read_fresh(fw)
    assert own == {"torch": "highest", "jax": None}[fw]
    monkeypatch.setenv(var, planted)  # the user's pin
    assert _read_fresh(fw) == want
    monkeypatch.delenv(var)
    pins.pin(var, planted)  # the harness's pin, set in this process and inherited by its children
    assert _read_fresh(fw) == own


def test_a_planted_pin_makes_the_default_variant_run_tf32_and_refutes_the_default_claim(monkeypatch):
    """The chain a user's TF32 setting takes: the child reads it, framework_default runs under it, and the
    claim 'torch defaults to full float32' is refuted by the errors that setting gives on a GPU."""
    torch = pytest.importorskip("torch")
    backend_or_skip("torch")
    from tests.conftest import judge_claim

    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    from impls.matmul_precision import defaults

    monkeypatch.setattr(defaults, "_READ", {})
    impl = load_impl(SCN.name, "torch")
    seen = []
    mm = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: seen.append(torch.get_float32_matmul_precision())
                        or mm(a, b))
    impl.run_framework_default(impl.prepare(SCN.make_inputs(P), P, torch.device("cpu")))
    assert seen == ["high"]
    err = {"highest": 2e-7, "high": 2e-4}  # a GPU's median errors at each setting (TF32 on "high")

    def row(variant, setting):
        return {"variant": variant, "timing": {"metrics": {"err_median": err[setting]}}}

    rows = [row("framework_default", seen[0]), row("matched_fp32", "highest"), row("matched_tf32", "high")]
    v = judge_claim("matmul_precision", "default_precision", rows, P, fw="torch")
    assert v.verdict == "refuted", v
    rows[0] = row("framework_default", "highest")
    assert judge_claim("matmul_precision", "default_precision", rows, P, fw="torch").verdict == "confirmed"
