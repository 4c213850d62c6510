"""`selfcheck`: harness medians against the frameworks' own benchmark tools."""
from __future__ import annotations

import argparse

from harness.run.parser import UsageError
from harness.results.files import OutputError, check_writable
from harness.run.selfcheck import run_selfcheck


def run(a: argparse.Namespace, argv: list[str]) -> int:

    if a.out is not None:
        try:
            check_writable(a.out)
        except OutputError as e:
            raise UsageError(str(e)) from None
    return run_selfcheck(a.frameworks, a.out)
