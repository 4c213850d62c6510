"""One framework's side of a run: in this process (tests) or in a child process of its own (compare).

A child process per framework keeps a crash, a hang or an out-of-memory in one framework from taking
the others with it; the parent talks to it through a pipe (harness/workers/protocol.py: typed requests and
replies, the one serve loop) and kills it at the request's timeout. The handlers are in
harness/workers/handlers.py.

A failure is a row status (protocol.py): "error", "oom" (the worker is then replaced, the only sure
way to hand its memory back), "timeout" and "crashed". Tests plant each of these with
$TRIPTYCH_FAULT (harness/workers/faults.py), which only the child reads.
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import multiprocessing.util  # registers multiprocessing's exit handler before _kill_the_rest below (LIFO)
import signal
import weakref
from abc import ABC, abstractmethod
from multiprocessing import resource_tracker
from typing import Any

from harness.workers import bytecode, protocol
from harness.workers.handlers import answer
from harness.workers.protocol import (STOPS, Notes, Progress, Request, Turn, TurnTaker, WorkerError, WorkerLost, died,
                                      failure)
from scenarios.spec import Params

__all__ = ["Handle", "LocalWorker", "ProcessWorker", "Progress", "WorkerError", "WorkerLost", "failure", "make_worker"]


_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()  # every worker process started here


@atexit.register
def _kill_the_rest() -> None:
    """Worker processes still alive as the interpreter exits (one started by a thread while a stop was
    being honoured) are killed: multiprocessing's own exit handler would send them SIGTERM, which a worker
    ignores, and then wait for them for ever."""
    for proc in list(_LIVE):
        try:
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        except (OSError, ValueError, AssertionError):
            pass


def _serve(conn: Any, fw: str) -> None:
    """An interleaved side's worker's main (harness/run/interleave.py _CHILD, which keeps compiled modules
    first); a spawned worker starts at bytecode.serve, which does the same."""
    protocol.serve(conn, fw, answer)


class Handle(ABC):
    """What the parent's handles share: request() builds the typed Request that ask() sends; each kind
    of handle (in this process, a child process, a rank group) says how it is sent."""

    fw: str

    def request(self, op: str, scenario: str | None = None, params: Params | None = None,
                timing: Any = None, first: bool = True, *, seed: int | None = None, points: Any = (),
                variants: tuple[str, ...] = (), timeout: float | None = None, progress: Progress | None = None,
                turn: TurnTaker | None = None) -> Any:
        """Ask this framework's worker; params are a point as the scenario reads it, its seed (if not
        given as seed) among them (protocol.Request.make). turn: a time request's timed loops take turns
        with another request's, turn(variant, stop) answering each (harness/workers/turns.py)."""
        req = Request.make(op, self.fw, scenario, params, timing, first, seed=seed, points=points, variants=variants,
                           turns=turn is not None)
        return self.ask(req, timeout=timeout, progress=progress, turn=turn)

    @abstractmethod
    def ask(self, req: Request, timeout: float | None = None, progress: Progress | None = None,
            turn: TurnTaker | None = None) -> Any:
        """The worker's answer to req; WorkerError or WorkerLost where it failed."""


# -- the parent's handles ------------------------------------------------------------------------


class LocalWorker(Handle):
    """Runs requests in this process (tests, --isolation none); no planted fault reaches it."""

    def __init__(self, fw: str) -> None:
        self.fw = fw

    def ask(self, req: Request, timeout: float | None = None, progress: Progress | None = None,
            turn: TurnTaker | None = None) -> Any:
        try:
            return answer(req, Notes(progress or (lambda _t: None), turn))
        except Exception as e:  # noqa: BLE001
            status, summary = failure(self.fw, e)
            raise WorkerError(summary, status) from e

    def close(self, grace: float = 0.0) -> None:
        pass

    kill = stop = close


class ProcessWorker(Handle):
    """A spawned child process per framework (a fresh interpreter: nothing inherited from CUDA)."""

    def __init__(self, fw: str) -> None:
        self.fw = fw
        self._proc: Any = None
        self._conn: Any = None
        self._stopped = False  # stop(): no process starts any more (a thread may be about to start one)

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=bytecode.serve, args=(child, self.fw), name=f"triptych-{self.fw}", daemon=True)
        # The child inherits this thread's signal mask: blocked, a Ctrl-C to the group while it imports
        # is not a KeyboardInterrupt traceback in it; _serve ignores the stop signals and unblocks them.
        # multiprocessing's resource tracker, started by the first start, unblocks SIGINT and SIGTERM in the
        # starting thread once it is up: started first, so that it cannot undo the mask this child inherits.
        resource_tracker.ensure_running()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        try:
            proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        _LIVE.add(proc)
        child.close()
        self._proc, self._conn = proc, parent  # started: kill() from another thread now reaches it

    def ask(self, req: Request, timeout: float | None = None, progress: Progress | None = None,
            turn: TurnTaker | None = None) -> Any:
        if self._proc is None or not self._proc.is_alive():
            if self._stopped:
                raise WorkerLost(f"{self.fw} worker: the run was stopped", "crashed")
            self._start()
            if self._stopped:  # stopped while this thread started it
                self.kill()
                raise WorkerLost(f"{self.fw} worker: the run was stopped", "crashed")
        self._conn.send(req.to_dict())
        while True:
            conn = self._conn  # once: kill() from another thread (a stop) sets it to None
            if conn is None:
                raise WorkerLost(f"{self.fw} worker: killed while it served a request (the run was stopped)",
                                 "crashed")
            try:
                ready = conn.poll(timeout)
            except (EOFError, OSError):
                ready = True
            if not ready:
                self.kill()
                raise WorkerLost(f"{self.fw} worker did not answer within {timeout:g} s (killed)", "timeout")
            try:
                msg = protocol.receive(conn)
            except (EOFError, OSError):
                if self._proc is not None:
                    self._proc.join(5)  # the exit code is known only once it has been reaped
                code = self._proc.exitcode if self._proc is not None else None
                self.kill()
                raise WorkerLost(died(self.fw, code), "crashed") from None
            if isinstance(msg, str):
                if progress is not None:
                    progress(msg)
                continue
            if isinstance(msg, Turn):  # the worker waits for the answer: the other request's turn comes first
                go = msg.stop if turn is None else turn(msg.variant, msg.stop)
                try:
                    conn.send({"go": go})
                except OSError:  # killed meanwhile (a stop): its connection is closed
                    raise WorkerLost(f"{self.fw} worker: killed while it waited for its turn", "crashed") from None
                continue
            if msg.status == "oom":
                self.close()  # a fresh process for the next request: all of this one's memory goes back
            return msg.result()

    def kill(self) -> None:
        proc, self._proc, self._conn = self._proc, None, None
        if proc is not None:
            proc.kill()
            proc.join(5)

    def stop(self) -> None:
        """Killed for good, from any thread: a request in flight fails, none starts a process again."""
        self._stopped = True
        self.kill()

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

