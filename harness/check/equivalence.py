"""Are the three frameworks computing the same thing? Dtype-aware comparison and hypothesis checks.

Every non-hazard variant of every framework is compared with the float64 reference, elementwise:
|got - ref| <= atol + rtol * |ref|, with the scenario's tolerance for the dtype (0, 0 = bit-exact).
Frameworks are then compared pairwise, each pair allowed twice the tolerance (both may sit at the
edge of the reference's band, on opposite sides). Outputs a scenario declares random
(Scenario.distributions) are compared by distribution instead: moments and a two-sample test
against the reference draw, at a stated false-alarm rate. A failure names
scenario/framework/variant, the worst element (or the failed tests), the tolerance, and how to
reproduce it.
"""
from __future__ import annotations

import json
import math
import warnings
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed as hyp_seed, settings

from scenarios.spec import Arrays, Distribution, Params, Scenario


class EquivalenceFailure(AssertionError):
    pass


@dataclass(frozen=True)
class Mismatch:
    key: str
    problem: str  # "values" | "shape" | "missing" | "distribution"
    index: tuple[int, ...] = ()
    got: float = math.nan
    want: float = math.nan
    abs_err: float = math.nan
    allowed: float = math.nan
    n_bad: int = 0
    size: int = 0
    rtol: float = 0.0
    atol: float = 0.0
    detail: str = ""

    def describe(self) -> str:
        if self.problem == "missing":
            return f"output {self.key!r} is missing"
        if self.problem in ("shape", "distribution"):
            return f"output {self.key!r}: {self.detail}"
        tol = "bit-exact" if self.rtol == self.atol == 0 else f"rtol={self.rtol:g} atol={self.atol:g}"
        return (
            f"output {self.key!r}{list(self.index)}: got {self.got!r}, want {self.want!r} "
            f"(|err|={self.abs_err:.3g} > allowed {self.allowed:.3g}, {tol}); "
            f"{self.n_bad} of {self.size} elements outside"
        )


def tolerance_for(scenario: Scenario, params: Params, want: np.ndarray, variant: str | None = None) -> tuple[float, float]:
    """(rtol, atol) for an output: the variant's own tolerance where it has one (TF32, bf16), else the scenario's."""
    if want.dtype.kind in "iub":
        return (0.0, 0.0)
    own = scenario.variant(variant).tolerance if variant is not None else None
    return (own or scenario.tolerance).for_dtype(str(params.get("dtype", "float32")))


CHUNK = 1 << 16  # elements a pass takes at a time: its float64 temporaries (512 KiB each) stay in the CPU's cache


