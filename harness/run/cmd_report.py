"""`report RESULT.json [--out DIR]`: report.md and a self-contained report.html from a result file."""
from __future__ import annotations

import argparse

from harness.run.parser import UsageError
from harness.report.html import make_report
from harness.results.files import OutputError
from harness.results.results import ResultError


def run(a: argparse.Namespace, argv: list[str]) -> int:

    try:
        page = make_report(a.result, a.out)
    except (ResultError, OutputError) as e:
        raise UsageError(str(e)) from None
    print(f"report: {page}")
    print(f"        {page.with_name('report.md')}")
    return 0
