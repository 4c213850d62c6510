"""What ran when, on which stream: one extra, untimed, traced run per variant, drawn as a timeline.

Impls mark their operations, naming the lane (the stream) and the operation:

    from harness.measure.timeline import span
    with torch.cuda.stream(copy), span("copy", f"h2d {i}"):
        ...

Outside a traced run span() returns a shared no-op context, so timed repeats are untouched. During one,
the backend's recorder stamps each span's start and end in stream order (Backend.timeline_recorder,
harness/backends/*): CUDA events for a framework with device events on a GPU, the host wall clock on the
CPU (each op runs inside the call there). A framework without user streams or events runs the variant
under its profiler and reads each stream's device activity from the trace (harness/backends/jax_backend.py).

After a compare run, write_timelines() draws one PNG per scenario (a panel per framework x variant, a
lane per stream) and writes the same spans as a Chrome/Perfetto trace (chrome://tracing,
ui.perfetto.dev): <--out folder, runs/ by default>/<result stem>/timeline_<scenario>.{png,trace.json}.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from harness.backends.base import ChromeTrace, TracedSpans
from harness.results.files import write_files

if TYPE_CHECKING:  # annotations only: matplotlib is imported where a picture is drawn (it is slow to import)
    from matplotlib.axes import Axes

# Free-form by nature: one Chrome trace event ({"ph", "pid", "name", "ts", ...}), the trace format's keys
TraceEvent = dict[str, Any]
Panel = tuple[str, TracedSpans]  # a drawn row's title and its traced call

MAX_SPANS = 4000  # per traced run; a longer trace is cut (and says so)

_active: tuple[Any, list[tuple[str, str, Any, Any]]] | None = None
_NULL = contextlib.nullcontext()


class _Span:
    __slots__ = ("lane", "op", "start")

    def __init__(self, lane: str, op: str) -> None:
        self.lane, self.op = lane, op

    def __enter__(self) -> "_Span":
        self.start = _active[0].mark() if _active is not None else None
        return self

    def __exit__(self, *exc: Any) -> None:
        if _active is not None:
            _active[1].append((self.lane, self.op, self.start, _active[0].mark()))


def span(lane: str, op: str) -> contextlib.AbstractContextManager[Any]:
    """Mark one operation on a lane (a stream) for the traced run; a no-op outside one."""
    return _NULL if _active is None else _Span(lane, op)


def trace_variant(backend: Any, impl: Any, call: Callable[[Any], Any], inputs: Any, params: Any) -> TracedSpans:
    """Run one variant twice on fresh state, untimed: once to warm up (JAX may have dropped its compiled
    code), once traced. Returns {"clock", "spans": [[lane, op, t0_s, t1_s]], "why"}; never raises."""
    global _active
    state = out = None
    try:
        state = rehearsed(backend, impl, call, inputs, params)
        rec, spans = backend.timeline_recorder(), []
        rec.start()
        _active = (rec, spans)
        try:
            out = call(state)
            backend.synchronize(out)
        finally:
            _active = None
            result = rec.finish(spans)  # also stops a profiler when the call failed
        spans = result["spans"]
        if len(spans) > MAX_SPANS:
            result["spans"] = spans[:MAX_SPANS]
            result["why"] = f"cut to the first {MAX_SPANS} of {len(spans)} operations"
        result["lanes"] = list(dict.fromkeys(s[0] for s in result["spans"]))
        return result
    except Exception as e:  # noqa: BLE001 - a timeline is a picture of the run, never a reason to lose it
        return {"clock": "", "spans": [], "lanes": [], "why": f"the traced run failed: {type(e).__name__}: {e}"[:300]}
    finally:
        state = out = None
        backend.free_memory()


def rehearsed(backend: Any, impl: Any, call: Callable[[Any], Any], inputs: Any, params: Any) -> Any:
    """The state for one more run after the timed ones (a timeline's, a profile's): prepared, run once
    untimed, then poisoned again (JAX's sources made fresh) and synchronized, as before every timed run."""
    state = impl.prepare(inputs, params, backend.device)
    poison = getattr(impl, "poison", None)
    for last in (False, True):
        if poison is not None:
            poison(state)
        backend.synchronize(state)
        if last:
            return state
        backend.synchronize(call(state))


# -- after the run: one PNG and one Chrome trace per scenario -------------------------------------


def _kind(op: str) -> str:
    """What colours a span: the op's first word without a trailing number ('h2d 3' -> 'h2d',
    'loop_add_fusion.2' -> 'loop_add_fusion')."""
    words = op.split()
    return re.sub(r"[.\d]+$", "", words[0])[:24] if words else "?"


def _panels(entry: dict[str, Any]) -> list[Panel]:
    out = []
    for row in entry.get("rows", []):
        tl = row.get("timeline")
        if tl is not None:
            label = f" [{row['label']}]" if row.get("label") else ""
            out.append((f"{row['framework']} · {row['variant']}{label}", tl))
    return out


def chrome_trace(scenario: str, panels: list[Panel]) -> ChromeTrace:
    """Processes = framework · variant, threads = lanes (streams); times in microseconds."""
    events: list[TraceEvent] = []
    for pid, (title, tl) in enumerate(panels, start=1):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": title}})
        events.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}})
        lanes = tl.get("lanes") or list(dict.fromkeys(s[0] for s in tl["spans"]))
        for tid, lane in enumerate(lanes, start=1):
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": lane}})
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
        for lane, op, a, b in tl["spans"]:
            events.append({"ph": "X", "pid": pid, "tid": lanes.index(lane) + 1, "name": op, "cat": _kind(op),
                           "ts": a * 1e6, "dur": max(b - a, 0.0) * 1e6})
    clocks = {title: tl.get("clock", "") for title, tl in panels}
    whys = {title: tl["why"] for title, tl in panels if tl.get("why")}
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"scenario": scenario, "clocks": clocks, "notes": whys}}