def compare_arrays(key: str, got: Any, want: np.ndarray, rtol: float, atol: float, widen: float = 1.0,
                   scale: np.ndarray | None = None, chunk: int = CHUNK, extra: np.ndarray | None = None,
                   errors: list[float] | None = None) -> Mismatch | None:
    """None when got matches want; else the worst element. ``scale`` sets |ref| in the band; ``extra`` (per
    element, broadcast to want) widens it where the scenario derived a bound (Scenario.error_bound).
    ``errors``, where given, gets the output's relative_error appended, from the same pass (a second float64
    pass over a 1 GiB output cost about as much as the comparison). Works through the outputs in cache-sized
    chunks: whole-array float64 temporaries, most of their cost in fresh pages, were most of a large output's
    check and of its row's loop (docs/design/untimed_costs.md)."""
    g = np.asarray(got)
    w = np.asarray(want)
    if g.shape != w.shape:
        if errors is not None:
            errors.append(math.inf)
        return Mismatch(key, "shape", detail=f"shape {g.shape} where {w.shape} was expected")
    exact = rtol == atol == 0
    if not exact and g.dtype == w.dtype and np.array_equal(g, w):
        # Against the framework's own baseline (no reference at the size) a variant's outputs are often the
        # same bits: one comparison. NaN never equals: it takes the path below.
        if errors is not None:
            errors.append(0.0)
        return None
    gf, wf = g.reshape(-1), w.reshape(-1)
    sf = None if scale is None else np.broadcast_to(np.asarray(scale), w.shape).reshape(-1)
    xf = None if extra is None else np.broadcast_to(np.asarray(extra, dtype=np.float64), w.shape).reshape(-1)
    floats = g.dtype.kind in "fc" and w.dtype.kind in "fc"
    n_bad, worst, flat, allowed_at = 0, -np.inf, -1, 0.0
    floor, rel = None, 0.0  # relative_error's, where errors asks for it
    for i in range(0, wf.size, chunk):
        gc, wc = gf[i:i + chunk], wf[i:i + chunk]
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, inf * 0: NaN, judged below
            if exact:  # equal values (and matching NaN positions) only, no float64 copy of the chunk
                bad = gc != wc
                if not bad.any():
                    continue  # every element equal: relative error 0
                if floats:
                    bad &= ~(np.isnan(gc) & np.isnan(wc))
                # the worst bad element: the largest |difference| (NaN against a number counts as infinite)
                g64, w64 = gc.astype(np.float64), wc.astype(np.float64)
                score = np.abs(g64 - w64)
                if errors is not None:
                    floor = _floor(wf) if floor is None else floor
                    rel = max(rel, _worst_ratio(g64, w64, score, np.abs(w64), floor))
            else:
                g64, w64 = gc.astype(np.float64), wc.astype(np.float64)
                size = np.abs(w64)
                # widen * (atol + rtol * |ref| [+ extra]), rounded as the whole-array pass rounded it
                allowed = (size if sf is None else np.abs(sf[i:i + chunk].astype(np.float64))) * rtol
                allowed += atol
                if xf is not None:
                    allowed += xf[i:i + chunk]
                allowed *= widen
                score = np.abs(g64 - w64)
                if errors is not None:
                    floor = _floor(wf) if floor is None else floor
                    rel = max(rel, _worst_ratio(g64, w64, score, size, floor))
                bad = ~((score <= allowed) | (g64 == w64))  # equal values pass (inf too); NaN never
                score -= allowed  # how far beyond its band
        k = int(np.count_nonzero(bad))
        if k == 0:
            continue
        n_bad += k
        excess = np.where(bad, np.nan_to_num(score, nan=np.inf, posinf=np.inf), -np.inf)
        j = int(np.argmax(excess))
        if excess[j] > worst or flat < 0:  # the first of equals, as one argmax over the whole output
            worst, flat, allowed_at = excess[j], i + j, 0.0 if exact else float(allowed[j])
    if errors is not None:
        errors.append(rel)
    if n_bad == 0:
        return None
    idx = tuple(int(i) for i in np.unravel_index(flat, w.shape)) if w.ndim else ()
    gv, wv = gf[flat], wf[flat]
    return Mismatch(
        key, "values", idx, got=float(gv), want=float(wv),
        abs_err=float(abs(np.float64(gv) - np.float64(wv))), allowed=allowed_at,
        n_bad=n_bad, size=int(w.size), rtol=rtol * widen, atol=atol * widen,
    )


def relative_error(got: Arrays, want: Arrays, chunk: int = CHUNK) -> float:
    """The worst elementwise |got - want| / |want| over all outputs: the numbers a regression run
    compares. |want| is floored at 1e-6 of the output's largest |want|, so that elements near zero
    (where any rounding is a large relative error) do not dominate. inf where shapes differ or an
    output is missing; NaN in got counts as inf. Works through full-size outputs in cache-sized chunks;
    a chunk equal to its reference costs one comparison (bit-exact outputs of hundreds of MiB are
    checked in every row)."""
    worst = 0.0
    for key, w in want.items():
        if key not in got or np.shape(got[key]) != np.shape(w):
            return math.inf
        wf, gf = np.asarray(w).reshape(-1), np.asarray(got[key]).reshape(-1)
        floor = None  # 1e-6 of max |want|, computed once a chunk differs
        for i in range(0, wf.size, chunk):
            wc, gc = wf[i:i + chunk], gf[i:i + chunk]
            # NaN never equals: a chunk holding one takes the full path. Its ends first: a float32 output against
            # a float64 reference seldom equals it, and array_equal across dtypes casts the whole chunk
            if gc[0] == wc[0] and gc[-1] == wc[-1] and np.array_equal(gc, wc):
                continue
            floor = _floor(wf) if floor is None else floor
            w64, g64 = np.asarray(wc, np.float64), np.asarray(gc, np.float64)  # no copy of a float64 chunk
            with np.errstate(invalid="ignore", over="ignore"):
                worst = max(worst, _worst_ratio(g64, w64, np.abs(g64 - w64), np.abs(w64), floor))
    return worst


