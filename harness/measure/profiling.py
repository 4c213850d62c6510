"""`compare --profile`: each framework's own trace of one extra, untimed repeat per row, beside the result.

In the worker (profile_variant): after every row of a point is timed (as the timelines, so that no
profiler disturbs a timing), one more run of each variant on fresh state under the framework's profiler
(Backend.profiling: a framework's own trace where it writes one; one that writes none leaves NVTX
ranges for nsys), inside the range "<row> profiled". No sample comes from it,
so --profile changes no figure. The trace travels back in the row as bytes; in the parent,
plan_profiles names each file in the run's own folder, which claim_name made the run's alone
(<stem>/profile_<scenario>_<framework>_<variant>_p<point><suffix>), and write_profiles writes them
through the one atomic writer just before the result, which then names only traces that were written.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from harness.backends.base import ProfilerOutput
from harness.results.files import write_files
from harness.measure.timeline import rehearsed

MAX_BYTES = 64 << 20  # per trace file; one repeat's trace is kilobytes to a few megabytes
# A trace's suffix -> its key in the row's "profile": what opens it (harness/results/schema/result.schema.json)
SUFFIXES = {".trace.json": "trace", ".trace.json.gz": "trace", ".xplane.pb": "xplane"}


def row_name(scenario: str, framework: str, variant: str, label: str = "") -> str:
    """A row's name in the profilers: scenario/framework/variant, with [label] where the scenario's
    points have one (rows of one variant then differ by point)."""
    return f"{scenario}/{framework}/{variant}" + (f"[{label}]" if label else "")


def profile_variant(b: Any, impl: Any, call: Callable[[Any], Any], inputs: Any, params: Any, name: str,
                    keep: bool = True) -> ProfilerOutput:
    """Run one variant twice on fresh state, untimed, as a traced timeline run does (harness/measure/timeline.py):
    once to warm up (JAX may have dropped its compiled code), once under b's profiler inside the range
    "<name> profiled". {"tool", "files": {suffix: bytes}} or {"tool", "why"}; never raises (a trace is a
    picture of the run, never a reason to lose its row). keep=False (a rank other than 0, whose row the
    group's merge drops): run it with every rank, but send no trace back."""
    got: ProfilerOutput = {"tool": ""}
    state = out = None
    try:
        state = rehearsed(b, impl, call, inputs, params)
        with b.profiling() as got:
            with b.range(f"{name} profiled"):
                out = call(state)
                b.synchronize(out)
    except Exception as e:  # noqa: BLE001
        return {"tool": got.get("tool", ""), "why": f"the profiled run failed: {type(e).__name__}: {e}"[:300]}
    finally:
        state = out = None
        b.free_memory()
    files = got.pop("files", None) or {}
    big = [f"{s} ({len(data) >> 20} MiB)" for s, data in files.items() if len(data) > MAX_BYTES]
    if big:
        return {"tool": got["tool"], "why": f"trace over {MAX_BYTES >> 20} MiB not kept: {', '.join(big)}"}
    if not keep:
        return {"tool": got["tool"], "why": "only rank 0's trace is kept"}
    return got | ({"files": files} if files else {})


def plan_profiles(doc: dict[str, Any], stem: str) -> dict[str, bytes]:
    """Take the traces out of the rows and name each, relative to the result's folder, in the row's
    "profile" (before the result is written: JSON holds no bytes); returns {file name in stem/: bytes}."""
    out: dict[str, bytes] = {}
    for scenario, entry in doc.get("scenarios", {}).items():
        for row in entry.get("rows", []):
            prof = row.get("profile")
            if not isinstance(prof, dict) or "files" not in prof:
                continue
            for suffix, data in prof.pop("files").items():
                if suffix not in SUFFIXES:
                    continue
                name = f"profile_{scenario}_{row['framework']}_{row['variant']}_p{row.get('point', 0)}{suffix}"
                prof[SUFFIXES[suffix]] = f"{stem}/{name}"
                out[name] = data
    return out


def write_profiles(doc: dict[str, Any], folder: Path, stem: str, files: dict[str, bytes]) -> list[Path]:
    """Write the planned traces into folder/stem/ (the run's claimed folder) at once; where that fails,
    each row's "profile" says why instead of naming a file, never raised."""
    if not files:
        return []
    try:
        return write_files(Path(folder) / stem, files, exclusive=True)  # replaces nothing, not even its own
    except OSError as e:
        for entry in doc.get("scenarios", {}).values():
            for row in entry.get("rows", []):
                prof = row.get("profile")
                if isinstance(prof, dict) and any(k in prof for k in set(SUFFIXES.values())):
                    row["profile"] = {"tool": prof.get("tool", ""), "why": f"could not write the trace: "
                                                                          f"{e.strerror or e}"[:300]}
        return []
