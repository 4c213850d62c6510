"""JAX: the GPU when there is one, else the CPU. No user streams or events: XLA owns them."""
from __future__ import annotations

import contextlib
import gc
import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from harness.backends import digest
from harness.backends.base import (KERNEL_RANGES, Annotate, Backend, ChromeTrace, Facts, ProfilerOutput, SyncCount, TimelineRecorder, TracedSpans,
                                   Unavailable, memory_fraction)
from harness.backends.xla import use_cublas_gemms
from harness.backends import nvtx


class JaxBackend(Backend):
    name = "jax"
    display_name = "JAX"
    short_name = "JAX"
    colour = "#4a6fd8"
    module = "jax"
    profiler = "jax.profiler's trace"
    keeps_pool = True
    rank_ports = 1
    _lanes: Any = None  # jax.jit(_lanes), made at the first digest
    porting = {
        "float32 matmul precision":
            "TF32-class on the GPU by default; the harness sets `jax_default_matmul_precision='highest'`, "
            "impls pass `precision=lax.Precision.HIGHEST`",
        "matrix-product library":
            "XLA:GPU autotunes Triton GEMMs at compile time (seconds for a training step's first call); "
            "the harness sets `XLA_FLAGS=--xla_gpu_enable_triton_gemm=false` so that JAX calls cuBLAS too (0.35 s)",
        "GPU memory at start":
            "preallocates 75% of the GPU at first use unless `XLA_PYTHON_CLIENT_PREALLOCATE=false` "
            "(set by the harness)",
        "wait for the device":
            "`x.block_until_ready()` / `jax.block_until_ready(tree)`: no device-wide synchronize, you wait on arrays",
        "reads that wait (implicit syncs)": "`float(x)`, `np.asarray(x)`, `print(x)`, `jax.device_get(x)`",
        "user streams": "none: XLA owns its streams; overlap comes from async dispatch and the scheduler",
        "events": "none: dependencies follow data flow",
        "host → device from numpy":
            "`jax.device_put(a, dev)` (asynchronous); a user's numpy array cannot be pinned: stage through "
            "`memory_kind='pinned_host'`",
        "device → host":
            "`np.asarray(x)`, `jax.device_get(x)`, `x.copy_to_host_async()`; "
            "`device_put(x, memory_kind='pinned_host')`",
        "sync detector": "`jax.transfer_guard_device_to_host('log')` (GPU only; does not see `block_until_ready`)",
        "first call": "traces and compiles every jitted function for each new shape/dtype",
    }

    @classmethod
    def rank_env(cls, host: str, ports: list[int]) -> dict[str, str]:
        # jax.distributed's coordinator (harness/backends/dist.py); it listens on MASTER_ADDR
        return {"TRIPTYCH_JAX_PORT": str(ports[0])}
    _nvtx: Any = None  # libnvToolsExt on a GPU, where found (harness/backends/nvtx.py)

    def _load(self) -> None:
        use_cublas_gemms()
        # JAX grabs 75% of the GPU at first use unless told otherwise; it shares the GPU with torch and
        # CuPy (in other processes, or in this one). Must be set before the backend initializes.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        # Without preallocation XLA's BFC allocator still stops at a fraction of the device (75% by
        # default): the harness's share instead. A fraction the user set (under either name) wins;
        # setting both names is an error in the CUDA plugin, so never add ours next to theirs.
        if not any(os.environ.get(v) for v in MEM_FRACTION_VARS):
            os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{memory_fraction():g}"
        import jax

        self.fw = jax
        # JAX uses TF32 (one bf16x3 pass or less) for float32 dots on GPU by default; torch does not.
        jax.config.update("jax_default_matmul_precision", "highest")
        cache = os.environ.get("TRIPTYCH_COMPILE_CACHE")  # a compare run's own (harness/workers/point_cache.py)
        if cache:
            jax.config.update("jax_compilation_cache_dir", cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        gpus = [d for d in _devices(jax, "gpu")]
        self.device = gpus[0] if gpus else jax.devices("cpu")[0]
        self.on_gpu = bool(gpus)
        self._nvtx = None
        if self.on_gpu:
            self._nvtx, where = nvtx.load()
            self.nvtx_how = (f"libnvToolsExt ({where}) beside jax.profiler.TraceAnnotation" if self._nvtx is not None
                             else f"none: {where}; jax.profiler.TraceAnnotation only (seen by jax.profiler, not nsys)")
            var = next(v for v in MEM_FRACTION_VARS if os.environ.get(v))
            try:
                fraction: float | None = float(os.environ[var])
            except ValueError:
                fraction = None
            stats = self.device.memory_stats() or {}
            self.memory_cap = {"fraction": fraction, "bytes": stats.get("bytes_limit"),
                               "how": f"{var} (XLA's BFC allocator limit; bytes from memory_stats())"}

    def device_label(self) -> str:
        if self.on_gpu:
            return f"{self.device.platform}:{self.device.id} ({self.device.device_kind})"
        return "cpu (no GPU backend: JAX runs on the CPU)"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self.fw.Array)

    def to_device(self, a: np.ndarray) -> Any:
        return self.fw.device_put(a, self.device)

    def _array_to_numpy(self, x: Any) -> np.ndarray:
        if not x.is_fully_addressable:  # a rank's global array (a shard_map's result): this process's shard
            x = x.addressable_data(0)  # one device per process; a view, no program dispatched
        return np.asarray(self.fw.device_get(x))

    device_digest = True  # _array_lanes below runs on the device

    def _on_device(self, x: Any) -> bool:
        return getattr(x.sharding, "memory_kind", None) in (None, "device")  # not pinned_host / unpinned_host

    def _describe(self, x: Any) -> tuple[str, tuple[int, ...], int]:
        x = x if x.is_fully_addressable else x.addressable_data(0)  # what _array_to_numpy returns
        return str(x.dtype), tuple(x.shape), int(x.nbytes)

    def _array_lanes(self, x: Any) -> tuple[int, ...]:
        x = x if x.is_fully_addressable else x.addressable_data(0)
        if self._lanes is None:
            self._lanes = self.fw.jit(_lanes)  # one program a shape and dtype: the iota and products fuse into the sums
        return tuple(int(h) for h in self._lanes(x))

    def synchronize(self, outputs: Any = None) -> None:
        # There is no device-wide synchronize in JAX: wait for everything the call returned.
        if outputs is not None:
            try:
                self.fw.block_until_ready(outputs)
            except ValueError:  # a dict whose keys do not sort (an impl's state, never a call's outputs)
                self.fw.block_until_ready(list(_arrays(outputs)))

    def tiny_op(self) -> Any:
        x = self.fw.device_put(self.fw.numpy.zeros(1, dtype=self.fw.numpy.float32), self.device)
        add = self.fw.jit(lambda a: a + 1)  # compiled once, at the first call (the untimed one)
        return lambda: add(x)

    def sync_counter(self) -> contextlib.AbstractContextManager[SyncCount]:
        return self._count_transfers()

    @contextlib.contextmanager
    def _count_transfers(self) -> Iterator[SyncCount]:
        """Count device-to-host transfers (each blocks the host) with JAX's transfer guard.

        'log_explicit' logs implicit (float(x), np.asarray(x)) and explicit (jax.device_get)
        transfers; the log lines go to the C++ stderr, so fd 2 is captured for the region.
        """
        result = SyncCount(method="jax.transfer_guard_device_to_host('log_explicit')")
        if not self.on_gpu:
            result.why = "the transfer guard does not fire on the CPU backend (its arrays are host memory)"
            yield result
            return
        with _captured_fd2() as captured, self.fw.transfer_guard_device_to_host("log_explicit"):
            yield result
        lines = captured["text"].splitlines(keepends=True)
        result.count = sum("device-to-host transfer" in line for line in lines)
        sys.stderr.write("".join(line for line in lines if "device-to-host transfer" not in line))

    def timeline_recorder(self) -> TimelineRecorder:
        return _JaxTimeline(self.fw)

    @contextlib.contextmanager
    def range(self, name: str) -> Iterator[None]:
        # TraceAnnotation: the name in jax.profiler's trace. It is no NVTX range (harness/backends/nvtx.py):
        # for nsys, the NVTX library's own push and pop.
        with self.fw.profiler.TraceAnnotation(name):
            if self._nvtx is not None:
                self._nvtx.nvtxRangePushA(name.encode("ascii", "replace"))
            try:
                yield
            finally:
                if self._nvtx is not None:
                    self._nvtx.nvtxRangePop()

    @contextlib.contextmanager
    def profiling(self) -> Iterator[ProfilerOutput]:
        got: ProfilerOutput = {"tool": "jax.profiler (trace.json.gz: ui.perfetto.dev; xplane.pb: XProf, TensorBoard)"}
        folder = tempfile.mkdtemp(prefix="triptych-jax-profile-")
        try:
            with self.fw.profiler.trace(folder):
                yield got
            files = {suffix: found[-1].read_bytes() for suffix in (".trace.json.gz", ".xplane.pb")
                     if (found := sorted(Path(folder).glob(f"plugins/profile/*/*{suffix}")))}
            if files:
                got["files"] = files
            else:
                got["why"] = "jax.profiler wrote no trace file"
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def kernel_trace(self, body: Callable[[Annotate], None]) -> tuple[ChromeTrace, str]:
        # jax.profiler collects the device's activity through CUPTI on a GPU (XLA's ops on the CPU); each
        # TraceAnnotation is held on the host's clock beside the device's intervals
        os.environ.setdefault("TF_GPU_CUPTI_FORCE_CONCURRENT_KERNEL", "1")  # else CUPTI may serialize them
        source = "jax.profiler (CUPTI span)" if self.on_gpu else "jax.profiler (XLA:CPU ops span)"
        opts = self._lean_profile()
        session = self._session(opts)
        if session is not None:
            # the session's XSpace, read in memory: no trace.json written, gzipped and parsed back (what that cost a
            # request: results/journal.md)
            try:
                try:
                    body(self.fw.profiler.TraceAnnotation)
                except BaseException:
                    with contextlib.suppress(Exception):  # the body's error is the one to tell, not the stop's
                        session.stop()
                    raise
                space = session.stop()
            finally:
                self._unregister()
            return chrome_trace(self.fw.profiler.ProfileData.from_serialized_xspace(space), KERNEL_RANGES), source
        # the public path: the export's trace.json keeps the earliest 1,000,000 events and drops the rest unsaid,
        # and a request's rows share one trace, so that a row cut at its end would read low
        os.environ.setdefault("TF_PROFILER_TRACE_VIEWER_MAX_EVENTS", "100000000")
        folder = tempfile.mkdtemp(prefix="triptych-kernel-clock-")
        try:
            with self.fw.profiler.trace(folder, **({"profiler_options": opts} if opts is not None else {})):
                body(self.fw.profiler.TraceAnnotation)
            files = sorted(Path(folder).glob("plugins/profile/*/*.trace.json.gz"))
            if not files:
                raise Unavailable("jax.profiler wrote no *.trace.json.gz")
            with gzip.open(files[-1], "rt") as f:
                return json.load(f), source
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _session(self, opts: Any) -> Any:
        """A started profiler session whose stop() hands back its XSpace, where this JAX has one and ProfileData
        to read it (jax.profiler's own stop_and_get_fdo_profile does the same); None: the public
        jax.profiler.trace, which writes its trace to a folder. jaxlib's session does not refuse a second one
        (that fails only at its stop, after the whole request), so jax.profiler's own state decides: a trace of
        jax.profiler running raises Unavailable, and this session is registered there until _unregister, so that
        a jax.profiler.start_trace meanwhile raises as it would beside one of its own."""
        try:
            from jax._src import profiler as state  # noqa: PLC0415 - jax.profiler's own bookkeeping, not public API
            from jax._src.lib import _profiler  # noqa: PLC0415 - jaxlib's binding, not public API
        except ImportError:
            return None
        if (not hasattr(self.fw.profiler, "ProfileData") or not hasattr(_profiler, "ProfilerSession")
                or not hasattr(state, "_profile_state")):
            return None
        self.fw.devices()  # the backends exist before the session, as start_trace makes sure
        with state._profile_state.lock:
            if state._profile_state.profile_session is not None:
                raise Unavailable("a jax.profiler trace is already running in this process")
            session = _profiler.ProfilerSession(opts) if opts is not None else _profiler.ProfilerSession()
            state._profile_state.profile_session = session
        return session

    @staticmethod
    def _unregister() -> None:
        """jax.profiler's state told that _session's session has ended."""
        from jax._src import profiler as state  # noqa: PLC0415 - as in _session

        with state._profile_state.lock:
            state._profile_state.profile_session = None

    def _lean_profile(self) -> Any:
        """jax.profiler's options for a kernel clock: no Python function tracer (on by default: every call of a
        traced run's Python), host events at level 1 (TraceAnnotation's own level; XLA's runtime events are at 2)
        and no HLO protos in the trace; None (the defaults) where this JAX has no ProfileOptions."""
        make = getattr(self.fw.profiler, "ProfileOptions", None)
        if make is None:
            return None
        opts = make()
        for name, value in (("python_tracer_level", 0), ("host_tracer_level", 1), ("enable_hlo_proto", False)):
            if hasattr(opts, name):  # a JAX without one of them keeps its default there
                setattr(opts, name, value)
        return opts

    def clock_kernels(self) -> dict[str, Callable[[], Any]]:
        jax, jnp = self.fw, self.fw.numpy
        n, big = (4096 if self.on_gpu else 256), self.clock_elements()  # x, y, the sum and the one before it
        k = jax.random.split(jax.random.key(0), 4)
        a, b = (jax.device_put(jax.random.normal(i, (n, n)), self.device) for i in k[:2])
        x, y = (jax.device_put(jax.random.normal(i, (big,)), self.device) for i in k[2:])
        mm = jax.jit(lambda a, b: jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST))
        add, total = jax.jit(jnp.add), jax.jit(jnp.sum)
        return {f"gemm_fp32_{n}": lambda: mm(a, b), f"add_{big >> 20}Mi_fp32": lambda: add(x, y),
                f"sum_{big >> 20}Mi_fp32": lambda: total(x)}

    # own_benchmark: none. JAX has no benchmark tool of its own; its docs time with a wall clock
    # around block_until_ready, which is what the harness does.

    def free_memory(self) -> None:
        # Device buffers go with their last reference: collect the cycles that hold some. Compiled
        # executables stay cached (clearing them here made every variant and every equivalence
        # example recompile, Pallas kernels included, for no memory worth having back).
        gc.collect()

    def allocate(self, nbytes: int) -> Any:
        x = self.fw.numpy.zeros((nbytes,), dtype=self.fw.numpy.uint8, device=self.device)
        return x.block_until_ready()  # an allocation failure may surface only here

    # is_out_of_memory: JAX raises JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory ...") on the GPU
    # and the CPU alike; the base class's words catch it.

    def env(self) -> Facts:
        import jaxlib

        info: Facts = {
            "version": self.fw.__version__,
            "jaxlib": jaxlib.__version__,
            "device": self.device_label(),
            "backend": self.fw.default_backend(),
            "float32_matmul": "highest (jax_default_matmul_precision)",
            "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true"),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "memory_cap": self.memory_cap,
            "nvtx": self.nvtx_how,
        }
        if self.on_gpu:
            info["gpu"] = self.device.device_kind
            info["memory_kinds"] = [m.kind for m in self.device.addressable_memories()]
        return info


