"""`python -m harness {list,compare,report,export,docs,check,selfcheck,regress}`: one module per command.

Bad input is answered with one line on stderr and exit status 2, before any work and without a
traceback or a partial file. `compare` exits 1 when a check failed or nothing was measured (the
result file is still written, since a failure is a finding), 0 when all is well. `regress` exits 1
on any regression, 0 on none. A stop (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) exits 128 + the signal's number
(130, 143, 129, 131) and says what was kept.
"""
from __future__ import annotations

import importlib
import signal
import sys

from harness.results.files import NowhereToWrite
from harness.run.parser import UsageError, build_parser, gpu_present
from harness.run import stops

__all__ = ["main", "UsageError", "gpu_present"]

COMMANDS = {"list": "cmd_list", "compare": "cmd_compare", "report": "cmd_report",
            "export": "cmd_export", "docs": "cmd_docs",
            "check": "cmd_check", "selfcheck": "cmd_selfcheck", "regress": "cmd_regress"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the stop signals, from parsing to the last line printed (harness/run/stops.py): a second signal while
    # the first one's line is printed is recorded, not raised
    with stops.handling():
        try:
            a = build_parser().parse_args(argv)
            return importlib.import_module(f"harness.run.{COMMANDS[a.cmd]}").run(a, argv)
        except UsageError as e:
            print(f"harness: error: {e}", file=sys.stderr)
            return 2
        except NowhereToWrite as e:  # the measurements were made and no place could keep them
            print(f"harness: error: {e}: the measurements are lost", file=sys.stderr)
            return 1
        except (KeyboardInterrupt, stops.Stopped) as e:
            name = str(e) if isinstance(e, stops.Stopped) else "SIGINT"
            print(f"harness: stopped ({name}) before a result was written", file=sys.stderr)
            return 128 + signal.Signals[name].value
