"""Fresh child processes, for what only a new interpreter can show: a framework's real defaults (JAX's
75% pool, read once when its backend starts) and its cold start (import, context, first compile).

The harness's workers run with its settings pinned (JAX's pool capped, no preallocation); a child gets
a copy of the environment with the overrides it asks to drop removed. A child module prints one JSON
object as the last line of its stdout, timing its phases inside itself; a child that fails, prints no
JSON or says {"error": ...} raises ChildError with its stderr's tail. Nothing here imports a framework.

A child runs in a session of its own, and its whole process group is killed when it ends, times out or
its parent gives up on it: what it started (torch.compile's pool of compile workers, one per CPU) goes
with it. A child module calls as_child() first: the workers ignore the stop signals (SIGINT, SIGTERM,
SIGHUP, SIGQUIT), which their children would inherit, and a child whose worker is killed outright is
killed with it (what the child itself started is then left to its own end: torch's compile workers exit
once their parent is gone).
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from harness.backends import pins

ROOT = Path(__file__).resolve().parents[2]

PARENT_ENV = "TRIPTYCH_CHILD_PARENT"  # the pid of the process that started the child (as_child)

# The memory settings the harness (harness/backends/jax_backend.py, the test suite) pins for its own
# processes: a child that measures the frameworks' defaults runs without them.
MEMORY_OVERRIDES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION",
                    "XLA_PYTHON_CLIENT_ALLOCATOR", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
                    "CUPY_GPU_MEMORY_LIMIT")


class ChildError(RuntimeError):
    """A child process failed; the message carries its exit status and the end of its stderr."""


def child_env(drop: Iterable[str] = (), unpinned: bool = False, **extra: str) -> dict[str, str]:
    """This process's environment minus `drop`, plus `extra`, with the repository importable; unpinned: with
    the harness's like-with-like pins (harness/backends/pins.py) back at the user's values, as a user's own
    process would have them."""
    base = pins.unpinned() if unpinned else os.environ
    env = {k: v for k, v in base.items() if k not in set(drop)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def run_child(module: str, args: Sequence[str] = (), env: dict[str, str] | None = None,
              timeout: float = 600.0) -> dict[str, Any]:
    """Run `python -m module *args` to its end; its last stdout line parsed as JSON, plus "process_s"
    (spawn to exit, measured here: the interpreter's own start-up included)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out, \
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        # files, not pipes: a process the child started and left running (an idle compile pool) would hold
        # a pipe open, and reading it to its end would wait for that process
        env = dict(env if env is not None else child_env(), **{PARENT_ENV: str(os.getpid())})
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=env, stdout=out,
                             stderr=err, text=True, start_new_session=True)
        process_s = None
        try:
            _exited(p, timeout)
            process_s = time.perf_counter() - t0
        except subprocess.TimeoutExpired:
            pass
        finally:  # also when the worker is stopped meanwhile: the child and what it started go first
            _kill_group(p)  # what outlived the child (an idle compile pool) holds memory the next child needs
            p.wait()  # reaped only now: until then the group's id cannot be anyone else's
        if process_s is None:
            err.seek(0)
            raise ChildError(f"{module} {' '.join(map(str, args))}: no answer within {timeout:g} s (its process "
                             f"group killed); stderr: ...{err.read()[-1500:]}")
        out.seek(0)
        err.seek(0)
        r = subprocess.CompletedProcess(p.args, p.returncode, out.read(), err.read())
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    try:
        got = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        got = None
    if r.returncode != 0 or not isinstance(got, dict) or "error" in got:
        said = got.get("error") if isinstance(got, dict) else None
        raise ChildError(f"{module} {' '.join(map(str, args))}: exit status {r.returncode}"
                         + (f", {said}" if said else "") + f"; stderr: ...{r.stderr[-1500:]}")
    return got | {"process_s": process_s}


def _exited(p: subprocess.Popen, timeout: float) -> None:
    """Return when the child has exited, left unreaped (so that its process group's id stays its own until
    the group is killed); TimeoutExpired after timeout s. Linux: on a pidfd, the moment it exits
    (Popen.wait(timeout) looks at intervals of up to 50 ms, which a cold start's process_s would carry)."""
    try:
        fd = os.pidfd_open(p.pid)
    except (AttributeError, OSError):  # not Linux 5.3+: poll, and reap
        p.wait(timeout=timeout)
        return
    try:
        if not select.select([fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(p.args, timeout)
    finally:
        os.close(fd)


def _kill_group(p: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)  # the child's session: its process group bears its pid


def as_child() -> None:
    """The child's side, first thing: the stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) as a fresh
    interpreter has them (the worker that starts it ignores them, and an ignored signal stays ignored in
    its children), and on Linux a SIGKILL when the worker dies, so that no child outlives a worker the
    harness killed."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(s, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        parent = os.environ.get(PARENT_ENV)
        if parent and os.getppid() != int(parent):  # the worker died before the line above: nobody waits
            os._exit(1)


def say(result: dict[str, Any]) -> None:
    """The child's side: its result as the last stdout line."""
    sys.stdout.flush()
    print(json.dumps(result), flush=True)


def count_files(folder: str | Path) -> int:
    return sum(1 for p in Path(folder).rglob("*") if p.is_file()) if Path(folder).exists() else 0


def fresh_dir(parent: str | Path, name: str) -> Path:
    """An empty folder `name` under `parent` (removed first if it was there)."""
    d = Path(parent) / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def nvidia_smi_index(ordinal: int) -> str:
    """nvidia-smi's name for CUDA device `ordinal` of this process: CUDA_VISIBLE_DEVICES's entry (an index
    or a UUID) where it is set. CUDA orders devices fastest first and nvidia-smi by PCI bus: the same on
    a machine of identical GPUs."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[ordinal] if ordinal < len(visible) else str(ordinal)


def driver_memory(ordinal: int = 0) -> dict[str, Any] | None:
    """The driver's count of the device's memory, {"used": bytes, "total": bytes, "how": ...}, by NVML
    (pynvml) where importable, else nvidia-smi; None where neither answers (no GPU). Device-wide: inside a
    container NVML cannot name this process's pid, so a process's share is a difference of two readings
    taken while the other processes on the device are idle."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(int(nvidia_smi_index(ordinal)))
            m = pynvml.nvmlDeviceGetMemoryInfo(h)
            return {"used": int(m.used), "total": int(m.total), "how": "NVML nvmlDeviceGetMemoryInfo"}
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - not installed, or no NVML here: try the command line
        pass
    try:
        r = subprocess.run(["nvidia-smi", "-i", nvidia_smi_index(ordinal), "--query-gpu=memory.used,memory.total",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0 or not r.stdout.strip():
        return None
    used, total = (int(float(v)) << 20 for v in r.stdout.strip().splitlines()[0].split(","))  # MiB
    return {"used": used, "total": total, "how": "nvidia-smi --query-gpu=memory.used (MiB)"}


_SAID: set[tuple[str, str]] = set()  # (tag, key) whose error text this worker has written to its log


def emit_numbers(got: dict[str, Any], tag: str) -> dict[str, Any]:
    """Emit a child's numbers as the row's metrics; its error texts (keys ending in _error: the error a
    hazard makes, which is the finding) go to the worker's log under `tag`, once per worker and key, since
    rows carry numbers only and every repeat of the hazard makes the same error."""
    from harness.measure.metrics import emit

    for k, v in got.items():
        if k.endswith("_error"):
            if (tag, k) not in _SAID:
                _SAID.add((tag, k))
                print(f"{tag}: the error the hazard makes, as expected (said once): {v}", file=sys.stderr)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            emit(k, v)
    return got
