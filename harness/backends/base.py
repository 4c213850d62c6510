"""What the harness needs from a framework, in one small class per framework.

Every framework is imported lazily, on first use, so that importing the harness touches no GPU and a
missing framework costs nothing but its own rows.
"""
from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np


class Unavailable(RuntimeError):
    """The framework cannot run here; str(self) is the one-line reason."""


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

    def __init__(self) -> None:
        self._loaded = False
        self._why: str | None = None
        self.fw: Any = None  # the framework module once loaded
        self.device: Any = None  # the framework's own device object
        self.on_gpu = False

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
                self._why = f"{self.name} is not installed ({e.name or e})"
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

    # -- waiting ----------------------------------------------------------------------------------
    @abstractmethod
    def synchronize(self, outputs: Any = None) -> None:
        """Wait until the device has finished everything queued (JAX: everything in outputs)."""

    def is_done(self, outputs: Any) -> bool:
        """Poll without blocking; True once the device has finished (default: blocks)."""
        self.synchronize(outputs)
        return True

    # -- measuring --------------------------------------------------------------------------------
    def event_timer(self) -> "EventTimer | None":
        return None

    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]:
        return _no_counter(f"{self.name} has no sync detector")

    def timeline_recorder(self) -> "TimelineRecorder":
        """Timestamps for the spans an impl marks during one traced run (harness/timeline.py)."""
        return TimelineRecorder()

    def clock_kernels(self) -> dict[str, Any]:
        """Fixed device-bound kernels for `selfcheck`: name -> zero-argument call returning its output."""
        return {}

    def own_benchmark(self, call: Any) -> tuple[str, float] | None:
        """(tool, median seconds per call) from the framework's own benchmark tool, if it has one."""
        return None

    def ceilings(self) -> dict[str, float]:
        """The machine's own limits measured now (see harness/machine.py); {} where not measurable."""
        return {}

    def free_memory(self) -> None:
        """Give cached device memory back so that the other frameworks sharing the GPU can use it."""

    @abstractmethod
    def env(self) -> dict[str, Any]:
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
    """Stamps the start and end of each span an impl marks (harness.timeline.span) in one traced run.

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

    def finish(self, spans: list[tuple[str, str, Any, Any]]) -> dict[str, Any]:
        """After the traced call and a synchronize: {"clock", "spans": [[lane, op, t0_s, t1_s]], "why"}."""
        out = sorted(([lane, op, self.seconds(a), self.seconds(b)] for lane, op, a, b in spans), key=lambda s: s[2])
        return {"clock": self.clock, "spans": out, "why": "" if out else "the impl marks no operation in this variant"}


@contextlib.contextmanager
def _no_counter(why: str) -> Iterator[SyncCount]:
    yield SyncCount(method="none", count=None, why=why)


def wall() -> float:
    return time.perf_counter()
