"""CuPy: GPU only. Without a CUDA device it is skipped with the reason CuPy itself gives."""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable

import numpy as np

from harness.backends import digest
from harness.backends.base import (Annotate, Backend, ChromeTrace, EventTimer, Facts, OwnBenchmark, ProfilerOutput, RankCeilings,
                                   TimelineRecorder, Unavailable, _no_profile, memory_fraction)
from harness.backends.pins import pin
from harness.backends.cuda_events import median_s as timed
from harness.backends.nccl_floor import measure
from harness.backends.torch_backend import kineto_trace
from scenarios.spec import Params


class CupyBackend(Backend):
    name = "cupy"
    display_name = "CuPy"
    short_name = "CuPy"
    colour = "#2e8b57"
    module = "cupy"
    profiler = "NVTX ranges only"
    measures_ceilings = True
    rank_ports = 1
    porting = {
        "float32 matmul precision": "full float32 unless `CUPY_TF32=1` is set before the first GEMM",
        "matrix-product library": "cuBLAS, chosen by heuristics at the call",
        "GPU memory at start":
            "memory pool, grows on demand; `cupy.get_default_memory_pool().free_all_blocks()`",
        "wait for the device": "`cupy.cuda.Device().synchronize()`, `Stream.synchronize()`, `Event.synchronize()`",
        "reads that wait (implicit syncs)": "`.get()`, `cupy.asnumpy()`, `float(a)`, `print(a)` (blocking by default)",
        "user streams": "`cupy.cuda.Stream()` is *blocking* by default: pass `non_blocking=True`",
        "events": "`cupy.cuda.Event(disable_timing=False)`: timing *on* by default",
        "host → device from numpy":
            "`cupy.asarray(a)`, `ndarray.set(a, stream=)`; pinned buffers from `cupyx.empty_pinned`",
        "device → host": "`.get(stream=, out=, blocking=)`, `cupy.asnumpy()`",
        "sync detector": "none reliable",
        "first call": "compiles elementwise/reduction kernels (cached on disk) and initializes cuBLAS",
    }

    @classmethod
    def rank_env(cls, host: str, ports: list[int]) -> dict[str, str]:
        # cupyx.distributed's TCP store for the NCCL id (harness/backends/dist.py)
        return {"CUPYX_DISTRIBUTED_HOST": host, "CUPYX_DISTRIBUTED_PORT": str(ports[0])}

    def _load(self) -> None:
        pin("CUPY_TF32", "0")  # like with like: no TF32 in float32 matmuls (read by cuBLAS calls)
        import cupy

        # CuPy 14 imports without a GPU and answers False here; CuPy 13 raised instead.
        try:
            ok = cupy.cuda.is_available()
        except Exception as e:  # noqa: BLE001 - any CUDA error here means "no usable GPU"
            raise Unavailable(f"CuPy needs a CUDA GPU: {type(e).__name__}: {e}") from None
        if not ok:
            raise Unavailable("CuPy needs a CUDA GPU: cupy.cuda.is_available() is False (no device or driver)")
        self.fw = cupy
        self.device = cupy.cuda.Device(self.ordinal)
        self.device.use()  # before the cap: set_limit caps the current device's pool
        self.on_gpu = self.has_events = self.has_streams = True
        self.nvtx_how = ("cupyx.profiler.time_range" if _nvtx_available(cupy)
                         else "none: this CuPy build has no NVTX (cupy.cuda.nvtx.available is False)")
        f = memory_fraction()
        pool = cupy.get_default_memory_pool()
        pool.set_limit(fraction=f)  # of the current device's total memory; past it, OutOfMemoryError
        self.memory_cap = {"fraction": f, "bytes": int(pool.get_limit()),
                           "how": "cupy.get_default_memory_pool().set_limit(fraction=) (arrays; not cuBLAS handles)"}

    def device_label(self) -> str:
        name = self.fw.cuda.runtime.getDeviceProperties(self.device.id)["name"].decode()
        return f"cuda:{self.device.id} ({name})"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self.fw.ndarray)

    def to_device(self, a: np.ndarray) -> Any:
        return self.fw.asarray(a)

    def _array_to_numpy(self, x: Any) -> np.ndarray:
        return self.fw.asnumpy(x)  # blocking by default

    device_digest = True  # _array_lanes below runs on the device

    def _array_lanes(self, x: Any) -> tuple[int, ...]:
        # uint32 arithmetic wraps (unsigned: defined in C++), sums in uint64 without overflow; kernels on
        # the current stream, after the call's synchronize
        cp = self.fw
        flat = cp.ascontiguousarray(x).reshape(-1)
        size = flat.itemsize
        if size % 4 and size not in (1, 2):
            raise ValueError(f"no words for an item of {size} bytes")
        words = flat.view({1: cp.uint8, 2: cp.uint16}.get(size, cp.uint32))
        sums = [0] * len(digest.MULTIPLIERS)
        for start in range(0, words.size, digest.CHUNK):
            w = words[start:start + digest.CHUNK].astype(cp.uint32)
            i1 = cp.arange(start + 1, start + 1 + w.size, dtype=cp.uint32)
            for n, m in enumerate(digest.MULTIPLIERS):
                sums[n] += int(cp.sum(digest.fmix32(w ^ (i1 * np.uint32(m))), dtype=cp.uint64))
        return tuple(s & digest.MASK for s in sums)

    def synchronize(self, outputs: Any = None) -> None:
        self.device.synchronize()  # cudaDeviceSynchronize: every stream

    def tiny_op(self) -> Any:
        x = self.fw.zeros(1, dtype=self.fw.float32)
        return lambda: x + 1

    def event_timer(self) -> EventTimer | None:
        return _CupyEvents(self.fw)

    def kernel_trace(self, body: Callable[[Annotate], None]) -> tuple[ChromeTrace, str]:
        # CuPy has no CUDA activity tracer of its own; torch.profiler's CUPTI records CuPy's kernels too
        return kineto_trace(body), "torch.profiler (CUPTI span) in CuPy's process"

    def timeline_recorder(self) -> TimelineRecorder:
        return _CupyTimeline(self.fw)

    def range(self, name: str) -> contextlib.AbstractContextManager[Any]:
        if not _nvtx_available(self.fw):
            return contextlib.nullcontext()
        from cupyx.profiler import time_range

        return time_range(name)  # NVTX push/pop (sync=False: no device synchronize of its own)

    def profiling(self) -> contextlib.AbstractContextManager[ProfilerOutput]:
        # CuPy's own profiling is NVTX ranges for an external tool (cupyx.profiler.time_range, and profile(),
        # which only starts and stops that tool's capture): Nsight Systems is its trace writer.
        return _no_profile("cupyx.profiler", "CuPy writes no trace of its own: its rows are NVTX ranges "
                                             "(cupyx.profiler.time_range), seen under nsys")

    # sync_counter: the base class's "no detector". CuPy has no reliable one (the old
    # cupyx.allow_synchronize is deprecated and saw only some syncs); scenarios say how they count.

    def clock_kernels(self) -> dict[str, Callable[[], Any]]:
        cp, n, big = self.fw, 4096, self.clock_elements()  # x, y, the sum and the one before it
        a, b = cp.random.standard_normal((n, n), dtype=cp.float32), cp.random.standard_normal((n, n), dtype=cp.float32)
        x, y = cp.random.standard_normal(big, dtype=cp.float32), cp.random.standard_normal(big, dtype=cp.float32)
        return {f"gemm_fp32_{n}": lambda: a @ b, f"add_{big >> 20}Mi_fp32": lambda: x + y,
                f"sum_{big >> 20}Mi_fp32": lambda: x.sum()}

    def own_benchmark(self, call: Any) -> OwnBenchmark | None:
        from cupyx.profiler import benchmark

        # gpu_times: CUDA events around each call, synchronized after each: calls timed alone.
        r = benchmark(call, n_repeat=200, n_warmup=5, max_duration=1.0)
        return {"tool": "cupyx.profiler.benchmark (gpu_times)", "tool_s": float(np.median(r.gpu_times[0])),
                "back_to_back_s": None}

    def ceilings(self) -> dict[str, float]:
        """Raw CUDA, no framework in between: the limits every framework is held against.

        hbm_Bps: device-to-device cudaMemcpyAsync of 1 GiB, bytes read + written per second.
        h2d_Bps / d2h_Bps: cudaMemcpyAsync of 256 MiB between pinned host memory and the device.
        fp32_flops: an 8192^3 float32 cuBLAS GEMM (TF32 off).
        Each is the median of 5 event-timed repeats after one warm-up.
        """
        cp = self.fw
        rt = cp.cuda.runtime
        stream = cp.cuda.get_current_stream()

        def median_s(fn: Any, reps: int = 5) -> float:
            return timed(cp, stream, fn, reps)

        big = 1 << 30
        src, dst = cp.empty(big, cp.uint8), cp.empty(big, cp.uint8)
        src.fill(7)
        hbm = 2 * big / median_s(lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, big,
                                                         rt.memcpyDeviceToDevice, stream.ptr))
        src = dst = None  # freed before the next allocation
        link = 1 << 28
        host = cp.cuda.alloc_pinned_memory(link)
        dev = cp.empty(link, cp.uint8)
        h2d = link / median_s(lambda: rt.memcpyAsync(dev.data.ptr, host.ptr, link, rt.memcpyHostToDevice, stream.ptr))
        d2h = link / median_s(lambda: rt.memcpyAsync(host.ptr, dev.data.ptr, link, rt.memcpyDeviceToHost, stream.ptr))
        host = dev = None
        n = 8192
        a = cp.random.standard_normal((n, n), dtype=cp.float32)
        flops = 2 * n**3 / median_s(lambda: a @ a, reps=3)
        a = None
        self.free_memory()
        return {"hbm_Bps": hbm, "h2d_Bps": h2d, "d2h_Bps": d2h, "fp32_flops": flops}

    def rank_ceilings(self, points: list[Params]) -> RankCeilings:
        """The raw NCCL time of each collective point (harness/backends/nccl_floor.py)."""
        return measure(self.fw, points)

    def free_memory(self) -> None:
        self.device.synchronize()
        self.fw.get_default_memory_pool().free_all_blocks()
        self.fw.get_default_pinned_memory_pool().free_all_blocks()

    def allocate(self, nbytes: int) -> Any:
        return self.fw.empty(nbytes, dtype=self.fw.uint8)

    def _is_oom_type(self, e: BaseException) -> bool:
        # The pool raises cupy.cuda.memory.OutOfMemoryError (a MemoryError); a cudaMalloc outside the
        # pool raises CUDARuntimeError with cudaErrorMemoryAllocation (2).
        rt = self.fw.cuda.runtime
        return isinstance(e, self.fw.cuda.memory.OutOfMemoryError) or (
            isinstance(e, rt.CUDARuntimeError) and getattr(e, "status", None) == 2)

    def env(self) -> Facts:
        rt = self.fw.cuda.runtime
        props = rt.getDeviceProperties(self.device.id)

        def ver(v: int) -> str:
            return f"{v // 1000}.{v % 1000 // 10}"

        return {
            "version": self.fw.__version__,
            "device": self.device_label(),
            "cuda_runtime": ver(rt.runtimeGetVersion()),
            "cuda_driver_api": ver(rt.driverGetVersion()),
            "gpu": props["name"].decode(),
            "compute_capability": f"{props['major']}.{props['minor']}",
            "memory_bytes": int(props["totalGlobalMem"]),
            "float32_matmul": "cuBLAS default (TF32 only with CUPY_TF32=1)",
            "memory_cap": self.memory_cap,
            "nvtx": self.nvtx_how,
        }


