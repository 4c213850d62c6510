"""The command's own stdout and stderr: text that cannot be encoded or written never fails the command.

Text a stream's encoding cannot hold (PYTHONIOENCODING=ascii, a C locale, a path's undecodable byte) is
written escaped (backslashreplace), not raised as UnicodeEncodeError. A stream that stops taking text,
a reader that closed the pipe (`| head -1`) or a full device (`> /dev/full`), is noted once and drained
into /dev/null from then on, so that the command finishes what it does (a result file is written
whatever its terminal output) and the interpreter's last flush raises nothing. Why: a traceback there
hid the command's own exit status, and 1 from `regress ... | head -1` read as "a regression".

finish() then gives the exit status: the command's own where the reader went away (a closed pipe is
how a reader says it has read enough); where output was lost otherwise, one line on stderr, and the
command's own status where it failed, else 2.
"""
from __future__ import annotations

import errno
import io
import os
import sys
from typing import Any


class _Guarded(io.TextIOBase):
    """A text stream in front of one of the process's own: its writes and flushes never raise OSError."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner, self.name_ = inner, name
        self.lost: OSError | None = None

    def _drop(self, e: OSError) -> None:
        if self.lost is None:
            self.lost = e
            try:  # what the stream still buffers goes nowhere, and so does the interpreter's last flush
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, self.inner.fileno())
                os.close(null)
            except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
                pass

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                self.inner.write(text)
            except OSError as e:
                self._drop(e)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self.inner.flush()
            except OSError as e:
                self._drop(e)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        try:
            return self.lost is None and self.inner.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding

    @property
    def errors(self) -> str:  # type: ignore[override]
        return self.inner.errors

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def install() -> None:
    """sys.stdout and sys.stderr escaped where their encoding falls short, and guarded (above)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _Guarded):
            continue
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, io.UnsupportedOperation):
            pass
        setattr(sys, name, _Guarded(stream, name))


def finish(code: int) -> int:
    """The exit status, once the command returned code (see the module's doc); stdout flushed first."""
    out, err = sys.stdout, sys.stderr
    if isinstance(out, _Guarded):
        out.flush()
    lost = out.lost if isinstance(out, _Guarded) else None
    if lost is None or lost.errno == errno.EPIPE:
        return code
    print(f"harness: error: the output could not be written ({lost.strerror or lost}): what the command "
          "printed is incomplete", file=err, flush=True)
    return code or 2
