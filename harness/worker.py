"""One framework's side of a run: in this process (tests) or in a child process of its own (compare).

A child process per framework keeps a crash, a hang or an out-of-memory in one framework from taking
the others with it; the parent talks to it through a pipe and kills it at the request's timeout.
Requests and answers are plain picklable data (the handlers are in harness/handlers.py).

What went wrong becomes a row status: "error" (an exception), "oom" (the framework's own
out-of-memory error, classified by its backend; the worker is then replaced, the only sure way to
hand its memory back), "timeout" (no answer in time: killed) and "crashed" (the process died).
Tests plant each of these with $TRIPTYCH_FAULT (harness/faults.py), which only the child reads.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from typing import Any, Callable

from harness import backends, faults
from harness.handlers import HANDLERS, Progress


_STOPS = {signal.SIGINT, signal.SIGTERM}


class WorkerError(RuntimeError):
    """The request failed inside the worker; str(self) is a one-line summary, status "error" or "oom"."""

    def __init__(self, message: str, status: str = "error") -> None:
        super().__init__(message)
        self.status = status


class WorkerLost(RuntimeError):
    """The worker process died ("crashed") or hung ("timeout"); it is restarted for the next request."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


def failure(fw: str, e: BaseException) -> tuple[str, str]:
    """(status, one-line summary) of an exception raised while serving fw."""
    summary = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return ("oom" if backends.get(fw).is_out_of_memory(e) else "error"), summary


def _died(fw: str, code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (killed: by the kernel's out-of-memory killer?)" if name == "SIGKILL" else ""
        return f"{fw} worker died of {name}{hint}"
    return f"{fw} worker died (exit code {code})"


def _serve(conn: Any, fw: str | None = None) -> None:
    """Child process main loop: answer ("ok", result) / ("error", summary, traceback, status) per
    request; ("progress", text) messages may come before the answer."""
    # Ctrl-C (and a SIGTERM sent to the process group) reaches every worker too: the parent decides what
    # stops (it closes or kills us), so a worker neither dies under a request nor prints a traceback.
    # They were blocked from its start (ProcessWorker._start) until now: one that came meanwhile is dropped.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
    if fw is not None:
        faults.arm_worker(fw)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        op, args = msg
        try:
            faults.trigger(op, args[0], args[1] if len(args) > 1 else None, lambda: backends.get(args[0]).load())
            if op == "time":
                result = HANDLERS[op](*args, progress=lambda text: conn.send(("progress", text)))
            else:
                result = HANDLERS[op](*args)
            conn.send(("ok", result))
        except BaseException as e:  # noqa: BLE001 - report everything; the parent decides
            status, summary = failure(args[0], e)
            conn.send(("error", summary, traceback.format_exc(), status))


# -- the parent's handles ------------------------------------------------------------------------


class LocalWorker:
    """Runs requests in this process (tests, --isolation none)."""

    def __init__(self, fw: str) -> None:
        self.fw = fw

    def request(self, op: str, *args: Any, timeout: float | None = None,
                progress: Progress | None = None) -> Any:
        try:
            if op == "time":
                return HANDLERS[op](self.fw, *args, progress=progress or (lambda _t: None))
            return HANDLERS[op](self.fw, *args)
        except Exception as e:  # noqa: BLE001
            status, summary = failure(self.fw, e)
            raise WorkerError(summary, status) from e

    def close(self, grace: float = 0.0) -> None:
        pass

    kill = close


class ProcessWorker:
    """A spawned child process per framework (a fresh interpreter: nothing inherited from CUDA)."""

    def __init__(self, fw: str) -> None:
        self.fw = fw
        self._proc: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, self.fw), name=f"triptych-{self.fw}", daemon=True)
        # The child inherits this thread's signal mask: blocked, a Ctrl-C to the group while it imports
        # is not a KeyboardInterrupt traceback in it; _serve ignores both and unblocks them.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:
            self._proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        child.close()
        self._conn = parent

    def request(self, op: str, *args: Any, timeout: float | None = None,
                progress: Progress | None = None) -> Any:
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send((op, (self.fw, *args)))
        while True:
            try:
                ready = self._conn.poll(timeout)
            except (EOFError, OSError):
                ready = True
            if not ready:
                self.kill()
                raise WorkerLost(f"{self.fw} worker did not answer within {timeout:g} s (killed)", "timeout")
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                if self._proc is not None:
                    self._proc.join(5)  # the exit code is known only once it has been reaped
                code = self._proc.exitcode if self._proc is not None else None
                self.kill()
                raise WorkerLost(_died(self.fw, code), "crashed") from None
            if msg[0] == "progress":
                if progress is not None:
                    progress(msg[1])
                continue
            if msg[0] == "ok":
                return msg[1]
            status = msg[3] if len(msg) > 3 else "error"
            if status == "oom":
                self.close()  # a fresh process for the next request: all of this one's memory goes back
            raise WorkerError(msg[1], status)

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._conn = None

    def close(self, grace: float = 10.0) -> None:
        """Ask the child to leave, wait up to `grace` seconds (a run being stopped gives little), kill it."""
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(grace)
            except (OSError, BrokenPipeError):
                pass
        self.kill()


def make_worker(fw: str, isolation: str) -> LocalWorker | ProcessWorker:
    if isolation == "none":
        return LocalWorker(fw)
    if isolation == "process":
        return ProcessWorker(fw)
    raise ValueError(f"unknown isolation {isolation!r}")

