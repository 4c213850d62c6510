"""The result document as typed records: a Result, its Environment (its Cpus) and each framework's FrameworkEnv, each
ScenarioResult with its VariantInfo, Equivalence, ClaimResult, CrossCheck, Phase and Timelines records, a Row, its
Check, Profile and Timing, the Timing's Stats per clock and its list of Process entries, the run's NotRun and
HostLoop entries (harness/results/schema/result.schema.json); and what a worker process sends before the
merge: a ProcessRow, whose ProcessTiming is that process's alone.

Each record reads and writes itself (from_dict / to_dict) and keeps what it does not model: a key it
has no field for stays in `extra`, and a record read from a file writes its keys back in the order it
read them, with the nulls it had, so that to_dict(from_dict(d)) == d for every result ever written
(tests/test_model.py checks every committed one). Why: one definition of what a result holds, which the
worker builds, the runner merges and the loader reads, instead of string keys spelled in each of them.
Samples, metrics, a point's params, a claim's numbers and a backend's own facts stay plain mappings: their
keys are data (clock names, metric names, parameter names), not fields.

Writing a record a run built: a field that is None is left out, except a field without a default
(such as the seed or the GPU, written as null) and a field `_WITH` ties to another (a row's host_syncs
is written, null or not, wherever its sync_method is: the census ran); fields in the order declared, a
subclass's among its base's where `_after` places them. A record read from a file writes its own keys,
then any field set since.
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

Json = dict[str, Any]


def _extra() -> Any:
    return field(default_factory=dict, repr=False)


def _keys() -> Any:
    return field(default=None, repr=False, compare=False)


@dataclass(eq=False, kw_only=True)
class _Record:
    """from_dict / to_dict by the dataclass's fields; `_NESTED` names the fields that hold records. Every record
    keeps the keys it does not know (extra) and, when read from a file, that file's keys in their order (_keys)."""

    _NESTED: ClassVar[dict[str, tuple[str, type]]] = {}  # field: ("one" | "list" | "map", record class)
    _WITH: ClassVar[dict[str, str]] = {}  # field written whenever the named field is not None
    _FIELDS: ClassVar[tuple[str, ...]]
    _ALWAYS: ClassVar[frozenset[str]]
    extra: Json = _extra()
    _keys: tuple[str, ...] | None = _keys()

    @classmethod
    def _layout(cls) -> None:
        """_FIELDS in the order a record a run built writes them: as declared, but a subclass's field placed
        among its base's (_after) goes there, and the fields declared after it follow it."""
        fs = [f for f in fields(cls) if f.name not in ("extra", "_keys")]  # type: ignore[arg-type]
        names: list[str] = []
        at: int | None = None  # where the next field goes; None: at the end
        for f in fs:
            if "after" in f.metadata:
                at = names.index(f.metadata["after"]) + 1
            names.insert(len(names) if at is None else at, f.name)
            at = None if at is None else at + 1
        cls._FIELDS = tuple(names)
        cls._ALWAYS = frozenset(f.name for f in fs if f.default is MISSING and f.default_factory is MISSING)

    @classmethod
    def from_dict(cls, d: Json) -> Any:
        kw: dict[str, Any] = {}
        extra: Json = {}
        known = cls._FIELDS
        nested = cls._NESTED
        for k, v in d.items():
            if k in nested and v is not None:
                how, rec = nested[k]
                if how == "one" and isinstance(v, dict):
                    v = rec.from_dict(v)
                elif how == "list" and isinstance(v, list):
                    v = [rec.from_dict(x) if isinstance(x, dict) else x for x in v]
                elif how == "map" and isinstance(v, dict):
                    v = {n: rec.from_dict(x) if isinstance(x, dict) else x for n, x in v.items()}
            if k in known:
                kw[k] = v
            else:
                extra[k] = v
        for k in cls._ALWAYS:
            kw.setdefault(k, None)
        return cls(**kw, extra=extra, _keys=tuple(d))  # type: ignore[call-arg]

    def to_dict(self) -> Json:
        """The record as the result file has it (plain JSON types; nested records as dicts)."""
        out: Json = {}
        nested = self._NESTED
        get = self.__getattribute__
        extra = self.extra
        keys = self._keys
        if keys is not None:  # read from a file: its keys, its order, its nulls
            for k in keys:
                if k in extra:
                    out[k] = extra[k]
                else:
                    v = get(k)
                    out[k] = _plain(v, nested[k][0]) if k in nested and v is not None else v
        for k in self._FIELDS:
            if keys is not None and k in keys:
                continue
            v = get(k)
            if v is None and (keys is not None or k not in self._ALWAYS) and not (
                    k in self._WITH and get(self._WITH[k]) is not None):
                continue
            out[k] = _plain(v, nested[k][0]) if k in nested and v is not None else v
        for k, v in extra.items():
            if k not in out:
                out[k] = v
        return out


