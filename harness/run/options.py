"""What a compare run is asked to do, and every default of it in one place (the CLI reads these); the
GPU-memory cap's default, which depends on the frameworks and --processes, is runner.Run's."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.measure.timing import preset
from harness.workers.cpus import parse

TIMEOUT_S = 900.0  # per framework per request (one scenario's equivalence, one point's timing)
# Starting a framework (its import, picking the device) gets at least this long, however short the
# request timeout: six workers start side by side, and on a loaded host an import alone can take 20 s.
STARTUP_TIMEOUT_S = 120.0
ISOLATION = "process"
# Worker processes per framework that time every row (harness/workers/processes.py). Most of a row's variance on
# a shared host is between processes (harness/measure/noise.py); from the third process on, each process's
# repeats follow Kalibera and Jones (harness/workers/processes.py plan). Two until six fit a full default run
# in ten minutes (docs/design/processes.md); --processes 6 asks for six now. --isolation none
# runs one, in this process.
PROCESSES = 2
# Hypothesis examples per scenario's equivalence check. On the GPU (full) each example costs JAX a
# compile per shape and every framework a round trip: a few draws check the device paths, while the CPU
# suite (tests/test_equivalence.py) and the gpu suite's thorough profile draw more. Five fit a full run
# into one ten-minute GPU command (docs/design/untimed_costs.md).
EXAMPLES = {"full": 5, "smoke": 6}


class UI(Protocol):
    def begin(self, total: int) -> None: ...
    def step(self, text: str) -> None: ...
    def detail(self, text: str) -> None: ...
    def advance(self) -> None: ...
    def note(self, text: str) -> None: ...
    def end(self) -> None: ...


@dataclass
class CompareOptions:
    scenarios: list[str]
    frameworks: list[str]
    size: str
    examples: int
    seed: int
    isolation: str = ISOLATION
    timeout_s: float = TIMEOUT_S
    startup_timeout_s: float = STARTUP_TIMEOUT_S  # a worker's import and device pick
    equivalence: bool = True
    timing: bool = True
    argv: list[str] = field(default_factory=list)
    gpu_memory_fraction: float | None = None  # None: $TRIPTYCH_GPU_MEMORY_FRACTION or the default
    budget_s: float | None = None  # wall-clock budget: no new scenario starts once it is spent
    processes: int = PROCESSES
    timing_config: Any = None  # a harness.measure.timing.TimingConfig; None: the size preset's
    world_size: int | None = None  # ranks per framework for rank scenarios (None: the GPUs, or 2)
    cpus: str | list[int] = "all"  # "all", "auto" or CPU numbers (harness/workers/cpus.py)
    profile: bool = False  # one more repeat per row under the framework's profiler (harness/measure/profiling.py)

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ValueError(f"processes must be at least 1, not {self.processes}")
        if isinstance(self.cpus, str):
            self.cpus = parse(self.cpus)  # CpuSpecError (a ValueError) for a spec that names no usable CPU
        if self.profile:  # the timing config travels to every worker and rank: the flag goes with it


            self.timing_config = dataclasses.replace(self.timing_config or preset(self.size), profile=True)

    @property
    def timing_processes(self) -> int:
        """Processes per framework that time each row: one where nothing runs in a child."""
        return self.processes if self.isolation == "process" else 1
