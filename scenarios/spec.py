"""The scenario contract: what one concept of the host/device paradigm computes and measures.

A scenario is framework-free: it names its variants (the naive baseline first, then the concept,
then hazards), draws inputs with hypothesis, builds deterministic host inputs, and computes the
float64 numpy reference. The three framework implementations live in impls/<name>/.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

Params = dict[str, Any]
Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Variant:
    """One way of doing the scenario's work.

    ``hazard`` variants are *meant* to be wrong sometimes (a missing sync): they are excluded from
    equivalence and reported with how often their result was wrong. ``gpu_only`` variants need a CUDA
    device (streams, events, pinned memory) and are skipped, with that reason, on a CPU device. A tuple
    of framework names limits that to those frameworks, where one framework's idiom for the variant
    runs on the CPU and another's needs CUDA (JAX's loop inside jit vs a CUDA graph).
    ``tolerance``: the variant's own, where it computes at a lower precision on purpose (TF32, bf16
    operands) and the scenario's tolerance would fail it; None: the scenario's.
    ``fresh_process``: every call starts a new child process that does the work (a cold start): nothing
    warms between calls, so the harness makes no warm-up call, and no sync census (it would count the
    wait for the child and cost one more process).
    """

    name: str
    doc: str
    hazard: bool = False
    gpu_only: bool | tuple[str, ...] = False
    tolerance: "Tolerance | None" = None
    fresh_process: bool = False

    def needs_gpu(self, framework: str) -> bool:
        if isinstance(self.gpu_only, tuple):
            return framework in self.gpu_only
        return bool(self.gpu_only)


@dataclass(frozen=True)
class Tolerance:
    """Elementwise |out - ref| <= atol + rtol * |ref|, per dtype; (0, 0) means bit-exact."""

    by_dtype: Mapping[str, tuple[float, float]]

    def for_dtype(self, dtype: str) -> tuple[float, float]:
        if dtype in self.by_dtype:
            return self.by_dtype[dtype]
        if np.issubdtype(np.dtype(dtype), np.integer) or dtype == "bool":
            return (0.0, 0.0)
        raise KeyError(f"no tolerance for dtype {dtype!r}")


EXACT = Tolerance({})


@dataclass(frozen=True)
class Distribution:
    """An output compared by its distribution, not element by element: a random draw, whose values
    depend on the generator (numpy, torch's CPU and CUDA generators, cuRAND, JAX's threefry all
    differ) while its law must not.

    The output and the reference (a numpy draw from the intended law) are compared on at most
    ``sample`` evenly strided elements of each, by three scipy tests: Welch's t-test (means), the
    Brown-Forsythe test (``scipy.stats.levene`` about the median: spreads) and the two-sample
    Kolmogorov-Smirnov test (the whole law). Each runs at ``alpha / 3``, so a correct generator is
    rejected with probability at most ``alpha`` per comparison (Bonferroni). The tests are
    deterministic given the data, and the data are deterministic given the seed. Below ``min_size``
    elements they can tell nothing apart; only finiteness is checked there.
    """

    alpha: float = 1e-9
    sample: int = 1 << 16
    min_size: int = 32


@dataclass(frozen=True)
class Verdict:
    claim: str
    framework: str
    verdict: str  # "confirmed" | "refuted" | "inconclusive"
    evidence: str
    numbers: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """A statement (usually the article's) that the measurements confirm or refute.

    ``judge(rows_by_variant, framework, params)`` gets the framework's timing rows of this scenario
    keyed by variant (each a dict as written to the result file) and the timed params, and returns a
    Verdict. A KeyError (a variant it needs did not run) makes the verdict "inconclusive".

    ``communicates``: the claim is about data moving between ranks (bytes, overlap, a hazard that needs a
    second rank). At one rank nothing is communicated, so the harness answers "inconclusive" without asking
    the judge: a run that could not refute a claim must not confirm it.

    ``gpu_only``: the claim is about a GPU's own machinery (its clocks against the host's, its queues and
    streams, copies over the host link, its allocator and driver). On a CPU device the host is the device,
    so the harness answers "inconclusive" (not decidable on a CPU), with what the CPU's figures read in the
    evidence: a CPU neither confirms nor refutes it.

    ``reads_checks``: the claim is about the timed outputs' checks (how many runs were wrong), so its judge
    also gets the rows whose outputs were wrong (status "wrong"), which every other judge never sees: a
    figure timed on wrong outputs decides nothing, but a wrong output is what such a claim is there to see.
    """

    id: str
    text: str
    judge: Callable[[Mapping[str, dict], str, Params], Verdict]
    communicates: bool = False
    gpu_only: bool = False
    reads_checks: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    concept: str  # what the reader learns, in our words
    variants: tuple[Variant, ...]  # baseline first
    params: Callable[[], Any]  # () -> hypothesis strategy of Params (small, for equivalence)
    # "smoke" (CPU, CI) and "full" (GPU timing): one params dict, or a sweep (a sequence of them, each
    # with a short "label" such as "4 KiB"); every point of a sweep is timed and reported on its own.
    sizes: Mapping[str, Params | Sequence[Params]]
    make_inputs: Callable[[Params], Arrays]  # deterministic from params (seed inside)
    reference: Callable[[Arrays, Params], Arrays]  # float64 numpy
    tolerance: Tolerance
    claims: tuple[Claim, ...] = ()
    # (params, machine ceilings measured in the same run, variant) -> seconds, or None where no
    # floor applies. Ceilings: hbm_Bps, h2d_Bps, d2h_Bps, fp32_flops (CupyBackend.ceilings); a rank
    # scenario's own (rank_ceilings below).
    floor: Callable[[Params, Mapping[str, float], str], float | None] | None = None
    # False where the float64 reference is too costly at the full size: timed outputs are then
    # checked against the framework's own baseline variant and across frameworks instead.
    cheap_reference: Callable[[Params], bool] = lambda p: True
    key_apis: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    framework_notes: Mapping[str, str] = field(default_factory=dict)  # what differs, per framework
    # A default that differs between the frameworks (part 7): per framework, the one-line setting that
    # makes the three agree; the porting guide's "Defaults that differ" section is built from it.
    agree_by: Mapping[str, str] = field(default_factory=dict)
    metrics_doc: Mapping[str, str] = field(default_factory=dict)  # extra metrics the impls emit
    # One extra, untimed run per variant that records what ran when on which stream (harness/measure/timeline.py):
    # drawn as a PNG and written as a Chrome/Perfetto trace next to the result file.
    timeline: bool = False
    # (outputs, reference, params) -> numbers the harness computes, untimed, from a timed variant's first
    # checked outputs and the float64 reference (a GEMM's error against float64), reported beside the
    # metrics the impl emits. Only where the timed outputs were checked against the reference.
    output_metrics: Callable[[Arrays, Arrays, Params], Mapping[str, float]] | None = None
    # Output keys compared by distribution (random draws) instead of elementwise; see Distribution.
    distributions: Mapping[str, Distribution] = field(default_factory=dict)
    # Run by a group of WORLD_SIZE rank processes (harness/workers/ranks.py): params carry "world_size" (and
    # "rank" inside a rank), make_inputs gives the rank's inputs, reference its share of the global result.
    ranks: bool = False
    # A rank scenario whose floor only its ranks can measure (every rank takes part in a collective):
    # before its timing, the CuPy rank group measures each point's raw floor (Backend.rank_ceilings),
    # and the slowest rank's joins the run's machine ceilings that `floor` reads.
    rank_ceilings: bool = False
    # Back-to-back calls of a variant per timed sample (nccl-tests' -n): the harness makes them between one
    # poison and one sync, divides every clock by their count and checks the last call's outputs.
    calls: Callable[[Params], int] = lambda p: 1
    # At most this many hypothesis examples in a run's equivalence check, where every call starts fresh
    # processes (seconds each); a failing example is reported as drawn, not shrunk (each step would start
    # them again); the timed rows' outputs at the run's size are checked as everywhere.
    max_examples: int | None = None
    # A rank row's time per repeat from its ranks' times: "slowest" (a step ends when every rank is done)
    # or "mean" (nccl-tests' default -a 1), the slowest rank's kept beside it (harness/workers/ranks.py).
    rank_time: str = "slowest"
    # The params key that names a point's operation in a rank scenario's sweep (collectives' "op"), smallest
    # size first: at world size 1 only each operation's first point is timed (points()).
    operation: str | None = None
    # Devices one process must see (gpu_links copies between two): with fewer, its rows are skipped with
    # that reason; `list` says so.
    devices: int = 1
    # (params, output key) -> per element, the error a correct float32 run may add beyond `tolerance`, derived
    # from the params (zero: scenarios/_models/bound.py), or None. Asked only where an output is outside the flat
    # band, since it may cost a float64 run of its own; broadcast to the output's shape.
    error_bound: Callable[[Params, str], Any] | None = None
    # (params, framework) -> the device bytes one process (a rank) of that framework holds at that point, at
    # least: the buffers its impl keeps at once, before a call's own temporaries. compare and regress refuse a
    # memory cap below the largest of a run's points before they start (harness/run/runner.py), instead of
    # finding out minutes into the point. None: small enough for any cap.
    device_bytes: Callable[[Params, str], int] | None = None

    @property
    def baseline(self) -> Variant:
        return self.variants[0]

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"scenario {self.name!r} has no variant {name!r}")

    @property
    def checked_variants(self) -> tuple[Variant, ...]:
        return tuple(v for v in self.variants if not v.hazard)

    def points(self, size: str, world_size: int | None = None) -> list[Params]:
        """The params to time at a size preset: one, or each point of a sweep, in order. At world size 1 a rank
        scenario's sweep keeps the first point of each operation (params[operation]; the whole sweep is one
        operation where the scenario names none): one rank communicates nothing, so the sweep's larger sizes
        would only time the same calls' overhead again, a figure about nothing. The sweeps run at two ranks
        or more."""
        if size not in self.sizes:
            raise KeyError(f"scenario {self.name!r} has no size preset {size!r}")
        preset = self.sizes[size]
        points = [dict(preset)] if isinstance(preset, Mapping) else [dict(p) for p in preset]
        if self.ranks and world_size == 1:
            firsts: dict[Any, Params] = {}
            for p in points:
                firsts.setdefault(p.get(self.operation) if self.operation else None, p)
            points = list(firsts.values())
        return points

    def params_for_size(self, size: str) -> Params:
        """The largest (last) point of a size preset."""
        return self.points(size)[-1]


def human_bytes(x: float) -> str:
    """Bytes in binary units, three significant figures: 1 GiB, 256 MiB, 4.5 KiB (a claim's evidence, reports)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(x) >= size:
            return f"{float(f'{x / size:.3g}'):g} {unit}"
    return f"{x:.0f} B"


def nbytes_of(params: Params, *shape_keys: str, dtype_key: str = "dtype") -> int:
    """Bytes of one array whose shape is given by params[shape_keys] (a helper for floors)."""
    return math.prod(int(params[k]) for k in shape_keys) * np.dtype(params[dtype_key]).itemsize


def ratio_verdict(
    claim: str, framework: str, value: float, threshold: float, *, lower_is_confirmed: bool,
    what: str, numbers: Mapping[str, float],
) -> Verdict:
    """Confirmed when value is on the claimed side of threshold; the evidence names both."""
    if not math.isfinite(value):
        return Verdict(claim, framework, "inconclusive", f"{what}: not measured", dict(numbers))
    ok = value < threshold if lower_is_confirmed else value > threshold
    op = "<" if lower_is_confirmed else ">"
    word = "confirmed" if ok else "refuted"
    rel = op if ok else ("≥" if lower_is_confirmed else "≤")
    return Verdict(claim, framework, word, f"{what} = {value:.3g} {rel} {threshold:g}", dict(numbers))
