"""Progress for long runs: a rich progress bar on a terminal, one line per step elsewhere (logs, CI)."""
from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class LineUI:
    """Plain lines on stderr: readable in a log file that a progress bar would garble."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.total = self.done = 0
        self.t0 = time.perf_counter()

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def begin(self, total: int) -> None:
        self.total, self.done, self.t0 = total, 0, time.perf_counter()

    def step(self, text: str) -> None:
        self._print(f"[{self.done + 1}/{self.total} {time.perf_counter() - self.t0:6.1f}s] {text}")

    def detail(self, text: str) -> None:
        """Which variant runs now: a progress bar's live text; in a log, the step's line says enough."""

    def advance(self) -> None:
        self.done += 1

    def note(self, text: str) -> None:
        self._print(f"  ! {text}")

    def end(self) -> None:
        self._print(f"done in {time.perf_counter() - self.t0:.1f}s")


class RichUI:
    def __init__(self, console: Any) -> None:
        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.task: Any = None

    def begin(self, total: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task("starting", total=total)

    def step(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def detail(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def advance(self) -> None:
        self.progress.advance(self.task)

    def note(self, text: str) -> None:
        self.progress.console.print(f"[yellow]![/yellow] {text}", markup=True, highlight=False)

    def end(self) -> None:
        self.progress.stop()


class QuietUI(LineUI):
    def _print(self, text: str) -> None:
        pass


def make_ui(quiet: bool = False) -> Any:
    if quiet:
        return QuietUI()

    console = Console(stderr=True)
    return RichUI(console) if console.is_terminal else LineUI()
