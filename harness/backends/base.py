"""What the harness needs from a framework, in one small class per framework.

Every framework is imported lazily, on first use, so that importing the harness touches no GPU and a
missing framework costs nothing but its own rows: the imports of torch, CuPy and JAX inside this package's
functions are that rule, each at the first use of what it imports.
"""
from __future__ import annotations

import contextlib
import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NotRequired, TypedDict

import numpy as np

from harness.backends.digest import MIN_BYTES as DIGEST_MIN_BYTES
from harness.backends.digest import key as digest_key
from harness.backends.digest import lanes as digest_lanes
from harness.backends.digest import words as digest_words
from scenarios.spec import Params

# Without a GPU the outputs are host memory: a check reads them in place, and the point cache keys the large ones
# by sha256 (harness/workers/point_cache.py digest), faster than the device digest's emulated uint32 arithmetic on
# a CPU. Tests set it to run the device digest's path on a CPU machine.
DIGEST_ON_CPU = False

# Free-form by nature: a backend's own facts as env() reports them (version, device, CUDA runtime, memory cap,
# ...), whose keys are the backend's; the result keeps them as a framework's env (model.FrameworkEnv.env)
Facts = dict[str, Any]
# Free-form by nature: a Chrome trace as a framework's profiler writes it ({"traceEvents": [...], ...})
ChromeTrace = dict[str, Any]
# The start of every range name that Backend.kernel_trace's annotate is given (harness/measure/kernel_clock.py): a
# backend may keep only these of the host's events
KERNEL_RANGES = "triptych kernel "
# A host range of a name, as a profiler records it (torch.profiler.record_function, jax.profiler.TraceAnnotation)
Annotate = Callable[[str], contextlib.AbstractContextManager[Any]]


class MemoryCap(TypedDict):
    """What caps a framework's device memory (recorded in env()): the fraction, the bytes, and how."""

    fraction: float | None
    bytes: int | None
    how: str


class ProfilerOutput(TypedDict, total=False):
    """What profiling() yields, filled once the region is left: the tool, and its trace files
    ({suffix: bytes}) or why it wrote none."""

    tool: str
    files: dict[str, bytes]
    why: str


class OwnBenchmark(TypedDict):
    """A framework's own benchmark tool on one call (own_benchmark): median seconds per call timed alone,
    and back to back (None where the tool does not run calls so)."""

    tool: str
    tool_s: float
    back_to_back_s: float | None


class RankCeilings(TypedDict):
    """A rank scenario's raw floors (rank_ceilings): seconds per key, and why a key was not measured."""

    ceilings: dict[str, float]
    not_measured: dict[str, str]


class TracedSpans(TypedDict):
    """One traced call's operations (EventTimer.finish; a row's timeline, harness/measure/timeline.py): the
    clock, [lane, op, t0_s, t1_s] per span in start order, and why there are none."""

    clock: str
    spans: list[list[Any]]
    why: str
    lanes: NotRequired[list[str]]  # the lanes in drawing order, where the backend names them



class Unavailable(RuntimeError):
    """The framework cannot run here; str(self) is the one-line reason."""


# The three frameworks run in six processes (two each, harness/workers/processes.py) that live side by side on one
# GPU (one is timed at a time, but each keeps its allocator's pool). Each caps its own allocator at
# this fraction of the device's memory so that together they cannot run it out: 6 x 0.15 leaves a
# tenth for CUDA contexts. The rank scenarios add a group per framework and timing process
# (harness/workers/ranks.py); torch and CuPy hand their memory back after each variant, so what stays
# held is JAX's pools, two a timing process (a worker and a rank group): `compare` refuses a --processes
# whose JAX pools would not fit.
MEMORY_FRACTION_ENV = "TRIPTYCH_GPU_MEMORY_FRACTION"
DEFAULT_MEMORY_FRACTION = 0.15

# Words in the errors of the frameworks' allocators when device (or host) memory runs out.
OOM_WORDS = ("out of memory", "resource_exhausted", "cudaerrormemoryallocation", "cublas_status_alloc_failed",
             "cudnn_status_alloc_failed", "can't allocate memory")


def memory_fraction() -> float:
    """The fraction of GPU memory each framework may hold: $TRIPTYCH_GPU_MEMORY_FRACTION or 0.15."""
    text = os.environ.get(MEMORY_FRACTION_ENV, "").strip()
    if not text:
        return DEFAULT_MEMORY_FRACTION
    try:
        f = float(text)
    except ValueError:
        raise Unavailable(f"{MEMORY_FRACTION_ENV}={text!r} is not a number") from None
    if not 0 < f <= 1:
        raise Unavailable(f"{MEMORY_FRACTION_ENV}={text} is not a fraction in (0, 1]")
    return f


