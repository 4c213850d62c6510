"""A run stopped from outside (Ctrl-C, SIGTERM from `timeout` or a job's limit) at any moment.

While a run measures ("raise"), the first SIGINT or SIGTERM raises KeyboardInterrupt / Stopped in
the main thread, so that the run ends what it is doing and keeps what it finished. From then on,
and while a run shuts down and writes its result ("defer"), a signal is only recorded, quietly: a
second Ctrl-C must not interrupt the writing of what was measured. A stop raised where Python cannot
propagate it (a gc callback: hypothesis keeps one, and it runs often during equivalence) is not
printed as "Exception ignored" but delivered again a moment later, outside that callback.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Iterator

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):  # like KeyboardInterrupt: no `except Exception` may swallow it
    """SIGTERM during a run (SIGINT arrives as KeyboardInterrupt): finish what is done, start nothing."""


class _State:
    depth = 0  # nested handling() blocks: the outermost installs and restores
    mode = "raise"  # "raise": a signal stops the run; "defer": it is recorded only
    first: str | None = None  # the signal that stopped the run (raised)
    late: str | None = None  # the first signal that arrived while deferred and stopped nothing


S = _State()


def _exception(name: str) -> BaseException:
    return KeyboardInterrupt() if name == "SIGINT" else Stopped(name)


def name_of(e: BaseException) -> str:
    """The signal that a KeyboardInterrupt or a Stopped stands for (the inverse of _exception)."""
    return "SIGINT" if isinstance(e, KeyboardInterrupt) else str(e)


def _handler(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    if S.mode == "raise":
        S.mode, S.first = "defer", name
        raise _exception(name)
    if S.first is None and S.late is None:
        S.late = name


def _unraisable(previous: Any) -> Any:
    def hook(u: Any) -> None:
        if S.depth and u.exc_type in (KeyboardInterrupt, Stopped) and S.first is not None:
            # swallowed where it was raised (a gc callback): nothing stopped; deliver it again, outside
            name, S.first, S.mode = S.first, None, "raise"
            threading.Timer(0.05, _redeliver, (name,)).start()
            return
        previous(u)
    return hook


def _redeliver(name: str) -> None:
    if S.depth and S.mode == "raise" and S.first is None:
        os.kill(os.getpid(), signal.Signals[name])


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """SIGINT and SIGTERM handled as above inside the block; the outermost block starts in "raise"
    mode and restores the previous handlers. Outside the main thread: nothing (no signal lands there)."""
    if threading.current_thread() is not threading.main_thread() or S.depth:
        S.depth += S.depth > 0
        try:
            yield
        finally:
            S.depth -= S.depth > 0
        return
    previous = {s: signal.getsignal(s) for s in _SIGNALS}
    hook = sys.unraisablehook
    S.depth, S.mode, S.first, S.late = 1, "raise", None, None
    try:
        for s in _SIGNALS:
            signal.signal(s, _handler)
        sys.unraisablehook = _unraisable(hook)
        yield
    finally:
        S.mode = "defer"  # a signal between here and the restored handler is not raised into a caller's finally
        for s in _SIGNALS:
            signal.signal(s, previous[s])
        sys.unraisablehook = hook
        S.depth = 0


def defer() -> None:
    """From now on a signal is recorded only: the run shuts down and writes its result."""
    S.mode = "defer"


def resume() -> str | None:
    """The result is written: signals raise again, unless one already stopped the run (the rest of
    that stop, the drawing, ends quietly). The signal that arrived while deferred and stopped nothing
    (the run had finished measuring), which the caller now honours, or None."""
    late, S.late = S.late, None
    if S.first is None:
        S.mode = "raise"
    return late


def exiting(code: int) -> None:
    """The command returned ``code``; if a stop ended it, signals are ignored from here on: the stop is
    honoured and the result written, and a second Ctrl-C or SIGTERM while the interpreter exits must
    neither raise in an exit handler (torch's print a traceback) nor kill it."""
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM) or S.first is not None:
        for s in _SIGNALS:
            signal.signal(s, signal.SIG_IGN)


def stopped_by() -> str | None:
    """The signal that stopped this run's measuring, or None."""
    return S.first


def raise_if_stopped() -> None:
    """Raise the stop again where code it landed in swallowed it (hypothesis reports it as a failure)."""
    if S.first is not None:
        raise _exception(S.first)