def _plain(v: Any, how: str) -> Any:
    if how == "one":
        return v.to_dict() if isinstance(v, _Record) else v
    if how == "list":
        return [x.to_dict() if isinstance(x, _Record) else x for x in v]
    return {n: x.to_dict() if isinstance(x, _Record) else x for n, x in v.items()}


def _after(name: str, **kw: Any) -> Any:
    """A subclass's field written after its base's field `name` (_Record._layout): where the files always had it."""
    return field(metadata={"after": name}, **kw)


@dataclass(eq=False, kw_only=True)
class Stats(_Record):
    """One clock's figures over a row's repeats (Stats.of, harness/measure/timing.py measure): the median (of the
    processes' medians, once merged), the pooled repeats' quartiles, mean, extremes, count and IQR. A file from
    before a figure was kept lacks it (None)."""

    median: float
    q1: float | None = None
    q3: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    n: int | None = None
    iqr: float | None = None

    @property
    def spread(self) -> float:
        """The IQR over the median; 0 where there is nothing to compare."""
        return (self.iqr or 0.0) / self.median if self.median else 0.0

    @property
    def rel_iqr(self) -> float:
        """The IQR over the median; infinite where the median is not positive (harness/run/selfcheck.py)."""
        return (self.iqr or 0.0) / self.median if self.median > 0 else math.inf

    @classmethod
    def of(cls, samples: list[float] | np.ndarray) -> "Stats":
        """The figures of one clock's samples (numpy's linear percentiles)."""
        a = np.asarray(samples, dtype=np.float64)
        if a.size == 0:
            raise ValueError("no samples")
        q1, med, q3 = (float(x) for x in np.percentile(a, [25, 50, 75]))
        return cls(median=med, q1=q1, q3=q3, mean=float(a.mean()), min=float(a.min()), max=float(a.max()),
                   n=int(a.size), iqr=q3 - q1)


@dataclass(eq=False, kw_only=True)
class Sensitivity(_Record):
    """How a row's process medians moved with the host's speed (harness/measure/noise.py host_sensitivity)."""

    slope: float | None
    r: float | None
    n: int


@dataclass(eq=False, kw_only=True)
class Process(_Record):
    """One worker process's (or rank group's) share of a row's repeats, in the order of the samples."""

    n: int
    stopped: str | None  # timing.py TimingConfig.stop's reason
    noise: float | None  # its device_done median's relative half-width; null: undecidable
    median: float | None  # of its device_done samples
    first_call_s: float | None
    host_loop_s: float | None = None  # the host's speed beside it (harness/measure/calibrate.py's Python loop)
    host_loop_at: float | None = None  # when, wall-clock seconds
    row_loop_s: float | None = None  # the same loop just before the row's repeats and just after (older trees' files)
    timed_s: float | None = None  # seconds inside its timed repeats
    phase_s: float | None = None  # its whole wall time for the row
    served_s: float | None = None  # the request that timed it, in the worker (shared by its rows)
    request_s: float | None = None  # and its round trip, messages included
    kernel_n: int | None = None  # its kernel clock's samples, where they are not one a repeat (a trace's runs; 0: none traced)
    kernel_s: float | None = None  # its request's trace of the kernel clock, part of served_s (shared by its rows)
    loop_s: float | None = None  # its measure(): first call, warm-up, repeats, checks (part of phase_s)
    warm_s: float | None = None  # of loop_s, the first call and the warm-up
    check_s: float | None = None  # of loop_s, the checks of its timed outputs


