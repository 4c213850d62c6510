"""donation: reading a donated JAX array raises (the message a user sees), torch's in-place update is
read silently through the alias, the peak accounting is right where the CPU can check it, and JAX's
timed calls dispatch only the impl's programs."""
from __future__ import annotations

import numpy as np
import pytest

from harness.check.equivalence import compare_outputs
from harness.workers.execute import load_impl, skip_reason
from harness.measure.metrics import collecting
from harness.results.model import ProcessRow
from harness.workers.processes import _merge_row
from scenarios import get
from scenarios.donation import HEAD
from tests.conftest import backend_or_skip
from tests.dispatches import eager_programs, jax_programs

SCN = get("donation")
P = SCN.params_for_size("smoke") | {"seed": 7}
NBYTES = int(P["n"]) * 4


def _run(fw, variant, state=None):
    b = backend_or_skip(fw)
    impl = load_impl(SCN.name, fw)
    inputs = SCN.make_inputs(P)
    state = impl.prepare(inputs, P, b.device) if state is None else state
    impl.poison(state)
    with collecting() as metrics:
        out = getattr(impl, f"run_{variant}")(state)
    return b.to_numpy(out), dict(metrics), SCN.reference(inputs, P), state


def test_reading_a_donated_jax_array_raises():
    backend_or_skip("jax")
    impl = load_impl(SCN.name, "jax")
    _, _, _, state = _run("jax", "new_buffer")
    old = state["p"]
    new = impl.UPDATE_DONATED(old, state["g"], state["lr"])
    assert old.is_deleted() and not new.is_deleted()  # the CPU backend of jax 0.10 honours donation
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[65536\]") as e:
        np.asarray(old[:HEAD])
    print(f"what a user sees: {type(e.value).__name__}: {e.value}")
    with pytest.raises(ValueError, match="Buffer has been deleted or donated"):
        impl.UPDATE_NEW(old, state["g"], state["lr"])  # passed to a jitted function again
    got, metrics, want, _ = _run("jax", "read_after_update")
    assert metrics == {"read_raised": 1.0} and np.isnan(got["head"]).all()
    assert compare_outputs(SCN, P, {"p": got["p"]}, {"p": want["p"]}) is None  # the step itself ran


@pytest.mark.parametrize("fw", ["torch", "cupy"])
def test_torch_and_cupy_read_the_updated_values_through_the_alias_without_an_error(fw):
    got, metrics, want, _ = _run(fw, "read_after_update")
    assert metrics.get("read_raised") == 0.0
    np.testing.assert_array_equal(got["head"], got["p"][:HEAD])  # the new values, not the logged old ones
    assert compare_outputs(SCN, P, got, want, variant="read_after_update").key == "head"


@pytest.mark.parametrize("fw", ["torch", "cupy", "jax"])
def test_correct_variants_keep_the_old_head_and_step_once(fw):
    for variant in ("new_buffer", "in_place"):
        state = None
        for _ in range(2):  # poison() restores p: a second run steps from the same parameters
            got, _, want, state = _run(fw, variant, state)
            assert compare_outputs(SCN, P, got, want, variant=variant) is None, variant


def test_jax_peak_accounting_two_copies_without_donation_one_with():
    """XLA's account of the compiled steps, and on the CPU the runtime's evidence that the donated
    buffer was reused: the output has the donated input's address."""
    b = backend_or_skip("jax")
    _, new_m, _, _ = _run("jax", "new_buffer")
    _, in_m, _, state = _run("jax", "in_place")
    head = min(HEAD, int(P["n"])) * 4
    assert new_m["peak_bytes"] == NBYTES + head  # a second copy of the parameters, and the head
    assert in_m["peak_bytes"] == head  # the head only: the step wrote into the donated buffer
    impl = load_impl(SCN.name, "jax")
    impl.poison(state)
    before = state["p"].unsafe_buffer_pointer()
    out = impl.run_in_place(state)
    assert state["p"].is_deleted() and out["p"].unsafe_buffer_pointer() == before
    if b.on_gpu:  # measured by the allocator: what the step left allocated
        assert new_m["added_bytes"] >= NBYTES and in_m["added_bytes"] < NBYTES // 100


def test_torch_peak_accounting_is_cuda_only():
    b = backend_or_skip("torch")
    _, new_m, _, _ = _run("torch", "new_buffer")
    _, in_m, _, _ = _run("torch", "in_place")
    if not b.on_gpu:
        assert "peak_bytes" not in new_m and "peak_bytes" not in in_m  # no CPU allocator counter: no number
        verdict = SCN.claims[0].judge({"new_buffer": {"timing": {"metrics": new_m}}}, "torch", P)
        assert verdict.verdict == "inconclusive" and "no device allocator counter" in verdict.evidence
        pytest.skip("torch's allocator counters count CUDA memory only: checked on a GPU")
    assert new_m["peak_bytes"] >= NBYTES and in_m["peak_bytes"] < NBYTES // 100


