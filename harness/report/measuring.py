"""How a run spent its time and how fast its host was: the timed share and the host's speed over time.

A run's timing phase is worth what it measured: timing_phase holds its wall time against the seconds
inside timed repeats (harness/workers/processes.py phase), and host_speed every Python-loop measurement with its
wall-clock time (harness/measure/calibrate.py host_series), since a shared cloud host changes speed within a
run. Rows' host_sensitivity (harness/measure/noise.py) says which rows moved with it.
"""
from __future__ import annotations

from harness.report.render import Block
from harness.results.model import ROW_PARTS, HostLoop, Phase, Result

BINS = 10
PART_NAMES = {"warm_s": "first + warm-up", "before_s": "set-up between repeats", "check_s": "checks",
              "agree_s": "rank agreement"}


def _part(p: Phase, k: str) -> float | None:
    """One of a phase's parts by its field's name (ROW_PARTS, rows_s, ...)."""
    return getattr(p, k)


def phase_line(doc: Result) -> str | None:
    """One sentence on the run's timed share, or None for a result without one (older, or not timed)."""
    p = doc.timing_phase
    if not isinstance(p, Phase) or not p.wall_s:
        return None
    parts = ", ".join(f"{what} {_part(p, k):.1f} s" for k, what in (("rows_s", "rows"), ("served_s", "worker requests"),
                                                                      ("requests_s", "round trips"))
                      if isinstance(_part(p, k), (int, float)))
    return (f"timed share: {p.timed_s:.1f} s inside timed repeats of the timing phase's {p.wall_s:.1f} s "
            f"({100 * p.timed_s / p.wall_s:.0f}%)" + (f"; {parts}" if parts else ""))


def host_speed_rows(doc: Result, bins: int = BINS) -> list[list[str]]:
    """The run's host loop in up to `bins` equal stretches of time: [from, to (s after the first
    measurement), median ms, min ms, max ms, measurements]."""
    series = [e for e in doc.host_speed or [] if isinstance(e, HostLoop)]
    if not series:
        return []
    t0, t1 = series[0].at, series[-1].at
    width = max((t1 - t0) / bins, 1e-9)
    groups: dict[int, list[float]] = {}
    for e in series:
        groups.setdefault(min(int((e.at - t0) / width), bins - 1), []).append(e.loop_s * 1e3)
    rows = []
    for i, ms in sorted(groups.items()):
        ms.sort()
        rows.append([f"{i * width:.0f}", f"{(i + 1) * width:.0f}", f"{ms[len(ms) // 2]:.2f}", f"{ms[0]:.2f}",
                     f"{ms[-1]:.2f}", str(len(ms))])
    return rows


def host_speed_line(doc: Result) -> str | None:
    rows = host_speed_rows(doc)
    if not rows:
        return None
    return "host loop over the run (median ms per stretch of time): " + " · ".join(r[2] for r in rows)


def blocks(doc: Result) -> list[Block]:
    """The report's "Measuring" section: the timed share per scenario and the host's speed over time."""
    line = phase_line(doc)
    rows = host_speed_rows(doc)
    if line is None and not rows:
        return []
    out: list[Block] = [("h", 2, "Measuring", "measuring")]
    if line is not None:
        phases = {name: p for name, scn in doc.scenarios.items() if isinstance(p := scn.timing_phase, Phase)}
        parts = [k for k in ROW_PARTS if any(_part(p, k) is not None for p in phases.values())]  # from before: none
        out.append(("p", line[0].upper() + line[1:] + ": the rest is set-up, poisoning, checks, warm-up and "
                         "messages between the runner and its workers."
                    + (" Inside the rows' time: first and warm-up calls, the set-up before each repeat "
                       "(poisoning), checks, the rank groups' agreement after each repeat, and the rest (each "
                       "variant's state and its freeing, the sync census, the synchronizing around each repeat)."
                       if parts else "")))

        def rest(p: Phase) -> str:  # the rows' time that no part names: state, census, syncs, freeing
            known = [_part(p, k) for k in ("rows_s", "timed_s", *parts)]
            if not all(isinstance(x, (int, float)) for x in known):
                return "—"
            return f"{max(known[0] - sum(known[1:]), 0.0):.1f} s"

        out.append(("table", ["scenario", "timing phase", "timed", "share", "rows", *(PART_NAMES[k] for k in parts),
                               *(["rest of the rows"] if parts else []), "requests in the workers",
                               "requests' round trips"],
                    [[name, f"{p.wall_s:.1f} s", f"{p.timed_s:.1f} s",
                      f"{100 * p.share:.0f}%" if p.share is not None else "—",
                      *(f"{_part(p, k):.1f} s" if isinstance(_part(p, k), (int, float)) else "—"
                        for k in ("rows_s", *parts)),
                      *([rest(p)] if parts else []),
                      *(f"{_part(p, k):.1f} s" if isinstance(_part(p, k), (int, float)) else "—"
                        for k in ("served_s", "requests_s"))]
                     for name, p in phases.items()]))
    if rows:
        out.append(("p", "The host's speed over the run: the Python loop (harness/measure/calibrate.py) measured by every "
                         "worker at start-up and before every point it timed. A slower host shows as a longer loop; "
                         "rows whose `host_sensitivity` slope is near 1 move with it."))
        out.append(("table", ["from s", "to s", "loop median ms", "min ms", "max ms", "measurements"], rows))
    return out