# A row's clocks (harness/measure/timing.py, harness/measure/kernel_clock.py), each a Stats and its samples
CLOCKS = ("host_return", "device_done", "device_events", "kernel")


def counts_of(timing: dict[str, Any], clock: str) -> list[int] | None:
    """How many of a merged row's samples of `clock` came from each of its processes, in order: the
    processes' repeats (n), but a kernel clock read from traced runs has its own count (kernel_n);
    None for a row of one process (a file without timing.processes). Timing.counts is the same for a record."""
    return _per_process(timing.get("processes") or [], clock, lambda p, k: p.get(k))


def _per_process(procs: list[Any], clock: str, get: Any) -> list[int] | None:
    if not procs:
        return None
    # kernel_n 0: a process that traced no kernel clock (processes.KERNEL_PROCESSES)
    key = "kernel_n" if clock == "kernel" and all(get(p, "kernel_n") is not None for p in procs) else "n"
    return [int(get(p, key)) for p in procs]


# Where a row's time went besides its timed repeats (Timing fields, harness/measure/timing.py measure),
# summed into a timing phase (harness/workers/processes.py phase)
ROW_PARTS = ("warm_s", "before_s", "check_s", "agree_s")


@dataclass(eq=False, kw_only=True)
class _Timing(_Record):
    """What one process's timing of a row (ProcessTiming) and the merged row's (Timing) both hold: each clock's
    Stats and samples, the emitted metrics' medians, the checks' counts, where the row's wall time went
    (harness/measure/timing.py measure) and a rank row's slowest rank (harness/workers/ranks.py). Why one base:
    a merge starts from its first process's (Timing.pooled), and a clock is read alike on both."""

    first_call_s: float | None = None
    host_return: Stats
    device_done: Stats
    device_events: Stats | None  # null where the framework has no device events (CPU)
    # the kernel clock (harness/measure/kernel_clock.py): how long a call occupies the device, where there is a
    # device; kernel_source says how it was read, kernel_why why a GPU row has none
    kernel: Stats | None = None
    kernel_source: str | None = None
    kernel_why: str | None = None
    metrics: Json  # medians of what the impl emitted, and the output metrics
    checked_repeats: int | None = None
    wrong_repeats: int | None = None
    worst: str | None = None  # the first wrong repeat's description
    samples: dict[str, list[float]]  # every repeat's seconds per clock
    timed_s: float | None = None
    phase_s: float | None = None
    loop_s: float | None = None
    check_s: float | None = None
    repeats_s: float | None = None
    warm_s: float | None = None
    before_s: float | None = None
    agree_s: float | None = None
    rank_time: str | None = None  # "mean": a rank row timed as the mean over ranks (harness/workers/ranks.py)
    slowest_rank: dict[str, Stats] | None = None
    slowest_rank_samples: dict[str, list[float]] | None = None
    # the host's short loop just before each repeat, in the order of the samples (timing.py TimingConfig.host_beside;
    # in some older files, the geometric mean of one loop before and one after each repeat)
    host_loops: list[float] | None = None

    _NESTED: ClassVar[dict[str, tuple[str, type]]] = {
        "host_return": ("one", Stats), "device_done": ("one", Stats), "device_events": ("one", Stats),
        "kernel": ("one", Stats), "slowest_rank": ("map", Stats)}

    @property
    def kernel_clock(self) -> Stats | None:
        """The kernel clock (harness/measure/kernel_clock.py), or None. A file from before the kernel clock (no
        kernel_source) had one only where its framework had CUDA events, which were then what the kernel clock is now."""
        return self.kernel or (self.device_events if self.kernel_source is None else None)

    def clock(self, name: str) -> Stats | None:
        """The Stats of one clock by its name (harness/results/model.py CLOCKS), or None."""
        got = getattr(self, name) if name in CLOCKS else None
        return got if isinstance(got, Stats) else Stats.from_dict(got) if isinstance(got, dict) else None


