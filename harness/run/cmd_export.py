"""`export RESULT.json --csv | --markdown [--out FILE]`: the result as a tidy CSV or a Markdown summary
(harness/report/export.py), on stdout or written into FILE atomically, never over the result itself.
Everything is read and rendered before a byte is written: bad input writes nothing."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.report.export import to_csv, to_markdown
from harness.results.files import OutputError, check_writable, write_files
from harness.results.results import ResultError, read
from harness.run.parser import UsageError


def _check_out(out: Path, result: Path) -> None:
    """--out names a file this command may replace: not a folder, not the result (or a link to it)."""
    if out.is_dir():
        raise UsageError(f"--out {out}: is a folder; name the file to write")
    if out.exists() and os.path.samefile(out, result):
        raise UsageError(f"--out {out}: is the result file itself; name another file")
    try:
        check_writable(out.parent)
    except OutputError as e:
        raise UsageError(str(e)) from None


def _to_stdout(data: bytes) -> None:
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:  # the reader stopped early (`| head`): what it read is what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run(a: argparse.Namespace, argv: list[str]) -> int:
    try:
        result = read(a.result)
    except ResultError as e:
        raise UsageError(str(e)) from None
    if a.out is not None:
        _check_out(a.out, a.result)
    data = (to_csv(result) if a.form == "csv" else to_markdown(result, a.result.name)).encode()
    if a.out is None:
        _to_stdout(data)
        return 0
    try:
        write_files(a.out.parent, {a.out.name: data})
    except OSError as e:
        raise UsageError(f"cannot write {a.out}: {e.strerror or e}") from None
    print(f"export: {a.out}")
    return 0