def _nvtx_available(cupy: Any) -> bool:
    """cupy.cuda.nvtx.available (CuPy 12+; cupy.cuda.nvtx_enabled before)."""
    nvtx = getattr(cupy.cuda, "nvtx", None)
    return bool(getattr(nvtx, "available", getattr(cupy.cuda, "nvtx_enabled", False)))


class _CupyEvents(EventTimer):
    def __init__(self, cupy: Any) -> None:
        self._cupy = cupy
        self._a = cupy.cuda.Event()  # timing is on by default in CuPy (off in torch)
        self._b = cupy.cuda.Event()

    def start(self) -> None:
        self._a.record()

    def stop(self) -> None:
        self._b.record()

    def elapsed_s(self) -> float:
        return self._cupy.cuda.get_elapsed_time(self._a, self._b) / 1e3


class _CupyTimeline(TimelineRecorder):
    """CUDA events recorded on the current stream at each mark, timed against one base event."""

    clock = "CUDA events (cupy.cuda.Event) recorded on each span's stream"

    def __init__(self, cupy: Any) -> None:
        self._cupy = cupy

    def start(self) -> None:
        self._base = self.mark()

    def mark(self) -> Any:
        ev = self._cupy.cuda.Event()  # timing on (CuPy's default)
        ev.record()  # on the current stream: completes when the stream reaches this point
        return ev

    def seconds(self, token: Any) -> float:
        return self._cupy.cuda.get_elapsed_time(self._base, token) / 1e3