@dataclass(eq=False, kw_only=True)
class ProcessTiming(_Timing):
    """One worker process's timing of a row: harness/measure/timing.py measure builds it, handlers.time_point adds
    the kernel clock, the host's speed and its request's seconds in the worker and sends it in a ProcessRow, and
    the parent adds the request's round trip (processes.round_trip). Why apart from Timing: why it stopped and its
    one noise figure are a process's; processes.pool_timing keeps them per process (Process)."""

    stopped: str | None = _after("samples", default=None)  # timing.py TimingConfig.stop's reason
    noise: float | None  # its device_done median's relative half-width; null: no finite figure
    host_loop_s: float | None = _after("agree_s", default=None)  # the host's Python loop beside it (calibrate.py)
    host_loop_at: float | None = None  # when, wall-clock seconds
    # the same loop just before the row's repeats and just after, their mean (files of older trees' regress runs)
    row_loop_s: float | None = None
    served_s: float | None = None  # the request that timed it, in the worker (shared by its rows)
    request_s: float | None = None  # and its round trip, messages included (processes.round_trip)
    kernel_s: float | None = None  # its request's trace of the kernel clock, part of served_s (shared by its rows)


@dataclass(eq=False, kw_only=True)
class Timing(_Timing):
    """A row's timing as a result holds it, merged from its processes' (processes.pool_timing): every process's
    repeats pooled, `processes` in their order, noise per clock, the seconds summed. A file from before rows
    were timed in several processes has no processes (one_process) and no noise."""

    noise: dict[str, float | None] | None = _after("samples")  # {clock: its median's relative half-width or null}
    processes: list[Process] | None = None
    host_sensitivity: Sensitivity | None = _after("agree_s", default=None)

    _NESTED: ClassVar[dict[str, tuple[str, type]]] = _Timing._NESTED | {
        "processes": ("list", Process), "host_sensitivity": ("one", Sensitivity)}

    @classmethod
    def pooled(cls, first: ProcessTiming, **merged: Any) -> "Timing":
        """A merged row's timing: the fields it shares with its first process's timing as that one has them, and
        `merged` (the pooled figures, processes.pool_timing) over them."""
        return cls(**({k: getattr(first, k) for k in _Timing._FIELDS} | merged), extra=dict(first.extra))

    # -- what an older file lacks, said once (issue 50: readers ask these, not the keys) --

    @property
    def one_process(self) -> bool:
        """Repeats kept but no processes: a file written before rows were timed in several processes."""
        return bool(self.samples) and not self.processes

    def counts(self, clock: str) -> list[int] | None:
        """counts_of for a typed Timing: how many of `clock`'s samples came from each process, in order (a
        kernel clock read from traced runs: their kernel_n); None for a row of one process (one_process)."""
        return _per_process(self.processes or [], clock, getattr)


@dataclass(eq=False, kw_only=True)
class Check(_Record):
    """What the timed outputs' checks found."""

    checked: int
    wrong: int
    worst: str | None
    max_rel_err: float | None  # of the checked repeats; null for a hazard or without a reference
    against: str | None = None  # "reference", "baseline" or "none"


# Read by the report (issue 50): what were plain mappings with result keys of their own.

@dataclass(eq=False, kw_only=True)
class Timelines(_Record):
    """A scenario's timeline picture and the Chrome trace it was drawn from, relative to the result file."""

    png: str | None = None
    trace: str | None = None


@dataclass(eq=False, kw_only=True)
class Profile(_Record):
    """A row's profiled repeat (compare --profile): its trace files relative to the result, or why none."""

    trace: str | bytes | None = None  # a file name; bytes in a run's document before they are written
    xplane: str | bytes | None = None
    why: str | None = None
    tool: str | None = None


@dataclass(eq=False, kw_only=True)
class NotRun(_Record):
    """A scenario asked for but not run, and why."""

    scenario: str
    why: str | None = None


@dataclass(eq=False, kw_only=True)
class HostLoop(_Record):
    """One measurement of the host's Python loop in a run (harness/measure/calibrate.py host_series)."""

    at: float  # wall-clock seconds
    loop_s: float
    framework: str | None = None
    scenario: str | None = None
    point: int | None = None