def _floor(wf: np.ndarray) -> float:
    """relative_error's floor of |want|: 1e-6 of the output's largest |want| (two reductions, no temporaries);
    0 where want holds NaN or inf."""
    amax = max(abs(float(wf.max())), abs(float(wf.min())))
    return 1e-6 * amax if math.isfinite(amax) else 0.0


def _worst_ratio(g64: np.ndarray, w64: np.ndarray, diff: np.ndarray, size: np.ndarray, floor: float) -> float:
    """A chunk's largest diff / max(size, floor) (diff = |g - w|, size = |w|; size is overwritten): NaN and inf
    count as inf, but equal elements (inf, NaN in both) as 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.maximum(size, floor, out=size)
        rel = np.divide(diff, size, out=size)
        top = float(rel.max())
        if not math.isfinite(top):  # NaN or inf somewhere: equal elements (inf, NaN in both) are 0
            rel[(g64 == w64) | (np.isnan(g64) & np.isnan(w64))] = 0.0
            top = float(np.nan_to_num(rel, nan=np.inf).max())
    return top


def strided_sample(a: Any, k: int) -> np.ndarray:
    """At most k evenly strided elements of a, flattened (a copy)."""
    flat = np.asarray(a).reshape(-1)
    step = max(1, flat.size // k)
    return flat[::step][:k].copy()


def compare_distribution(key: str, got: Any, want: np.ndarray, dist: Distribution) -> Mismatch | None:
    """None when got could be a draw from the law want was drawn from; else which tests rejected it.

    See scenarios.spec.Distribution: Welch's t (means), Brown-Forsythe (spreads) and two-sample
    Kolmogorov-Smirnov (laws), each at alpha/3, on at most dist.sample strided elements of each.
    """
    from scipy import stats  # heavy (~0.3 s): only a distribution check needs it

    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return Mismatch(key, "shape", detail=f"shape {g.shape} where {w.shape} was expected")
    gs = strided_sample(g, dist.sample).astype(np.float64)
    ws = strided_sample(w, dist.sample).astype(np.float64)
    bad = ~np.isfinite(gs)
    if bad.any():
        first = int(np.argmax(bad))
        return Mismatch(key, "distribution", size=int(g.size), detail=(
            f"{int(bad.sum())} non-finite values among {gs.size} sampled (first: {float(gs[first])!r})"))
    if gs.size < dist.min_size:
        return None
    level = dist.alpha / 3
    with warnings.catch_warnings():  # a constant draw makes scipy warn (and fail the test): say it once, below
        warnings.simplefilter("ignore", RuntimeWarning)
        p = {
            "Welch t (means)": stats.ttest_ind(gs, ws, equal_var=False).pvalue,
            "Brown-Forsythe (spreads)": stats.levene(gs, ws, center="median").pvalue,
            "Kolmogorov-Smirnov (laws)": stats.ks_2samp(gs, ws).pvalue,
        }
    failed = [f"{name} p={pv:.2g}" for name, pv in p.items() if not pv >= level]  # a NaN p fails too
    if not failed:
        return None
    return Mismatch(key, "distribution", size=int(g.size), detail=(
        f"not the reference's distribution: {', '.join(failed)} < alpha/3={level:.2g}; "
        f"got mean {gs.mean():.4g} std {gs.std():.4g}, want mean {ws.mean():.4g} std {ws.std():.4g} "
        f"({gs.size} sampled elements each; false-alarm rate <= {dist.alpha:g})"))


def compare_key(scenario: Scenario, params: Params, key: str, got: Any, want: Any, widen: float = 1.0,
                scale: np.ndarray | None = None, variant: str | None = None,
                errors: list[float] | None = None) -> Mismatch | None:
    """One output: by distribution where the scenario declares it random, else elementwise (at the
    variant's tolerance where it has its own). errors: as compare_arrays'."""
    w = np.asarray(want)
    dist = scenario.distributions.get(key)
    if dist is not None:
        if errors is not None:
            errors.append(relative_error({key: got}, {key: w}))
        return compare_distribution(key, got, w, dist)
    rtol, atol = tolerance_for(scenario, params, w, variant)
    m = compare_arrays(key, got, w, rtol, atol, widen, scale, errors=errors)
    if m is None or m.problem != "values" or scenario.error_bound is None or (rtol, atol) == (0.0, 0.0):
        return m
    # outside the flat band: the scenario's derived bound, computed only now (a float64 run of its own)
    extra = scenario.error_bound(params, key)
    try:
        fits = extra is not None and np.broadcast_shapes(np.shape(extra), w.shape) == w.shape
    except ValueError:  # a sample of the output (a cross-framework check), not the output
        fits = False
    return compare_arrays(key, got, w, rtol, atol, widen, scale, extra=extra) if fits else m


def bit_exact(scenario: Scenario, params: Params, want: Arrays, variant: str | None = None) -> bool:
    """Is every output compared bit for bit (no tolerance, no distribution)? Outputs that pass such a
    comparison equal ``want`` element for element, so nothing more need be computed from them."""
    return all(key not in scenario.distributions and tolerance_for(scenario, params, np.asarray(w), variant) == (0, 0)
               for key, w in want.items())


def compare_outputs(scenario: Scenario, params: Params, got: Arrays, want: Arrays, widen: float = 1.0,
                    scale: Arrays | None = None, variant: str | None = None,
                    errors: list[float] | None = None) -> Mismatch | None:
    """The first output of want that got misses or gets wrong, or None. errors, where given, gets each output's
    relative_error from the same pass, up to the first wrong one (max of them: relative_error(got, want) where
    all are right)."""
    for key, w in want.items():
        if key not in got:
            return Mismatch(key, "missing")
        m = compare_key(scenario, params, key, got[key], w, widen, None if scale is None else scale.get(key), variant,
                        errors)
        if m is not None:
            return m
    return None


def reproduce_hint(scenario: str, params: Params, frameworks: list[str] | None = None) -> str:
    fw = f" --frameworks {','.join(frameworks)}" if frameworks else ""
    return f"python -m harness check {scenario}{fw} --params '{json.dumps(params, sort_keys=True)}'"


def check_example(scenario: Scenario, params: Params, reference: Arrays,
                  outputs: Mapping[tuple[str, str], Arrays]) -> None:
    """Raise EquivalenceFailure on the first (framework, variant) that misses the reference, or the
    first pair of frameworks that disagree on a variant. Frameworks are compared on the reference's
    outputs only: an impl may hand back more for the harness to wait on (JAX's barrier: its psum)."""
    for (fw, variant), got in outputs.items():
        m = compare_outputs(scenario, params, got, reference, variant=variant)
        if m is not None:
            raise EquivalenceFailure(
                f"{scenario.name}/{fw}/{variant} differs from the float64 reference: {m.describe()}\n"
                f"  params: {json.dumps(params, sort_keys=True)}\n"
                f"  reproduce: {reproduce_hint(scenario.name, params, [fw])}"
            )
    keys = list(outputs)
    for i, (fa, va) in enumerate(keys):
        for fb, vb in keys[i + 1:]:
            if va != vb or fa == fb:
                continue
            want = {k: v for k, v in outputs[(fb, vb)].items() if k in reference}
            m = compare_outputs(scenario, params, outputs[(fa, va)], want, widen=2.0, scale=reference, variant=va)
            if m is not None:
                raise EquivalenceFailure(
                    f"{scenario.name}/{va}: {fa} and {fb} disagree: {m.describe()}\n"
                    f"  params: {json.dumps(params, sort_keys=True)}\n"
                    f"  reproduce: {reproduce_hint(scenario.name, params, [fa, fb])}"
                )


def hypothesis_settings(max_examples: int, shrink: bool = True) -> Any:
    """Settings for the CLI's equivalence run: no example database (runs stay independent of one
    another and of the machine's disk), no deadline (the first call compiles), the blob printed.
    shrink=False reports the first failing example as drawn: where every example starts fresh
    processes, each step of shrinking would start them again (minutes, for a simpler example)."""
    phases = tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate)
    return settings(max_examples=max_examples, deadline=None, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck), phases=phases)


