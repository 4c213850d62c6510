"""Labels that several outputs (list, report, docs) must word alike."""
from __future__ import annotations

from typing import Any

from harness.backends import display_names

NAMES = display_names()  # {framework: its display name}, in registry order (each backend's display_name)


def gpu_needs(variant: Any) -> str:
    """"GPU only", "GPU only in <display names>" or "": from the spec's gpu_only (a Variant, or a variant
    as a result file records it), per framework: a variant a framework runs on the CPU is not "GPU only" there."""
    g = variant.get("gpu_only") if isinstance(variant, dict) else variant.gpu_only
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


def pct_of_floor(row: dict[str, Any] | None) -> float | None:
    """A row's % of its physical floor, or None: a hazard row has none, whatever an older result holds
    (a variant that skips a wait is not faster than physics; its time is not the computation's)."""
    if not row or row.get("hazard") or "pct_of_floor" not in row:
        return None
    return row["pct_of_floor"]


def kernel_said(rows: Any) -> str:
    """How the rows' kernel clock was read, for a legend: CUDA events where a framework has them, and where a
    row was traced, the trace's span; or, in files written before the span, its busy time (the union of the
    call's kernels and copies, idle gaps left out), which says less than the label where a call idles."""
    sources = {str((r.get("timing") or {}).get("kernel_source") or "") for r in rows}
    traced = sorted(s for s in sources if "CUPTI" in s or "XLA" in s)
    if not traced:
        return "CUDA events around the call, where the framework has them"
    how = ("from its first kernel or copy to the end of its last" if all("span" in s for s in traced)
           else "the sum of its kernels and copies, idle gaps left out (a file written before the span)")
    return f"CUDA events around the call where the framework has them, else untimed runs' CUPTI trace: {how}"


def kernel_of(timing: dict[str, Any] | None) -> dict[str, Any] | None:
    """A timing's kernel clock (harness/measure/kernel_clock.py), or None. A file from before the kernel clock
    had one only where its framework had CUDA events, which were then what the kernel clock is now."""
    if not timing:
        return None
    return timing.get("kernel") or (timing.get("device_events") if "kernel_source" not in timing else None)
