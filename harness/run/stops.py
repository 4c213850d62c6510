"""A run stopped from outside (Ctrl-C, SIGTERM from `timeout` or a job's limit, SIGHUP from a closed
terminal or ssh session, SIGQUIT from Ctrl-\\) at any moment: harness/workers/signals.py SIGNALS, the one
list of the command and its workers, so that no stop is a kill that loses the run.

While a run measures ("raise"), the first stop signal raises KeyboardInterrupt (SIGINT) / Stopped in
the main thread, so that the run ends what it is doing and keeps what it finished. From then on,
and while a run shuts down and writes its result ("defer"), a signal is only recorded, quietly: a
second Ctrl-C must not interrupt the writing of what was measured. A stop raised where Python cannot
propagate it (a gc callback: hypothesis keeps one, and it runs often during equivalence) is not
printed as "Exception ignored" but delivered again a moment later, outside that callback.

Outside any handling() block, from the command's start to the interpreter's end (process_wide, called
by harness/__main__.py): a stop signal ends the process at once with 128 + its number, quietly where a
stop was already honoured; once the last exit handler has run, signals are ignored. So a signal while
the interpreter starts or exits (torch's exit handlers take a while) neither prints a traceback nor
kills the process with another status than the documented one.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Iterator

from harness.workers.signals import SIGNALS  # the standard library alone, as this module



class Stopped(BaseException):  # like KeyboardInterrupt: no `except Exception` may swallow it
    """SIGTERM, SIGHUP or SIGQUIT during a run (SIGINT arrives as KeyboardInterrupt): finish what is done,
    start nothing. str(self) is the signal's name."""


class _State:
    depth = 0  # nested handling() blocks: the outermost installs and restores
    mode = "raise"  # "raise": a signal stops the run; "defer": it is recorded only
    first: str | None = None  # the signal that stopped the run (raised)
    late: str | None = None  # the first signal that arrived while deferred and stopped nothing
    exit_code: int | None = None  # the command's status, once it returned (exiting)
    began = False  # a handling() block was entered: the command's work began


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
    """The stop signals handled as above inside the block; the outermost block starts in "raise"
    mode and restores the previous handlers. Outside the main thread: nothing (no signal lands there)."""
    if threading.current_thread() is not threading.main_thread() or S.depth:
        S.depth += S.depth > 0
        try:
            yield
        finally:
            S.depth -= S.depth > 0
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    hook = sys.unraisablehook
    S.depth, S.mode, S.first, S.late, S.began = 1, "raise", None, None, True
    try:
        for s in SIGNALS:
            signal.signal(s, _handler)
        sys.unraisablehook = _unraisable(hook)
        yield
    finally:
        S.mode = "defer"  # a signal between here and the restored handler is not raised into a caller's finally
        for s in SIGNALS:
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


def process_wide() -> None:
    """For the command's whole process (harness/__main__.py, first thing): a stop signal outside any
    handling() block ends it at once (_at_once), and the last exit handler ignores every stop signal.
    Registered before any framework is imported, so that its exit handler runs after theirs (LIFO)."""
    for s in SIGNALS:
        signal.signal(s, _at_once)
    atexit.register(_ignore_from_now)


def _at_once(signum: int, frame: Any) -> None:
    """A stop signal while the interpreter starts or exits: exit 128 + its number now (no traceback from
    an exit handler it would land in, and the status the documentation gives a stop); nothing where a
    stop was already honoured: the command's own status stands."""
    if S.first is not None or S.exit_code in _STOP_CODES:
        return
    name = signal.Signals(signum).name
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.write(f"harness: stopped ({name}) while it exited: what it wrote is complete\n"
                         if S.began else f"harness: stopped ({name}) before it began\n")
        sys.stderr.flush()
    os._exit(128 + signum)


def _ignore_from_now() -> None:
    for s in SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(s, signal.SIG_IGN)


_STOP_CODES = {128 + s for s in SIGNALS}


def exiting(code: int) -> None:
    """The command returned ``code`` and the interpreter exits now: a stop signal from here on ends it
    with 128 + its number (process_wide), or, where a stop ended the command, is ignored: the stop is
    honoured and the result written, and a second Ctrl-C or SIGTERM while the interpreter exits must
    neither raise in an exit handler (torch's print a traceback) nor kill it."""
    S.exit_code = code
    if code in _STOP_CODES or S.first is not None:
        _ignore_from_now()


def stopped_by() -> str | None:
    """The signal that stopped this run's measuring, or None."""
    return S.first


def raise_if_stopped() -> None:
    """Raise the stop again where code it landed in swallowed it (hypothesis reports it as a failure)."""
    if S.first is not None:
        raise _exception(S.first)