def test_a_hazard_row_merged_from_processes_sums_its_wrong_runs():
    per = [{"status": "ok", "wall_s": 1.0, "check": {"checked": 20, "wrong": 20, "max_rel_err": None},
            "timing": {"samples": {"device_done": [1.0, 2.0]}, "metrics": {}, "checked_repeats": 20,
                       "wrong_repeats": 20, "worst": "", "stopped": "noise", "noise": 0.0, "first_call_s": 0.1}}
           for _ in range(2)]
    row = _merge_row([ProcessRow.from_dict(r) for r in per])
    assert row.check.checked == row.check.wrong == 40


@pytest.mark.parametrize("variant", [v.name for v in SCN.variants if not v.hazard])
def test_a_timed_jax_variant_dispatches_only_its_own_programs(variant):
    b = backend_or_skip("jax")
    impl = load_impl(SCN.name, "jax")
    assert not skip_reason(SCN, SCN.variant(variant), b, impl)
    state = impl.prepare(SCN.make_inputs(P), P, b.device)
    call = getattr(impl, f"run_{variant}")
    impl.poison(state)
    b.synchronize(call(state))
    impl.poison(state)
    with jax_programs() as ran:
        b.synchronize(call(state))
    assert len(ran) == 2 and not eager_programs(ran), ran  # the head's copy and the step


def test_same_time_asks_the_medians_to_be_within_five_percent_and_leaves_the_spread_to_the_noise_test():
    from tests.conftest import judge_claim, synthetic_row

    rows = [synthetic_row("new_buffer", 1.0e-3, iqr=0.5e-3, kernel=1.0e-3),
            synthetic_row("in_place", 1.4e-3, iqr=0.5e-3, kernel=1.4e-3)]
    assert judge_claim("donation", "same_time", rows, {}).verdict == "refuted"  # +40%, however spread
    rows = [synthetic_row("new_buffer", 1.0e-3, kernel=1.0e-3), synthetic_row("in_place", 1.03e-3, kernel=1.03e-3)]
    assert judge_claim("donation", "same_time", rows, {}).verdict == "confirmed"


def test_same_time_reads_the_kernel_clock():
    """JAX's in-place step dispatches two programs where torch launches one kernel: device-done counts that
    dispatch, the claim about the step's own time does not."""
    from tests.conftest import judge_claim, synthetic_row

    rows = [synthetic_row("new_buffer", 1.0e-3, kernel=0.70e-3), synthetic_row("in_place", 1.2e-3, kernel=0.71e-3)]
    assert judge_claim("donation", "same_time", rows, {}).verdict == "confirmed"


@pytest.mark.parametrize("variant", ["new_buffer", "in_place"])
def test_jax_reads_memory_statistics_in_its_first_call_alone(monkeypatch, variant):
    """memory_stats() is a host call: around a timed call it would be timed. The state's first call (untimed)
    reads it; later calls emit that figure and read nothing."""
    b = backend_or_skip("jax")
    impl = load_impl(SCN.name, "jax")
    state = impl.prepare(SCN.make_inputs(P), P, b.device)
    reads = []
    device = state["device"]
    monkeypatch.setitem(state, "device", type("Counted", (), {
        "memory_stats": lambda self: reads.append(1) or device.memory_stats()})())
    emitted = []
    for _ in range(3):
        impl.poison(state)
        with collecting() as got:
            b.synchronize(getattr(impl, f"run_{variant}")(state))
        emitted.append((len(reads), dict(got)))
    assert emitted[0][0] > 0 and emitted[1][0] == emitted[2][0] == emitted[0][0], emitted
    assert emitted[0][1] == emitted[1][1] == emitted[2][1] and "peak_bytes" in emitted[0][1]


@pytest.mark.parametrize("chunk", [1000, 1 << 20])
def test_the_reference_is_the_float64_step_bit_for_bit_over_chunks(monkeypatch, chunk):
    """The reference steps a chunk at a time (a 1 GiB step's float64 temporaries cost seconds): the same
    bytes as p - lr * g in float64, a ragged last chunk included, and the head from before the step."""
    import scenarios.donation as D

    monkeypatch.setattr(D, "CHUNK", chunk)
    p = {"n": 4567, "dtype": "float32", "seed": 3}
    inputs = D.make_inputs(p)
    got = D.reference(inputs, p)
    w = inputs["p"].astype(np.float64)
    want = w - float(inputs["lr"]) * inputs["g"].astype(np.float64)
    assert got["p"].dtype == np.float64 and np.array_equal(got["p"].view(np.uint64), want.view(np.uint64))
    assert np.array_equal(got["head"], w[:HEAD])