def register_profiles() -> None:
    """For pytest: quick (CPU CI: few examples) and thorough (the GPU: more examples)."""
    common = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.data_too_large])
    settings.register_profile("quick", max_examples=6, **common)
    settings.register_profile("thorough", max_examples=40, **common)
    settings.register_profile("stress", max_examples=400, **common)


@dataclass
class EquivalenceResult:
    status: str  # "passed" | "failed" | "skipped"
    examples: int
    frameworks: list[str]
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "examples": self.examples, "frameworks": self.frameworks,
                "message": self.message}


def run_equivalence(
    scenario: Scenario,
    execute: Callable[[str, Params], dict[str, Arrays]],
    frameworks: list[str],
    max_examples: int,
    seed: int | None = None,
    concurrent: bool = False,
) -> EquivalenceResult:
    """Draw params with hypothesis; for each, run every framework's checked variants (``execute``
    returns {variant: outputs}) and compare with the reference and pairwise. concurrent: the frameworks'
    execute calls of an example run side by side, while this process makes the reference (each framework's
    worker a process of its own: nothing here is timed, and taking turns was a large untimed part of a default
    run); every call of an example has ended before the example's verdict or error, so that a worker is never
    asked twice at once. The first failure in framework order is the example's."""

    if not frameworks:
        return EquivalenceResult("skipped", 0, [], "no framework available")
    count = 0
    pool = ThreadPoolExecutor(len(frameworks), thread_name_prefix="equivalence") if concurrent else None

    def outputs_of(params: Params) -> tuple[Arrays, dict[tuple[str, str], Arrays]]:
        if pool is None:
            inputs = scenario.make_inputs(params)
            reference = scenario.reference(inputs, params)
            return reference, {(fw, v): got for fw in frameworks for v, got in execute(fw, params).items()}
        calls = [pool.submit(execute, fw, params) for fw in frameworks]
        try:
            inputs = scenario.make_inputs(params)
            reference = scenario.reference(inputs, params)
        except Exception:
            wait(calls)  # no worker is left answering while the next example asks it again
            raise  # a stop (BaseException) does not wait: the runner kills the busy workers
        wait(calls)
        return reference, {(fw, v): got for fw, call in zip(frameworks, calls) for v, got in call.result().items()}

    @hypothesis_settings(max_examples, shrink=scenario.max_examples is None)
    @given(params=scenario.params())
    def prop(params: Params) -> None:
        nonlocal count
        count += 1
        reference, outputs = outputs_of(params)
        check_example(scenario, params, reference, outputs)

    if seed is not None:
        prop = hyp_seed(seed)(prop)
    try:
        prop()
    except Exception as e:  # noqa: BLE001 - an impl that raises fails equivalence too, with its message
        notes = "\n".join(getattr(e, "__notes__", []))
        head = str(e) if isinstance(e, EquivalenceFailure) else f"{scenario.name}: {type(e).__name__}: {e}"
        return EquivalenceResult("failed", count, frameworks, f"{head}\n{notes}".strip())
    finally:
        if pool is not None:
            pool.shutdown(wait=False)  # a stop that left a call running: the runner's closing of the workers ends it
    return EquivalenceResult("passed", count, frameworks)