def render_png(scenario: str, panels: list[Panel], path: Path | io.BytesIO) -> None:
    """A panel per framework x variant, a lane per stream, one shared time axis (ms); its labels drawn as
    written (no mathtext: a '$' in an op's name is a dollar sign)."""
    import matplotlib  # heavy (~0.5 s): only a run with timelines draws them

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        _render_png(scenario, panels, path)


def _render_png(scenario: str, panels: list[Panel], path: Path | io.BytesIO) -> None:
    from matplotlib import colormaps
    from matplotlib.figure import Figure  # no pyplot: no global backend state
    from matplotlib.patches import Patch

    heights = [max(1, len(tl.get("lanes") or [])) for _, tl in panels]
    fig = Figure(figsize=(12, 1.2 + sum(0.32 * h + 0.75 for h in heights)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=[h + 1.6 for h in heights])[:, 0]
    first: dict[str, Axes] = {}  # one time axis per framework: its variants compare at a glance
    for ax, (title, tl) in zip(axes, panels):
        if tl["spans"]:
            fw = title.split(" · ")[0]
            if fw in first:
                ax.sharex(first[fw])
            first.setdefault(fw, ax)
    kinds: dict[str, tuple[float, ...]] = {}  # operation kind (the op's leading word) -> colour, shared by all panels
    palette = list(colormaps["tab10"].colors) + list(colormaps["Set2"].colors)
    for ax, (title, tl), h in zip(axes, panels, heights):
        lanes = tl.get("lanes") or []
        ax.set_title(f"{title} — {tl.get('clock') or 'no clock'}", loc="left", fontsize=8)
        if not tl["spans"]:
            ax.text(0.01, 0.5, f"no timeline: {tl.get('why') or 'nothing recorded'}", transform=ax.transAxes,
                    fontsize=8, va="center")
            ax.set_yticks([])
            continue
        for lane, op, a, b in tl["spans"]:
            k = _kind(op)
            colour = kinds.setdefault(k, palette[len(kinds) % len(palette)])
            ax.broken_barh([(a * 1e3, max(b - a, 0.0) * 1e3)], (lanes.index(lane) - 0.4, 0.8), facecolors=colour,
                           edgecolors="black", linewidth=0.2)
        ax.set_yticks(range(len(lanes)), labels=[str(lane)[:28] for lane in lanes], fontsize=7)
        ax.set_ylim(len(lanes) - 0.5, -0.5)
        if tl.get("why"):
            ax.text(0.99, 0.02, tl["why"], transform=ax.transAxes, fontsize=7, ha="right", va="bottom")
        ax.tick_params(axis="x", labelsize=7)
    axes[-1].set_xlabel("ms since the start of the traced run (one time axis per framework)", fontsize=8)
    if kinds:
        shown = list(kinds.items())[:16]
        fig.legend(handles=[Patch(facecolor=c, label=k) for k, c in shown], loc="outside lower center",
                   ncols=min(8, len(shown)), fontsize=7)
    fig.suptitle(f"{scenario}: what ran when, on which stream (one untimed traced run per variant)", fontsize=10)
    fig.savefig(path, dpi=110, format="png")


def plan_timelines(doc: dict[str, Any], stem: str) -> list[tuple[str, list[Panel]]]:
    """Reference each scenario's timeline files (paths relative to the result's folder, in stem/) as
    entry["timelines"], before the result is written; returns (scenario, panels) to draw after it."""
    todo = []
    for name, entry in doc.get("scenarios", {}).items():
        panels = _panels(entry)
        if panels:
            entry["timelines"] = {"png": f"{stem}/timeline_{name}.png", "trace": f"{stem}/timeline_{name}.trace.json"}
            todo.append((name, panels))
    return todo


def write_timelines(doc: dict[str, Any], folder: Path, stem: str) -> list[Path]:
    """Draw each scenario's timelines and write them, each PNG once, into folder/stem/ through the one
    atomic writer (a stop leaves no half-written folder); a failure is recorded in the scenario's
    entry["timelines"]["why"], never raised: the numbers matter more than the picture."""
    files: dict[str, bytes] = {}
    for name, panels in plan_timelines(doc, stem):
        entry, buf = doc["scenarios"][name], io.BytesIO()
        try:
            render_png(name, panels, buf)
        except Exception as e:  # noqa: BLE001
            entry["timelines"] = {"why": f"could not draw the timeline: {type(e).__name__}: {e}"[:300]}
            continue
        files[Path(entry["timelines"]["png"]).name] = buf.getvalue()
        files[Path(entry["timelines"]["trace"]).name] = (json.dumps(chrome_trace(name, panels)) + "\n").encode()
    if not files:
        return []
    try:
        return write_files(folder / stem, files)
    except OSError as e:
        for entry in doc["scenarios"].values():
            if "png" in entry.get("timelines", {}):
                entry["timelines"] = {"why": f"could not write the timeline: {e.strerror or e}"[:300]}
        return []