@dataclass(eq=False, kw_only=True)
class Row(_Record):
    """One framework x variant x point: it ran (status ok or wrong, with timing and check) or why not."""

    scenario: str | None
    framework: str
    variant: str
    hazard: bool | None = None
    setup_s: float | None = None
    status: str  # harness/results/results.py STATUSES
    reason: str | None = None  # why it did not run
    timing: Timing | None = None
    check: Check | None = None
    host_syncs: int | None = None  # the untimed census run's host syncs; null: not countable here
    sync_method: str | None = None
    sync_why: str | None = None
    wall_s: float | None = None
    timeline: Json | None = None  # the traced run (harness/measure/timeline.py), before the report draws it
    profile: Profile | None = None  # compare --profile
    ranks: int | None = None  # a rank row: its world size
    rank_device_done_median: list[float] | None = None
    point: int | None = None
    label: str | None = None
    floor_s: float | str | None = None  # seconds, or "inf" (a floor of no finite time)
    pct_of_floor: float | str | None = None  # likewise

    _NESTED: ClassVar[dict[str, tuple[str, type]]] = {"timing": ("one", Timing), "check": ("one", Check),
                                                       "profile": ("one", Profile)}
    _WITH: ClassVar[dict[str, str]] = {"host_syncs": "sync_method"}

    @property
    def timed(self) -> bool:
        return self.status in ("ok", "wrong") and self.timing is not None

    @property
    def point_index(self) -> int:
        """The index of the row's point in its scenario's points; 0 where the row names none."""
        return self.point or 0


@dataclass(eq=False, kw_only=True)
class ProcessRow(Row):
    """A row as one worker process sends it (harness/workers/handlers.py time_point; a rank group's is its ranks'
    rows made one, harness/workers/ranks.py): a Row whose timing is that process's. processes.merge makes one Row
    of a variant's ProcessRows (merged)."""

    timing: ProcessTiming | None = None  # type: ignore[assignment]

    _NESTED: ClassVar[dict[str, tuple[str, type]]] = Row._NESTED | {"timing": ("one", ProcessTiming)}

    def merged(self, timing: Timing | None, **changes: Any) -> Row:
        """This row as a result holds it: its fields and its keys' order, with the merged `timing` and `changes`."""
        return Row(**({k: getattr(self, k) for k in Row._FIELDS} | changes | {"timing": timing}), extra=self.extra,
                   _keys=self._keys)


@dataclass(eq=False, kw_only=True)
class VariantInfo(_Record):
    """A variant as the run recorded it (scenarios/spec.py Variant): gpu_only is True, False, or the
    frameworks where it needs a GPU."""

    name: str
    doc: str | None = None
    hazard: bool | None = None
    gpu_only: bool | list[str] | None = None


@dataclass(eq=False, kw_only=True)
class Equivalence(_Record):
    """The hypothesis check of a scenario (harness/check/equivalence.py EquivalenceResult)."""

    status: str
    examples: int | None = None
    frameworks: list[str] | None = None
    message: str | None = None


@dataclass(eq=False, kw_only=True)
class ClaimResult(_Record):
    """One claim's verdict for one framework at one point (harness/check/judging.py)."""

    claim: str
    text: str | None = None
    framework: str
    verdict: str  # confirmed | refuted | inconclusive
    evidence: str | None = None
    numbers: Json | None = None  # the figures the verdict rests on, by name
    holds_in: float | None = None  # the share of the noise's resamples in which the verdict held
    not_decidable: str | None = None  # "cpu": a claim about a GPU's machinery on a CPU
    point: int | None = None
    label: str | None = None


@dataclass(eq=False, kw_only=True)
class CrossCheck(_Record):
    """The frameworks' baseline outputs compared with each other where no reference was affordable."""

    frameworks: list[str] | None = None
    status: str
    elements: int | None = None
    problems: list[str] | None = None
    point: int | None = None
    label: str | None = None


@dataclass(eq=False, kw_only=True)
class Phase(_Record):
    """Where a timing phase's wall time went (harness/workers/processes.py phase): its timed seconds and
    share, and the parts of the rest."""

    wall_s: float | None = None
    timed_s: float | None = None
    share: float | None = None
    rows_s: float | None = None
    requests_s: float | None = None
    served_s: float | None = None
    warm_s: float | None = None
    before_s: float | None = None
    check_s: float | None = None
    agree_s: float | None = None


