"""`docs [--check]`: regenerate docs/porting.md and docs/scenarios.md, or say which is stale."""
from __future__ import annotations

import argparse
import sys

from harness.run.parser import UsageError
from harness.report.docs import DocsError, generate, stale, write


def run(a: argparse.Namespace, argv: list[str]) -> int:
    try:
        files = generate()
    except DocsError as e:
        raise UsageError(str(e)) from None
    if a.check:
        out = stale(files)
        for path in out:
            print(f"stale: {path} (regenerate with `python -m harness docs` or `make docs`)", file=sys.stderr)
        if not out:
            print(f"up to date: {', '.join(map(str, files))}")
        return 1 if out else 0
    written = write(files)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"unchanged (already up to date): {', '.join(map(str, files))}")
    return 0
