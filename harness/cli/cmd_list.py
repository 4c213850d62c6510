"""`list`: the scenarios, their variants and concepts; a table on a terminal, plain lines elsewhere."""
from __future__ import annotations

import argparse

from harness.labels import gpu_label


def run(a: argparse.Namespace, argv: list[str]) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from scenarios import all_scenarios

    console = Console()
    if not console.is_terminal:  # a pipe or a file: one line per variant, no 170-column table
        for s in all_scenarios():
            print(f"{s.name}: {s.title}")
            for v in s.variants:
                print(f"  {v.name}" + (" (hazard)" if v.hazard else "") + gpu_label(v, " "))
        return 0
    t = Table(title="triptych scenarios", show_lines=True)
    for col in ("scenario", "variants (baseline first)", "concept"):
        t.add_column(col)
    for s in all_scenarios():
        vs = "\n".join(escape(v.name + (" (hazard)" if v.hazard else "") + gpu_label(v, " ")) for v in s.variants)
        t.add_row(f"{s.name}\n[dim]{s.title}[/dim]", vs, s.concept)
    console.print(t)
    return 0