@dataclass(eq=False, kw_only=True)
class ScenarioResult(_Record):
    """One scenario of a run: what it is, its equivalence verdict, its points, rows, claims, cross-checks."""

    title: str | None = None
    concept: str | None = None
    metrics_doc: dict[str, str] | None = None
    variants: list[VariantInfo] | None = None
    equivalence: Equivalence | None = None
    points: list[Json] | None = None  # each point's params, the run's seed among them
    floor_why: str | None = None
    claims: list[ClaimResult] | None = None
    cross_framework: list[CrossCheck] | None = None
    timelines: Timelines | None = None
    timing_phase: Phase | None = None
    rows: list[Row]
    wall_s: float | None = None

    _NESTED: ClassVar[dict[str, tuple[str, type]]] = {
        "rows": ("list", Row), "variants": ("list", VariantInfo), "equivalence": ("one", Equivalence),
        "claims": ("list", ClaimResult), "cross_framework": ("list", CrossCheck), "timing_phase": ("one", Phase),
        "timelines": ("one", Timelines)}

    def params_of(self, row: Row) -> Json:
        """The params of a row's point (the run's seed among them); {} where the scenario lists no such point."""
        points = self.points or [{}]
        return points[row.point_index] if row.point_index < len(points) else {}


@dataclass(eq=False, kw_only=True)
class FrameworkEnv(_Record):
    """A framework as its workers' hello said it (harness/workers/handlers.py hello): available or why not;
    env holds the backend's own facts (version, device, ...), whose keys are the backend's."""

    available: bool
    why: str | None = None
    env: Json | None = None
    on_gpu: bool | None = None
    pid: int | None = None
    subsets: bool | None = None
    status: str | None = None  # how it failed at start-up (a row's status); none: skipped


@dataclass(eq=False, kw_only=True)
class Cpus(_Record):
    """The CPUs a run's processes were pinned to (harness/workers/cpus.py): how they were chosen and why."""

    mode: str  # auto | all | list | unsupported
    why: str | None = None


@dataclass(eq=False, kw_only=True)
class Environment(_Record):
    """Where the run ran: the GPU (null on a CPU run), the host, each framework, the machine's ceilings
    and calibration, the memory fraction in effect and the CPUs the processes were pinned to.
    machine["calibration"][framework] holds one entry per worker process: its measures in seconds
    (tiny_op_s, python_loop_s, at), or {"error": why} where the process did not answer; readers take the
    numbers and pass over an error (harness/regress/env.py, harness/measure/calibrate.py host_series)."""

    gpu: str | None
    host: Json
    frameworks: dict[str, FrameworkEnv]
    machine: Json
    gpu_memory_fraction: float | str | None = None  # a fraction, or why none is in effect
    cpus: Cpus | None = None

    _NESTED: ClassVar[dict[str, tuple[str, type]]] = {"frameworks": ("map", FrameworkEnv), "cpus": ("one", Cpus)}


@dataclass(eq=False, kw_only=True)
class Result(_Record):
    """A `compare` run's result document."""

    schema: str
    created: str
    finished: str | None = None
    command: list[str] | None = None
    size: str
    seed: int | None
    examples: int | None = None
    isolation: str | None = None
    environment: Environment
    scenarios: dict[str, ScenarioResult]
    complete: bool | None = None
    not_run: list[NotRun] | None = None  # scenarios asked for but not run, with why
    timing_phase: Phase | None = None
    host_speed: list[HostLoop] | None = None
    row_median: str | None = None  # "processes": rows' medians are their processes' (older files pooled the repeats)

    _NESTED: ClassVar[dict[str, tuple[str, type]]] = {"environment": ("one", Environment),
                                                       "scenarios": ("map", ScenarioResult),
                                                       "timing_phase": ("one", Phase),
                                                       "not_run": ("list", NotRun), "host_speed": ("list", HostLoop)}


for _cls in (Stats, Sensitivity, Process, _Timing, ProcessTiming, Timing, Check, Row, ProcessRow, VariantInfo,
             Equivalence, ClaimResult, CrossCheck, Phase, Timelines, Profile, NotRun, HostLoop, ScenarioResult,
             FrameworkEnv, Cpus, Environment, Result):
    _cls._layout()
