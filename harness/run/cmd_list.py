"""`list`: the scenarios, their variants and concepts, and what each needs (from its spec); a table on
a terminal, plain lines elsewhere."""
from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.report.labels import gpu_label, scenario_needs
from scenarios import CPU_RUN, OPT_IN, all_scenarios


def _runs(name: str) -> str:
    """When a compare without --scenarios runs it."""
    if name in OPT_IN:
        return "only when named (--scenarios): minutes on a GPU, see compare --help"
    return "by default" if name in CPU_RUN else "by default on a GPU; on a CPU when named"


def run(a: argparse.Namespace, argv: list[str]) -> int:


    console = Console()
    if not console.is_terminal:  # a pipe or a file: one line per variant, no 170-column table
        for s in all_scenarios():
            print(f"{s.name}: {s.title}")
            if needs := scenario_needs(s):
                print(f"  needs {needs}")
            print(f"  runs {_runs(s.name)}")
            for v in s.variants:
                print(f"  {v.name}" + (" (hazard)" if v.hazard else "") + gpu_label(v, " "))
        return 0
    t = Table(title="triptych scenarios", show_lines=True)
    for col in ("scenario", "variants (baseline first)", "concept"):
        t.add_column(col)
    for s in all_scenarios():
        vs = "\n".join(escape(v.name + (" (hazard)" if v.hazard else "") + gpu_label(v, " ")) for v in s.variants)
        needs = scenario_needs(s)
        about = f"{s.name}\n[dim]{s.title}[/dim]" + (f"\n[yellow]needs {escape(needs)}[/yellow]" if needs else "")
        t.add_row(about + f"\n[dim]runs {escape(_runs(s.name))}[/dim]", vs, s.concept)
    console.print(t)
    return 0