class _JaxTimeline(TimelineRecorder):
    """JAX has no user streams or events to mark: the traced run goes under jax.profiler, and what ran
    when is read back from the trace (per XLA stream on a GPU, per XLA worker thread on the CPU)."""

    clock = "jax.profiler trace"

    def __init__(self, jax: Any) -> None:
        self._jax = jax

    def start(self) -> None:
        # Without this, CUPTI may serialize concurrent kernels in the trace (read when tracing starts).
        os.environ.setdefault("TF_GPU_CUPTI_FORCE_CONCURRENT_KERNEL", "1")
        self._dir = tempfile.mkdtemp(prefix="triptych-jax-trace-")
        self._jax.profiler.start_trace(self._dir)

    def mark(self) -> Any:
        return None  # nothing to record on the host: the profiler sees the device

    def finish(self, spans: list[tuple[str, str, Any, Any]]) -> TracedSpans:
        try:
            self._jax.profiler.stop_trace()
            files = sorted(Path(self._dir).glob("plugins/profile/*/*.trace.json.gz"))
            if not files:
                return {"clock": self.clock, "spans": [], "why": "jax.profiler wrote no *.trace.json.gz"}
            with gzip.open(files[-1], "rt") as f:
                return spans_from_chrome_trace(json.load(f))
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


