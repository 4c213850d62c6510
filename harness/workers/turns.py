"""Two workers' time requests that take turns, call by call: an interleaved regress's pair at one point
(--turns call; experimental, not the default).

With a point at a time (harness/run/interleave.py), the candidate's `eager` row runs seconds after the
baseline's. The guess was that the host's speed changed between them (docs/design/host_speed.md). Taking
turns puts the two sides' calls of one row milliseconds apart. Measured on a GPU (docs/regress.md, "Taking
turns call by call"), it narrowed most host-paced rows' spread between pairs, but a pair's two processes still
differed: the speed goes with the process, likely its CPU (--same-cpu: harness/run/interleave.py pair_cpu). And each
turn added tens of microseconds to a microsecond row's call: the other process's work changes what it measures.

How: both requests run at once, but only the one holding the turn runs; the other waits in its worker. A
worker hands the turn back wherever a rank would agree with its group (harness/measure/timing.py measure's
agree: after each warm-up call by time and after each timed repeat), with the variant it times and its own
answer whether to stop. Both sides then follow one answer: the first that says stop (as a rank group follows
rank 0's). So both run the same warm-up calls and repeats, and nothing of one side, timed or not, runs while
the other side's call is timed. The first side's first turn starts the second side's request; until then
the second waits here, so that its set-up does not meet the first side's first call.

Where the two sides' turns do not name the same variant at the same count (a side that skips a variant the
other times), they stop sharing answers for the rest of the request: each follows its own (`paired` False),
and they still take turns. A side whose request ends (answered or failed) hands the turn over for good.
"""
from __future__ import annotations

import threading
import time
from collections import Counter


class Turns:
    """The parent's side of two requests that take turns: side j's request thread calls begin(j) before it
    sends its request, turn(j, variant, stop) for each Turn its worker hands back (the stop to follow), and
    end(j) once its request is over, in a finally. waited_s[j]: seconds side j spent waiting for its turn
    after begin (its request's round trip less these is its own). first: the side that runs first. A wait
    has no timeout: each request's own (its worker killed, its thread's end) frees the other side."""

    def __init__(self, first: int = 0) -> None:
        self._cv = threading.Condition()
        self._holder = first
        self._started = [False, False]
        self._done = [False, False]
        self._reported: list[tuple[str, int, str | None] | None] = [None, None]  # a turn awaiting its answer
        self._answer: list[tuple[str | None] | None] = [None, None]  # the answer decided for a waiting side
        self._counts: list[Counter[str]] = [Counter(), Counter()]
        self._cancelled = False
        self.paired = True
        self.shared = 0  # turns whose answer both sides followed
        self.waited_s = [0.0, 0.0]

    def begin(self, j: int) -> bool:
        """Wait until side j may send its request: it runs first, or the other side has handed it the turn;
        False where the run was stopped meanwhile (cancel): the request is not sent."""
        with self._cv:
            self._wait(j, lambda: self._holder == j or self._done[1 - j] or self._cancelled)
            if self._cancelled:
                return False
            self._started[j] = True
            self._holder = j
            return True

    def cancel(self) -> None:
        """The run is stopping: a side not yet started never starts, and a waiting side goes on with its own
        answer (its worker is being closed)."""
        with self._cv:
            self._cancelled = True
            self._cv.notify_all()

    def turn(self, j: int, variant: str, stop: str | None) -> str | None:
        """Side j's worker handed the turn back after a call of variant, its own answer stop: the answer it
        follows, once the turn is back with it."""
        with self._cv:
            self._counts[j][variant] += 1
            o = 1 - j
            if self._done[o]:
                return stop  # alone from here: no one to take turns with
            self._reported[j] = (variant, self._counts[j][variant], stop)
            mine = self._reported[o]
            if mine is not None and self.paired and mine[:2] == self._reported[j][:2]:
                shared = mine[2] if mine[2] is not None else stop  # the first that says stop
                self._answer[o] = self._answer[j] = (shared,)
                self._reported = [None, None]
                self.shared += 1
            elif mine is not None:  # the other side waits on another variant or count: each its own from here
                self.paired = False  # (unpaired, one report is always waiting: the next turn answers it)
                self._answer[o] = (mine[2],)
                self._reported[o] = None
            self._holder = o
            self._cv.notify_all()
            self._wait(j, lambda: (self._holder == j and self._answer[j] is not None) or self._done[o]
                       or self._cancelled)
            self._holder = j
            if self._answer[j] is None:  # the other side ended (or the run stopped) while this one waited
                self._reported[j] = None
                return stop
            (answer,), self._answer[j] = self._answer[j], None
            return answer

    def end(self, j: int) -> None:
        """Side j's request is over: the turn is the other side's for good."""
        with self._cv:
            self._done[j] = True
            self._holder = 1 - j
            self._cv.notify_all()

    def _wait(self, j: int, ready) -> None:  # noqa: ANN001 - a predicate, under self._cv
        t0 = time.perf_counter()
        self._cv.wait_for(ready)
        if self._started[j]:
            self.waited_s[j] += time.perf_counter() - t0
