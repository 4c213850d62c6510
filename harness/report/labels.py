"""Labels that several outputs (list, report, docs) must word alike."""
from __future__ import annotations

from typing import Any

from harness.backends import display_names
from harness.results.model import Row, Stats, Timing

NAMES = display_names()  # {framework: its display name}, in registry order (each backend's display_name)


def gpu_needs(variant: Any) -> str:
    """"GPU only", "GPU only in <display names>" or "": from the spec's gpu_only (a Variant, or a variant
    as a result file records it, VariantInfo), per framework: a variant a framework runs on the CPU is not "GPU
    only" there."""
    g = variant.gpu_only
    if not g:
        return ""
    if g is True:
        return "GPU only"
    return f"GPU only in {', '.join(NAMES.get(f, f) for f in g)}"


def scenario_needs(scn: Any) -> str:
    """What a scenario needs beyond one device and one process, from its spec ("" for nothing):
    "2 GPUs in one process", "a group of rank processes per framework (--world-size)"."""
    needs = []
    if getattr(scn, "devices", 1) > 1:
        needs.append(f"{scn.devices} GPUs in one process (skipped with fewer)")
    if getattr(scn, "ranks", False):
        needs.append("a group of rank processes per framework (--world-size; the GPUs, or 2)")
    return "; ".join(needs)


def gpu_label(variant: Any, before: str = " ", style: str = "({})") -> str:
    needs = gpu_needs(variant)
    return before + style.format(needs) if needs else ""


def pct_of_floor(row: Row | None) -> float | None:
    """A row's % of its physical floor, or None: a hazard row has none, whatever an older result holds
    (a variant that skips a wait is not faster than physics; its time is not the computation's)."""
    if not row or row.hazard:
        return None
    return row.pct_of_floor


def kernel_said(rows: list[Row]) -> str:
    """How the rows' kernel clock was read, for a legend: CUDA events where a framework has them, and where a
    row was traced, the trace's span; or, in files written before the span, its busy time (the union of the
    call's kernels and copies, idle gaps left out), which says less than the label where a call idles."""
    sources = {str(r.timing.kernel_source or "") if r.timing is not None else "" for r in rows}
    traced = sorted(s for s in sources if "CUPTI" in s or "XLA" in s)
    if not traced:
        return "CUDA events around the call, where the framework has them"
    how = ("from its first kernel or copy to the end of its last" if all("span" in s for s in traced)
           else "the sum of its kernels and copies, idle gaps left out (a file written before the span)")
    return f"CUDA events around the call where the framework has them, else untimed runs' CUPTI trace: {how}"


def kernel_of(timing: Timing | None) -> Stats | None:
    """A timing's kernel clock (Timing.kernel_clock, older files' included), or None."""
    return timing.kernel_clock if timing is not None else None