MEM_FRACTION_VARS = ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION")  # old name, new name


def _devices(jax: Any, platform: str) -> list[Any]:
    try:
        return jax.devices(platform)
    except RuntimeError:  # "Unknown backend gpu" / no CUDA plugin or device
        return []


@contextlib.contextmanager
def _captured_fd2() -> Iterator[dict[str, str]]:
    box: dict[str, str] = {"text": ""}
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield box
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box["text"] = tmp.read().decode(errors="replace")


def chrome_trace(data: Any, keep: str) -> ChromeTrace:
    """A jax.profiler.ProfileData (an XSpace read in memory) as the Chrome trace that jax.profiler's export would
    have written, in the parts harness/measure/kernel_clock.py reads: a process a plane (process_name its
    name, e.g. /device:GPU:0), a thread a line (thread_name its name, e.g. a stream's), a complete event ("X",
    ts and dur in microseconds on the session's one clock) an event. Of the host's events only the ranges named
    keep + ... are kept, and, where no plane is a GPU's, XLA:CPU's ops (their hlo_op stat): a request's warm runs
    leave hundreds of thousands of events, and one Python object each of all of them was most of the read."""
    planes = list(data.planes)
    gpu = any(p.name.startswith("/device:GPU") for p in planes)
    events: list[dict[str, Any]] = []
    for pid, plane in enumerate(planes):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": plane.name}})
        device = plane.name.startswith("/device:GPU")
        for tid, line in enumerate(plane.lines):
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": line.name}})
            if device and "Stream" not in line.name:
                continue
            for e in line.events:
                name = e.name
                if device or name.startswith(keep):
                    args = {}
                elif not gpu and "hlo_op" in (args := dict(e.stats)):
                    args = {"hlo_op": args["hlo_op"]}
                else:
                    continue
                events.append({"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": e.start_ns / 1e3,
                               "dur": e.duration_ns / 1e3, "args": args})
    return {"traceEvents": events}


