"""PyTorch: the GPU when there is one, else the CPU (streams, events and pinned memory need CUDA)."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from harness.backends import digest
from harness.backends.base import (Annotate, Backend, ChromeTrace, EventTimer, Facts, OwnBenchmark, ProfilerOutput, SyncCount,
                                   TimelineRecorder, Unavailable, memory_fraction)


class TorchBackend(Backend):
    name = "torch"
    display_name = "PyTorch"
    short_name = "torch"
    colour = "#ee4c2c"
    module = "torch"
    profiler = "torch.profiler's Chrome trace"
    porting = {
        "float32 matmul precision":
            "full float32 (`torch.backends.cuda.matmul.allow_tf32` is False); the harness also sets "
            "`torch.set_float32_matmul_precision('highest')`",
        "matrix-product library": "cuBLAS (cuBLASLt), chosen by heuristics at the call: no compile-time tuning",
        "GPU memory at start": "caching allocator, grows on demand; `torch.cuda.empty_cache()` returns it",
        "wait for the device": "`torch.cuda.synchronize()`, `Stream.synchronize()`, `Event.synchronize()`",
        "reads that wait (implicit syncs)": "`.item()`, `.cpu()`, `.tolist()`, `print(t)`, `bool(t)`, `nonzero()`",
        "user streams": "`torch.cuda.Stream()`: non-blocking with respect to the legacy default stream",
        "events": "`torch.cuda.Event(enable_timing=False)`: timing *off* by default",
        "host → device from numpy":
            "`torch.from_numpy(a).to(dev, non_blocking=True)` still blocks from pageable memory; pin with "
            "`.pin_memory()` or `torch.empty(..., pin_memory=True)`",
        "device → host":
            "`.cpu()` (blocks); `.to('cpu', non_blocking=True)` into pinned memory must be synchronized before reading",
        "sync detector": "`torch.cuda.set_sync_debug_mode('warn')` (process-wide, prototype)",
        "first call": "initializes cuBLAS and friends",
    }

    def _load(self) -> None:
        import torch

        self.fw = torch
        # Compare like with like: no TF32 in float32 matmuls/convolutions (JAX is pinned to "highest").
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.on_gpu = bool(torch.cuda.is_available())
        if self.on_gpu:
            torch.cuda.set_device(self.ordinal)  # before the cap: the CUDA context is made on the current device
        self.device = torch.device("cuda", self.ordinal) if self.on_gpu else torch.device("cpu")
        self.has_events = self.has_streams = self.on_gpu
        # A CPU build's torch.cuda.nvtx raises ("NVTX functions not installed"): ranges only with CUDA.
        self.nvtx_how = "torch.cuda.nvtx" if self.on_gpu else "none: no CUDA device (torch.cuda.nvtx needs one)"
        if self.on_gpu:
            f = memory_fraction()
            # Caps the caching allocator (tensors and cuBLAS workspaces); past it, torch.OutOfMemoryError.
            torch.cuda.set_per_process_memory_fraction(f, self.device)
            total = torch.cuda.get_device_properties(self.device).total_memory
            self.memory_cap = {"fraction": f, "bytes": int(f * total),
                               "how": "torch.cuda.set_per_process_memory_fraction (caching allocator)"}

    def device_label(self) -> str:
        if self.on_gpu:
            return f"{self.device} ({self.fw.cuda.get_device_name(self.device)})"
        return "cpu (no CUDA device: streams, events and pinned memory are skipped)"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self.fw.Tensor)

    def to_device(self, a: np.ndarray) -> Any:
        return self.fw.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def _array_to_numpy(self, x: Any) -> np.ndarray:
        return x.detach().cpu().numpy()

    device_digest = True  # _array_lanes below runs on the device

    def _on_device(self, x: Any) -> bool:
        return x.device.type == "cuda"

    def _describe(self, x: Any) -> tuple[str, tuple[int, ...], int]:
        return str(x.dtype).removeprefix("torch."), tuple(x.shape), x.numel() * x.element_size()

    def _array_lanes(self, x: Any) -> tuple[int, ...]:
        # uint32 arithmetic emulated in int64 (_mul32): torch has no wrapping uint32 products on CUDA, and
        # int64 overflow is undefined in C++. Kernels on the current stream, after the call's synchronize.
        torch = self.fw
        x = x.detach()
        x = torch.view_as_real(x) if x.is_complex() else x
        flat = x.contiguous().reshape(-1)
        size = flat.element_size()
        if size % 4 and size not in (1, 2):
            raise ValueError(f"no words for an item of {size} bytes")
        words = flat.view({1: torch.uint8, 2: torch.int16}.get(size, torch.int32))
        if words.numel() >= 1 << 31:  # (i + 1) * m below stays under 2^63 up to here (8 GiB of words)
            raise ValueError("no digest past 2^31 words")
        low = (1 << (8 * min(size, 4))) - 1  # a view's sign extension, masked off
        sums = [torch.zeros((), dtype=torch.int64, device=flat.device) for _ in digest.MULTIPLIERS]
        for start in range(0, words.numel(), digest.CHUNK):
            w = words[start:start + digest.CHUNK].to(torch.int64) & low
            i1 = torch.arange(start + 1, start + 1 + w.numel(), dtype=torch.int64, device=flat.device)
            for n, m in enumerate(digest.MULTIPLIERS):
                sums[n] = (sums[n] + _fmix32(w ^ ((i1 * m) & digest.MASK)).sum()) & digest.MASK  # a chunk's < 2^56
        return tuple(int(s.item()) & digest.MASK for s in sums)

    def synchronize(self, outputs: Any = None) -> None:
        if self.on_gpu:
            self.fw.cuda.synchronize(self.device)  # every stream of the device, not only the current one

    def tiny_op(self) -> Any:
        x = self.fw.zeros(1, device=self.device)
        return lambda: x + 1

    def event_timer(self) -> EventTimer | None:
        return _TorchEvents(self.fw) if self.on_gpu else None

    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]:
        return self._count_syncs()

    @contextlib.contextmanager
    def range(self, name: str) -> Iterator[None]:
        # record_function: the name in torch.profiler's trace; NVTX: the name in Nsight Systems.
        with self.fw.profiler.record_function(name):
            if self.on_gpu:
                self.fw.cuda.nvtx.range_push(name)
            try:
                yield
            finally:
                if self.on_gpu:
                    self.fw.cuda.nvtx.range_pop()

    @contextlib.contextmanager
    def profiling(self) -> Iterator[ProfilerOutput]:
        from torch.profiler import ProfilerActivity, profile

        got: ProfilerOutput = {"tool": "torch.profiler (Chrome trace: ui.perfetto.dev, chrome://tracing)"}
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.on_gpu else [])
        with profile(activities=activities) as prof:
            yield got
        with tempfile.TemporaryDirectory(prefix="triptych-torch-profile-") as d:
            path = os.path.join(d, "trace.json")
            prof.export_chrome_trace(path)  # writes a file only: read back, the folder goes
            got["files"] = {".trace.json": Path(path).read_bytes()}

    def kernel_trace(self, body: Callable[[Annotate], None]) -> tuple[ChromeTrace, str]:
        if not self.on_gpu:
            raise Unavailable("no CUDA device: torch's kernels run on the CPU")
        return kineto_trace(body), "torch.profiler (CUPTI span)"

    def timeline_recorder(self) -> TimelineRecorder:
        if not self.on_gpu:
            rec = TimelineRecorder()
            rec.clock = "host wall clock (torch on the CPU runs each op inside the call; no streams)"
            return rec
        return _TorchTimeline(self.fw)

    @contextlib.contextmanager
    def _count_syncs(self) -> Iterator[SyncCount]:
        result = SyncCount(method="torch.cuda.set_sync_debug_mode('warn')")
        if not self.on_gpu:
            result.why = "the sync debug mode watches CUDA calls; there are none on the CPU"
            yield result
            return
        torch = self.fw
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            previous = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield result
            finally:
                torch.cuda.set_sync_debug_mode(previous)
        result.count = sum("synchronizing CUDA operation" in str(w.message) for w in caught)

    def clock_kernels(self) -> dict[str, Callable[[], Any]]:
        torch, dev = self.fw, self.device
        n, big = (4096 if self.on_gpu else 256), self.clock_elements()  # x, y, the sum and the one before it
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        x, y = torch.randn(big, device=dev), torch.randn(big, device=dev)
        return {f"gemm_fp32_{n}": lambda: a @ b, f"add_{big >> 20}Mi_fp32": lambda: x + y,
                f"sum_{big >> 20}Mi_fp32": lambda: x.sum()}

    def own_benchmark(self, call: Any) -> OwnBenchmark | None:
        from torch.utils.benchmark import Timer

        # Timer defaults to one CPU thread; give it the harness's thread count so CPU numbers compare too.
        timer = Timer(stmt="f()", globals={"f": call}, num_threads=self.fw.get_num_threads())
        # blocked_autorange runs ~100 calls per block between two synchronizes: the device's back-to-back
        # throughput. A 4096 GEMM ran 2-3.5% faster that way than alone (CUDA events; docs/measuring.md), so
        # the like-for-like check is Timer.timeit(1): one call between the Timer's own synchronizes.
        back_to_back = float(timer.blocked_autorange(min_run_time=1.0).median)
        alone, t_end = [], time.perf_counter() + 1.0
        while len(alone) < 20 or (time.perf_counter() < t_end and len(alone) < 2000):
            alone.append(timer.timeit(number=1).median)
        return {"tool": "torch.utils.benchmark.Timer.timeit(1)", "tool_s": float(np.median(alone)),
                "back_to_back_s": back_to_back}

    def free_memory(self) -> None:
        if self.on_gpu:
            self.fw.cuda.synchronize()
            self.fw.cuda.empty_cache()

    def allocate(self, nbytes: int) -> Any:
        return self.fw.empty(nbytes, dtype=self.fw.uint8, device=self.device)

    def _is_oom_type(self, e: BaseException) -> bool:
        return isinstance(e, self.fw.cuda.OutOfMemoryError)  # torch.OutOfMemoryError since 2.5: the same class

    def env(self) -> Facts:
        torch = self.fw
        info: Facts = {"version": torch.__version__, "device": self.device_label()}
        if self.on_gpu:
            p = torch.cuda.get_device_properties(self.device)
            info.update(
                cuda_runtime=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(),
                gpu=p.name,
                compute_capability=f"{p.major}.{p.minor}",
                multiprocessors=p.multi_processor_count,
                memory_bytes=p.total_memory,
            )
        info["float32_matmul"] = "highest (TF32 off)"
        info["memory_cap"] = self.memory_cap
        info["nvtx"] = self.nvtx_how
        return info


class _TorchEvents(EventTimer):
    def __init__(self, torch: Any) -> None:
        self._a = torch.cuda.Event(enable_timing=True)
        self._b = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._a.record()

    def stop(self) -> None:
        self._b.record()

    def elapsed_s(self) -> float:
        return self._a.elapsed_time(self._b) / 1e3


class _TorchTimeline(TimelineRecorder):
    """CUDA events recorded on the current stream at each mark, timed against one base event."""

    clock = "CUDA events (torch.cuda.Event) recorded on each span's stream"

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def start(self) -> None:
        self._base = self.mark()

    def mark(self) -> Any:
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()  # on the current stream: completes when the stream reaches this point
        return ev

    def seconds(self, token: Any) -> float:
        return self._base.elapsed_time(token) / 1e3


def _mul32(v: Any, c: int) -> Any:
    """v * c mod 2^32 for int64 tensors v < 2^32 and c < 2^32, from c's 16-bit halves: no product past 2^48."""
    return (v * (c & 0xFFFF) + (((v * (c >> 16)) & 0xFFFF) << 16)) & digest.MASK


def _fmix32(h: Any) -> Any:
    """harness/backends/digest.py fmix32 of int64 tensors holding uint32 words."""
    h = h ^ (h >> 16)
    h = _mul32(h, digest.FMIX[0])
    h = h ^ (h >> 13)
    h = _mul32(h, digest.FMIX[1])
    return h ^ (h >> 16)


def kineto_trace(body: Callable[[Annotate], None]) -> ChromeTrace:
    """torch.profiler's Chrome trace of one session around body(record_function): CUPTI records every kernel and
    copy of the process, whichever library launched it, so CuPy's backend traces its own rows through this too
    (harness/measure/kernel_clock.py)."""
    try:
        from torch.profiler import ProfilerActivity, profile, record_function
    except ImportError as e:
        raise Unavailable(f"torch.profiler is not importable here: {e}") from None
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": one cycle here
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            body(record_function)
    with tempfile.TemporaryDirectory(prefix="triptych-kernel-clock-") as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            return json.load(f)
