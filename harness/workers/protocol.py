"""The worker protocol: typed requests and replies, and the one serve loop of every worker child.

A process worker (harness/workers/worker.py) and a rank process (harness/workers/rank_main.py) serve the same loop
over a multiprocessing connection; the parent sends a Request and reads back progress notes, then
one Reply. On the wire each is a dict of plain data (Request.to_dict, Reply.to_dict); a reply's value
is whatever the handler returned (rows, numpy outputs). None, or the parent closing its end, ends the
loop. Why typed: the op's arguments are named fields, and the seed is one of them, not a key that
each sender must remember to put into params.

What went wrong becomes a status: "error" (an exception), "oom" (the framework's own out-of-memory
error, classified by its backend), "timeout" (no answer in time: the parent kills the worker) and
"crashed" (the process died). The child ignores every stop signal (harness/workers/signals.py: Ctrl-C,
SIGTERM, a closed terminal's SIGHUP, SIGQUIT): the parent decides what stops. A parent that is gone (its end
of the pipe closed, a send that breaks, or, while a request runs, this process handed to another parent)
ends the child quietly, and the run's cache folders (harness/workers/point_cache.py), which that parent can
no longer remove, go with the children that find it gone.
"""
from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, NotRequired, TypedDict

import numpy as np

from harness import backends
from harness.backends.base import Facts
from harness.results.model import Json
from harness.workers import faults, point_cache
from harness.workers.signals import SIGNALS
from harness.measure.timing import TimingConfig
from scenarios.spec import Params

# Free-form by nature: a message on a worker's pipe, plain data: a Request's fields, {"reply": a Reply's fields}
# or {"progress": text} (what an older tree's worker reads and writes); while a request takes turns, {"turn": a
# Turn's fields} from the worker and {"go": stop} back
Message = dict[str, Any]


class Hello(TypedDict):
    """A worker's hello (harness/workers/handlers.py hello; a rank group's, harness/workers/rank_main.py): available or
    why not, on a GPU or not, the backend's own facts (Backend.env), its process id; subsets: a time request may
    name its variants; kernel_optional: its timing config may leave the kernel clock out (an older tree's
    worker says neither)."""

    available: bool
    why: str
    on_gpu: bool
    env: Facts
    pid: NotRequired[int]  # none where the runner says the worker failed to start
    subsets: NotRequired[bool]
    kernel_optional: NotRequired[bool]
    turns: NotRequired[bool]  # a time request may take turns with another worker's (Request.turns)
    # its timing config may ask for the host's loop before each repeat (TimingConfig.host_beside): which loop it times
    host_beside: NotRequired[str]
    timing: NotRequired[str]  # the $TRIPTYCH_TIMING it times on, where it has one (harness/measure/timing.py overridden)
    timing_fields: NotRequired[list[str]]  # the settings it takes there (timing.OVERRIDABLE; an older tree's: none)
    status: NotRequired[str]  # the runner's, where the worker failed to start: how (model.FrameworkEnv.status)


class Answer(TypedDict, total=False):
    """A time request's answer (harness/workers/handlers.py time_point): its rows as the wire has them (each a
    model.ProcessRow's to_dict: results travel as plain dicts) and the baseline's strided output sample where its
    outputs were not checked against the reference, else None. The runner keeps a failed request in its
    place (harness/workers/processes.py time_point): its status and reason, and the variants it named, where
    it named some (an interleaved run's later pairs)."""

    rows: list[Json]
    sample: dict[str, np.ndarray] | None
    status: str
    reason: str
    variants: list[str]

OPS = ("hello", "equiv", "time", "ceilings", "calibrate", "selfcheck")
STOPS = set(SIGNALS)
Progress = Callable[[str], None]
# The parent's side of a turn: (variant, the worker's own stop) -> the stop both workers follow
TurnTaker = Callable[[str, "str | None"], "str | None"]


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