def spans_from_chrome_trace(trace: ChromeTrace) -> TracedSpans:
    """Device spans per stream from a jax.profiler trace: on a GPU the '/device:GPU:N' process's
    'Stream #...' threads; without one, the XLA ops ('hlo_op' events) on the CPU client's threads."""
    events = trace.get("traceEvents", [])
    procs = {e.get("pid"): e["args"].get("name", "") for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e.get("pid"), e.get("tid")): e["args"].get("name", "") for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    work = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    gpu = {pid for pid, name in procs.items() if name.startswith("/device:GPU")}
    picked = [(threads.get((e["pid"], e["tid"]), ""), e) for e in work if e["pid"] in gpu]
    picked = [(lane, e) for lane, e in picked if "Stream" in lane]
    if picked:
        clock = "jax.profiler device activity (CUPTI), one lane per XLA stream; t=0 at the first device op"
    else:
        picked = [(threads.get((e["pid"], e["tid"]), "thread"), e) for e in work
                  if isinstance(e.get("args"), dict) and "hlo_op" in e["args"]]
        names: dict[str, str] = {}
        picked = [(names.setdefault(lane, f"XLA CPU thread {len(names) + 1}"), e) for lane, e in picked]
        clock = ("jax.profiler on the CPU: XLA ops on the CPU client's worker threads (the CPU has no streams); "
                 "t=0 at the first op")
    if not picked:
        seen = sorted(set(procs.values()))
        return {"clock": "jax.profiler trace", "spans": [],
                "why": f"the trace holds no device streams and no XLA ops (processes: {', '.join(seen) or 'none'})"}
    t0 = min(float(e["ts"]) for _, e in picked)
    spans = []
    for lane, e in sorted(picked, key=lambda p: float(p[1]["ts"])):
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        op = str(args.get("hlo_op") or e.get("name", "?"))[:60]
        start = (float(e["ts"]) - t0) / 1e6
        spans.append([lane, op, start, start + float(e["dur"]) / 1e6])
    return {"clock": clock, "spans": spans, "why": ""}