@dataclass
class SyncCount:
    """Host-device synchronizations seen by the framework's own detector during a region."""

    method: str  # how they were counted
    count: int | None = None  # None: this framework/device has no detector (see why)
    why: str = ""


class Backend(ABC):
    name: str = ""
    has_events = False  # device-side events (CUDA events) usable as a timer
    has_streams = False  # user-visible streams
    # The framework's facts, read from the class without loading it (harness/backends/__init__.py):
    display_name = ""  # how tables, reports and docs name it
    short_name = ""  # how running text names it ("torch, CuPy and JAX")
    colour = "grey"  # its colour in every chart
    module = ""  # the top-level module its import pulls in first (harness/workers/faults.py refuses it)
    profiler = ""  # what profiling() writes, for --profile's help
    # Its workers measure the machine's ceilings (raw CUDA copy rates, kernel launch) and a rank scenario's
    # raw floor (NCCL without a framework): ceilings() and rank_ceilings(). One framework does it for all.
    measures_ceilings = False
    keeps_pool = False  # its allocator keeps what it took after each variant (runner.Run.default_memory_fraction)
    rank_ports = 0  # rendezvous ports of its own a rank group needs beyond torchrun's MASTER_PORT
    # The porting guide's "defaults that differ everywhere", one cell per topic of harness/report/docs.py DEFAULTS.
    porting: dict[str, str] = {}

    @classmethod
    def rank_env(cls, host: str, ports: list[int]) -> dict[str, str]:
        """The variables a rank of this framework rendezvous on (harness/backends/dist.py reads them), on
        its rank_ports ports; torch's is torchrun's own MASTER_ADDR/MASTER_PORT, set for every rank."""
        return {}

    def __init__(self) -> None:
        self._loaded = False
        self._why: str | None = None
        self.fw: Any = None  # the framework module once loaded
        self.device: Any = None  # the framework's own device object
        # The GPU _load makes current and caps: a rank's LOCAL_RANK (harness/backends/dist.py sets it before
        # load), so that its memory cap and CUDA context land on its own device, not on GPU 0.
        self.ordinal = 0
        self.on_gpu = False
        # What caps this framework's device memory (set by _load on a GPU; recorded in env()).
        self.memory_cap: MemoryCap = {"fraction": None, "bytes": None, "how": "no cap: not on a GPU"}
        # How range() reaches Nsight Systems (NVTX), or why it does not (recorded in env()).
        self.nvtx_how = "none: not on a GPU"

    # -- availability ---------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """(True, device description) or (False, why not), never raising."""
        try:
            self.load()
        except Unavailable as e:
            return False, str(e)
        return True, self.device_label()

    def load(self) -> "Backend":
        if self._why is not None:
            raise Unavailable(self._why)
        if not self._loaded:
            try:
                self._load()
            except Unavailable as e:
                self._why = str(e)
                raise
            except ImportError as e:
                if isinstance(e, ModuleNotFoundError) or e.name:
                    self._why = f"{self.name} is not installed ({e.name or e})"
                else:  # installed but broken: a missing CUDA library, an ABI mismatch, ...
                    self._why = f"{self.name} failed to import: {str(e).splitlines()[0][:200]}"
                raise Unavailable(self._why) from None
            self._loaded = True
        return self

    @abstractmethod
    def _load(self) -> None:
        """Import the framework, pin precision defaults, choose the device; raise Unavailable."""

    @abstractmethod
    def device_label(self) -> str: ...

    # -- data -------------------------------------------------------------------------------------
    @abstractmethod
    def is_array(self, x: Any) -> bool: ...

    @abstractmethod
    def to_device(self, a: np.ndarray) -> Any: ...

    @abstractmethod
    def _array_to_numpy(self, x: Any) -> np.ndarray: ...

    def to_numpy(self, x: Any) -> Any:
        """Framework arrays (also inside dicts, lists, tuples) -> numpy; scalars -> 0-d arrays."""
        if isinstance(x, dict):
            return {k: self.to_numpy(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return np.asarray([self.to_numpy(v) for v in x])
        if self.is_array(x):
            return self._array_to_numpy(x)
        return np.asarray(x)

    def digest(self, x: Any) -> str | None:
        """The key of outputs (an array or a dict of them) computed on their device: their names, dtypes,
        shapes and bytes (harness/backends/digest.py); a few integers cross to the host, not the bytes.
        None where the outputs are anything else, smaller than its MIN_BYTES in all, in host memory (on a
        machine without a GPU, all of them: DIGEST_ON_CPU), of a dtype this framework cannot view as words, or
        where the digest fails (out of memory): the caller then copies and compares."""
        arrays = x if isinstance(x, dict) else {"": x}
        if not self.device_digest or not arrays or not all(self.is_array(a) for a in arrays.values()):
            return None
        if self.on_gpu and not all(self._on_device(a) for a in arrays.values()):
            return None  # host memory (a device-to-host copy's output) is read in place: cheaper than a digest there
        if not self.on_gpu and not DIGEST_ON_CPU:
            return None  # likewise every output on a CPU machine (torch's digest there: about 60 s a GiB)
        try:
            described = {k: self._describe(a) for k, a in arrays.items()}
            if sum(size for _, _, size in described.values()) < DIGEST_MIN_BYTES:
                return None
            parts = [(k, described[k][0], described[k][1], self._array_lanes(arrays[k])) for k in sorted(arrays)]
        except Exception:  # noqa: BLE001 - a digest is a shortcut: without one the check compares in full
            return None
        return digest_key(parts)

    def _on_device(self, x: Any) -> bool:
        """Does the array x live in device memory (not host memory the framework manages)?"""
        return True

    def _describe(self, x: Any) -> tuple[str, tuple[int, ...], int]:
        """(numpy's name of x's dtype, shape, bytes) of the array that _array_to_numpy would return."""
        return str(x.dtype), tuple(x.shape), int(x.nbytes)

    # Whether _array_lanes runs on the array's device: a backend without its own (the default below
    # copies to the host) takes no digest at all, since the copy it would spare is the one it makes.
    device_digest = False

    def _array_lanes(self, x: Any) -> tuple[int, ...]:
        """harness/backends/digest.py lanes() of x's words. This default is the definition on a host copy;
        a backend with device_digest computes them on x's device."""
        return digest_lanes(digest_words(self._array_to_numpy(x)))

    # -- waiting ----------------------------------------------------------------------------------
    @abstractmethod
    def synchronize(self, outputs: Any = None) -> None:
        """Wait until the device has finished everything queued (JAX: everything in outputs)."""

    @abstractmethod
    def tiny_op(self) -> Any:
        """A zero-argument call that enqueues one op on one element and returns its output: the host's
        cost of a framework call, for the run's host-speed calibration (harness/measure/calibrate.py)."""

    # -- measuring --------------------------------------------------------------------------------
    def event_timer(self) -> "EventTimer | None":
        return None

    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]:
        return _no_counter(f"{self.name} has no sync detector")

    def timeline_recorder(self) -> "TimelineRecorder":
        """Timestamps for the spans an impl marks during one traced run (harness/measure/timeline.py)."""
        return TimelineRecorder()

    def range(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """A named range around a stretch of a run (a row's warm-up, its repeats, its profiled repeat) in
        the tools GPU people profile with: an NVTX range (Nsight Systems) and the framework's own
        profiler annotation where it has one; a no-op where there is neither. Only ever around whole
        loops of calls, never inside a timed call: pushing a range costs host time."""
        return contextlib.nullcontext()

    def profiling(self) -> contextlib.AbstractContextManager[ProfilerOutput]:
        """The framework's own profiler around a region. Yields a dict that, once the region is left,
        holds {"tool", "files": {suffix: bytes}} (the trace it wrote, read back from a temporary
        folder), or {"tool", "why"} where the framework writes no trace."""
        return _no_profile("", f"{self.name} has no profiler that writes a trace")

    def kernel_trace(self, body: Callable[[Annotate], None]) -> tuple[ChromeTrace, str]:
        """(a Chrome trace of the device's activity, the tool that wrote it) over one session around body(annotate),
        where annotate(name) is a context manager for a host range of that name which the trace holds on the
        device intervals' clock (harness/measure/kernel_clock.py reads them): one session for all of a request's
        rows, so that its start, export and parse are paid once. Raises Unavailable where this framework has no
        CUDA activity tracer here."""
        raise Unavailable(f"{self.name} has no CUDA activity tracer here")

    def clock_kernels(self) -> dict[str, Callable[[], Any]]:
        """Fixed device-bound kernels for `selfcheck`: name -> zero-argument call returning its output."""
        return {}

    def clock_elements(self, arrays: int = 4) -> int:
        """Elements of each float32 array of the selfcheck's elementwise kernels: 2^30 (4 GiB, so that each
        kernel runs about 1 ms or more at a few TB/s) where `arrays` of them fit in this framework's memory
        cap, else the largest power of two that does; 2^20 off the GPU. Why: a fixed 4 GiB ran out of an
        80 GB card's cap."""
        if not self.on_gpu:
            return 1 << 20
        cap = self.memory_cap.get("bytes")
        if not cap:
            return 1 << 30
        room = int(cap) - (256 << 20)  # the GEMM's operands and the allocator's own slack beside them
        return min(1 << 30, 1 << (max(room // (4 * arrays), 1).bit_length() - 1))

    def own_benchmark(self, call: Any) -> OwnBenchmark | None:
        """The framework's own benchmark tool on ``call``, if it has one: {"tool": its name, "tool_s": median
        seconds of one call timed alone (synchronized before and after, as the harness times it),
        "back_to_back_s": median seconds per call when the tool runs calls back to back, or None}."""
        return None

    def ceilings(self) -> dict[str, float]:
        """The machine's own limits measured now (see harness/measure/machine.py); {} where not measurable."""
        return {}

    def rank_ceilings(self, points: list[Params]) -> RankCeilings:
        """In a rank process, with every other rank: the raw floor of each point of a rank scenario
        (Scenario.rank_ceilings), {"ceilings": {key: seconds}, "not_measured": {key: why}}."""
        return {"ceilings": {}, "not_measured": {"*": f"{self.name} measures no raw floor"}}

    def free_memory(self) -> None:
        """Give cached device memory back so that the other frameworks sharing the GPU can use it."""

    # -- running out of memory --------------------------------------------------------------------
    def allocate(self, nbytes: int) -> Any:
        """An uninitialised uint8 array of nbytes on the device, through the framework's allocator
        (so that the memory cap applies); raises the framework's own out-of-memory error."""
        return np.empty(nbytes, np.uint8)

    def is_out_of_memory(self, e: BaseException) -> bool:
        """Is e (or what caused it) the framework running out of device or host memory?"""
        seen: set[int] = set()
        x: BaseException | None = e
        while x is not None and id(x) not in seen:
            seen.add(id(x))
            if isinstance(x, MemoryError) or (self._loaded and self._is_oom_type(x)):
                return True
            if any(w in str(x).lower() for w in OOM_WORDS):
                return True
            x = x.__cause__ or x.__context__
        return False

    def _is_oom_type(self, e: BaseException) -> bool:
        """The framework's own out-of-memory exception types (only once it is loaded)."""
        return False

    @abstractmethod
    def env(self) -> Facts:
        """Version, device, CUDA runtime and driver as this framework sees them."""


class EventTimer(ABC):
    """Device events recorded on the current stream around a region."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def elapsed_s(self) -> float:
        """Seconds between start and stop on the device; call after a synchronize."""


class TimelineRecorder:
    """Stamps the start and end of each span an impl marks (harness.measure.timeline.span) in one traced run.

    This base class uses the host wall clock: honest only where each operation runs inside the call
    (torch on the CPU). Backends with device events stamp on the span's stream instead; JAX, which has
    neither, reads the device's activity from its profiler's trace in ``finish``.
    """

    clock = "host wall clock (each operation runs inside its call)"

    def start(self) -> None:
        """Called right before the traced call, with the device idle."""
        self._t0 = wall()

    def mark(self) -> Any:
        """A timestamp token for the current stream, taken now in stream order."""
        return wall()

    def seconds(self, token: Any) -> float:
        """Seconds from start() to the token's moment; called after the device has finished."""
        return token - self._t0

    def finish(self, spans: list[tuple[str, str, Any, Any]]) -> TracedSpans:
        """After the traced call and a synchronize: {"clock", "spans": [[lane, op, t0_s, t1_s]], "why"}."""
        out = sorted(([lane, op, self.seconds(a), self.seconds(b)] for lane, op, a, b in spans), key=lambda s: s[2])
        return {"clock": self.clock, "spans": out, "why": "" if out else "the impl marks no operation in this variant"}


@contextlib.contextmanager
def _no_profile(tool: str, why: str) -> Iterator[ProfilerOutput]:
    yield {"tool": tool, "why": why}


@contextlib.contextmanager
def _no_counter(why: str) -> Iterator[SyncCount]:
    yield SyncCount(method="none", count=None, why=why)


def wall() -> float:
    return time.perf_counter()


def warm(before: Any, run: Any, seconds: float) -> None:
    """before() and run() again and again until `seconds` have passed: the device brought to the load of a
    timed loop (under it, a power-capped GPU lowers its clocks) before a traced run reads it."""
    t0 = wall()
    while wall() - t0 < seconds:
        before()
        run()