@dataclass(frozen=True)
class Request:
    """One request to a framework's worker. params are the point's parameters without the seed; a
    scenario's functions read them with it (point). timing and first are the time op's, and so is
    variants: the variants to time (empty: every one), which only a worker whose hello says "subsets"
    understands (an older tree's does not: on the wire the field is left out where empty); points are a
    rank group's ceilings op's."""

    op: str
    framework: str
    scenario: str | None = None
    params: Params | None = None
    seed: int | None = None
    timing: TimingConfig | None = None
    first: bool = True
    points: tuple[Params, ...] = field(default=())
    variants: tuple[str, ...] = field(default=())
    # The time op's: its timed loops take turns with another worker's request, call by call (Notes.turn;
    # harness/workers/turns.py). Only a worker whose hello says "turns" understands it; on the wire where set.
    turns: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown request {self.op!r} (known: {', '.join(OPS)})")
        if self.params is not None and "seed" in self.params:
            raise ValueError("the seed is Request.seed, not a key of params")

    @classmethod
    def make(cls, op: str, framework: str, scenario: str | None = None, params: Params | None = None,
             timing: TimingConfig | None = None, first: bool = True, *, seed: int | None = None,
             points: list[Params] | tuple[Params, ...] = (), variants: tuple[str, ...] = (),
             turns: bool = False) -> "Request":
        """A request from a point as a scenario reads it: a seed found in params (hypothesis draws it
        as a field) becomes the seed field; one given twice must agree."""
        if params is not None and "seed" in params:
            params = dict(params)
            drawn = params.pop("seed")
            if seed is not None and seed != drawn:
                raise ValueError(f"seed {seed} and params' seed {drawn} disagree")
            seed = drawn
        return cls(op, framework, scenario, None if params is None else dict(params), seed, timing, first,
                   tuple(points), tuple(variants), turns)

    def point(self) -> Params:
        """The params as the scenario's functions read them: the seed among them."""
        return dict(self.params or {}) | ({} if self.seed is None else {"seed": self.seed})

    def to_dict(self) -> Message:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["timing"] = None if self.timing is None else asdict(self.timing)
        if self.timing is not None and self.timing.kernel_clock:  # the default: the wire an older tree's worker reads
            del d["timing"]["kernel_clock"]
        if self.timing is not None and not self.timing.host_beside:  # likewise
            del d["timing"]["host_beside"]
        if self.timing is not None and self.timing.kernel_warm_s is None:  # likewise
            del d["timing"]["kernel_warm_s"]
        d["points"] = list(self.points)
        if not self.variants:  # every variant: the wire an older tree's worker reads
            del d["variants"]
        else:
            d["variants"] = list(self.variants)
        if not self.turns:  # the wire an older tree's worker reads
            del d["turns"]
        return d

    @classmethod
    def from_dict(cls, d: Message) -> "Request":
        timing = d.get("timing")
        return cls(**(d | {"timing": None if timing is None else TimingConfig.from_dict(timing),
                           "points": tuple(d.get("points") or ()), "variants": tuple(d.get("variants") or ())}))