def _lanes(x: Any) -> list[Any]:
    """harness/backends/digest.py lanes() of x, traced: uint32 arithmetic wraps in XLA, and the sum mod
    2^32 is the definition's. JAX without x64 has no 8-byte items but complex64, whose parts it cannot
    bitcast: refused."""
    import jax.numpy as jnp
    from jax import lax

    flat = x.reshape(-1)
    size = flat.dtype.itemsize
    if flat.dtype == jnp.bool_:
        w = flat.astype(jnp.uint32)
    elif size == 4:
        w = lax.bitcast_convert_type(flat, jnp.uint32)
    elif size in (1, 2) and not jnp.issubdtype(flat.dtype, jnp.complexfloating):
        w = lax.bitcast_convert_type(flat, jnp.uint8 if size == 1 else jnp.uint16).astype(jnp.uint32)
    else:
        raise ValueError(f"no words for {flat.dtype} in JAX's digest")
    i1 = lax.iota(jnp.uint32, w.size) + jnp.uint32(1)
    return [jnp.sum(digest.fmix32(w ^ (i1 * jnp.uint32(m))), dtype=jnp.uint32) for m in digest.MULTIPLIERS]


def _arrays(x: Any) -> Any:
    """The arrays in nested dicts, lists and tuples, found without sorting a dict's keys (a pytree would)."""
    if isinstance(x, dict):
        for v in x.values():
            yield from _arrays(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _arrays(v)
    elif hasattr(x, "block_until_ready"):
        yield x