@dataclass(frozen=True)
class Reply:
    """A request's answer: ok with the handler's value, or the failure's status, one-line summary and
    traceback."""

    ok: bool
    value: Any = None
    status: str = "ok"
    error: str = ""
    traceback: str = ""

    @classmethod
    def failed(cls, framework: str, e: BaseException) -> "Reply":
        status, summary = failure(framework, e)
        return cls(False, status=status, error=summary, traceback=traceback.format_exc())

    def to_dict(self) -> Message:
        # not asdict: that deep-copies the value, a point's outputs included
        return {"reply": {f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def from_dict(cls, d: Message) -> "Reply":
        return cls(**d["reply"])

    def result(self, prefix: str = "") -> Any:
        """The value, or the failure raised as WorkerError (its message after prefix)."""
        if not self.ok:
            raise WorkerError(prefix + self.error, self.status)
        return self.value


def note(text: str) -> Message:
    """A progress note on the wire: what the worker is doing now, before its reply."""
    return {"progress": text}


@dataclass(frozen=True)
class Turn:
    """A worker's turn is over (a request with Request.turns): the variant it times, and its own answer
    whether to stop (the warm-up or the repeats: timing.measure's agree) after its last call. The parent
    answers {"go": stop}: the stop that both workers then follow (harness/workers/turns.py)."""

    variant: str
    stop: str | None


class Notes:
    """What a handler reports through while it serves one request: progress notes (called with the text)
    and, for a request that takes turns, turn(variant, stop), which hands the turn to the parent and
    returns the stop it answers. waited_s: the seconds spent waiting for the turn to come back, which
    are another worker's (a handler leaves them out of its own wall times). progress: where a note goes;
    hand_over(variant, stop): the turn's way to the parent and back (serve's pipe, or the caller's own
    side where the request is served in its process); None: a request that takes no turns keeps its stop."""

    def __init__(self, progress: Progress, hand_over: TurnTaker | None = None) -> None:
        self._progress, self._hand_over = progress, hand_over
        self.waited_s = 0.0

    def __call__(self, text: str) -> None:
        self._progress(text)

    def turn(self, variant: str, stop: str | None) -> str | None:
        if self._hand_over is None:
            return stop
        t0 = time.perf_counter()
        try:
            return self._hand_over(variant, stop)
        finally:
            self.waited_s += time.perf_counter() - t0


def failure(fw: str, e: BaseException) -> tuple[str, str]:
    """(status, one-line summary) of an exception raised while serving fw."""
    summary = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return ("oom" if backends.get(fw).is_out_of_memory(e) else "error"), summary


def died(fw: str, code: int | None) -> str:
    """Why a worker process of fw ended, from its exit code."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (killed: by the kernel's out-of-memory killer?)" if name == "SIGKILL" else ""
        return f"{fw} worker died of {name}{hint}"
    return f"{fw} worker died (exit code {code})"


Handler = Callable[[Request, Progress], Any]


class ParentGone(BaseException):  # like KeyboardInterrupt: no handler's `except Exception` may swallow it
    """The parent's end of the pipe is closed: nobody reads this worker's answers any more."""


def serve(conn: Any, framework: str, handle: Handler) -> None:
    """A worker child's main loop: a Reply per Request, progress notes before it, until None or EOF.
    Planted faults ($TRIPTYCH_FAULT, harness/workers/faults.py) wrap the handler here, at the child's start."""
    # Ctrl-C (and a SIGTERM or SIGHUP sent to the process group) reaches every worker too: the parent decides
    # what stops (it closes or kills us), so a worker neither dies under a request nor prints a traceback.
    # A process worker has them blocked from its start (ProcessWorker._start) until now: one that came
    # meanwhile is dropped.
    for s in STOPS:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    parent = os.getppid()
    threading.Thread(target=_watch, args=(parent,), name="parent-watch", daemon=True).start()
    if os.environ.get(faults.ENV):
        handle = faults.planted_into(framework, handle)

    def send(msg: Message) -> None:
        try:
            conn.send(msg)
        except (OSError, EOFError) as e:  # BrokenPipeError, ConnectionResetError: the parent is gone
            raise ParentGone() from e

    def hand_over(variant: str, stop: str | None) -> str | None:  # Notes.turn: {"turn": ...} out, {"go": stop} back
        send({"turn": {"variant": variant, "stop": stop}})
        try:
            msg = conn.recv()
        except (EOFError, OSError) as e:
            raise ParentGone() from e
        if not isinstance(msg, dict) or "go" not in msg:  # None: the parent closes this worker mid-request
            raise ParentGone()
        return msg["go"]

    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the parent is gone, or closed its end without a word
                raise ParentGone() from None
            if msg is None:
                return
            try:
                reply = Reply(True, handle(Request.from_dict(msg), Notes(lambda text: send(note(text)), hand_over)))
            except ParentGone:
                raise
            except BaseException as e:  # noqa: BLE001 - report everything; the parent decides
                reply = Reply.failed(framework, e)
            try:
                send(reply.to_dict())
            except ParentGone:
                raise
            except Exception as e:  # noqa: BLE001 - a value that cannot be pickled is the handler's error, not a crash
                send(Reply.failed(framework, e).to_dict())
    except ParentGone:
        if _orphaned(parent):  # it died: its folders are ours to remove
            point_cache.orphaned()


WATCH_S = 0.5  # how often a child looks whether its parent is still there


def _watch(parent: int) -> None:
    """A request may run for minutes (or hang): a parent that died meanwhile is found here, and the child
    leaves at once, its parent's folders removed (the pipe would tell it only at its next answer)."""
    while True:
        time.sleep(WATCH_S)
        if os.getppid() != parent:
            point_cache.orphaned()
            os._exit(0)


def _orphaned(parent: int, wait_s: float = 2.0) -> bool:
    """Whether this process was handed to another parent (its own died): a dying process closes its pipes
    before its children are handed on, so a closed pipe is given wait_s to become an orphaning."""
    end = time.monotonic() + wait_s
    while os.getppid() == parent:
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def receive(conn: Any) -> Reply | str | Turn:
    """The parent's side of one message: a Reply, a progress note's text, or a Turn handed back."""
    msg = conn.recv()
    if "progress" in msg:
        return msg["progress"]
    return Turn(**msg["turn"]) if "turn" in msg else Reply.from_dict(msg)
