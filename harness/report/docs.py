"""Generated documentation: docs/porting.md and docs/scenarios.md (the scenario index), from the scenario specs.

`python -m harness docs` (or `make docs`) rewrites both; `python -m harness docs --check` and
tests/test_docs.py fail when the committed ones differ from what the specs (and the committed GPU
result) give now. The porting guide holds, per concept, the frameworks' APIs side by side,
links to the impl files and the spec, the traps the specs state (framework notes, variants a
framework cannot express, GPU-only variants, hazards), and what the newest committed full-size GPU
result holding each scenario measured (numbers, framework gaps, refuted claims, hazards that went wrong).
Nothing here imports a framework: NOT_EXPRESSIBLE is read from the impl files' syntax tree.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from harness.backends import FRAMEWORKS, backend_class, in_prose
from harness.report.report import fmt_pct, fmt_s, points_of, sig, timed
from harness.results.files import read_regular, write_files
from harness.report.labels import NAMES, gpu_label, kernel_of, pct_of_floor
from harness.results.results import MAX_BYTES, ResultError, load

ROOT = Path(__file__).resolve().parent.parent.parent
PORTING = Path("docs/porting.md")
SCENARIOS = Path("docs/scenarios.md")
RESULT_NAME = re.compile(r"^\d{8}T\d{6}Z_[a-z0-9-]+_full(-\d+)?\.json$")
GAP = 1.2  # a framework this many times slower than the fastest at a variant is worth a line

# Defaults that differ between the frameworks and hold in every scenario, in the guide's order; each
# backend states its cell per topic (Backend.porting). The harness pins the first three
# (harness/backends/*.py) so that the frameworks compare like with like; a port has to pin them too.
DEFAULT_TOPICS: tuple[str, ...] = (
    "float32 matmul precision", "matrix-product library", "GPU memory at start", "wait for the device",
    "reads that wait (implicit syncs)", "user streams", "events", "host → device from numpy", "device → host",
    "sync detector", "first call",
)


class DocsError(Exception):
    """The docs cannot be generated (e.g. a committed result they read is damaged); str(self) is one line."""


# ---------------------------------------------------------------------------------------------- helpers

def _gpu_mark(v: Any) -> str:
    return gpu_label(v, " ", "*({})*")


def not_expressible(root: Path, scenario: str, fw: str) -> dict[str, str]:
    """The impl's NOT_EXPRESSIBLE = {variant: why}, read from its syntax tree (no framework import)."""
    path = root / "impls" / scenario / f"{fw}_impl.py"
    if not path.exists():
        return {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "NOT_EXPRESSIBLE" for t in targets) and node.value is not None:
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    raise DocsError(f"{path}: NOT_EXPRESSIBLE must be a literal dict") from None
                return {str(k): str(v) for k, v in value.items()}
    return {}


def _holds(path: Path) -> tuple[bool, set[str]] | None:
    """Whether a result file ran on a GPU and which scenarios it has rows for, from its JSON alone; None when
    it cannot tell (not JSON, not shaped like a result), so that results.load names what is wrong."""
    try:
        doc = json.loads(read_regular(path, MAX_BYTES))
        return bool(doc["environment"].get("gpu")), {n for n, s in doc["scenarios"].items() if (s or {}).get("rows")}
    except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
        return None


def gpu_results(root: Path, scenarios: list[str]) -> tuple[list[tuple[Path, dict[str, Any]]], int]:
    """The full-size GPU results committed in results/ that measure the given scenarios, newest first (file
    names start with their UTC time), and how many GPU results are committed in all.
    A time-limited GPU may split one `make compare` into several runs (`--budget`, then `--scenarios`), so
    each scenario is measured by the newest of these that holds it. Only those files are loaded, i.e.
    validated as a whole (seconds for a big one); the others are only parsed to see what they hold."""
    folder = root / "results"
    if not folder.is_dir():
        return [], 0
    found, committed, left = [], 0, set(scenarios)
    for path in sorted((p for p in folder.iterdir() if RESULT_NAME.match(p.name)), reverse=True):
        holds = _holds(path)
        if holds is not None and (not holds[0] or not holds[1] & left):
            committed += holds[0]
            continue
        try:
            doc = load(path)
        except ResultError as e:
            raise DocsError(str(e)) from None
        if doc["environment"].get("gpu"):
            committed += 1
            found.append((path, doc))
            left -= {n for n, scn in doc["scenarios"].items() if scn.get("rows")}
    return found, committed


def measured_by(results: list[tuple[Path, dict[str, Any]]], scenario: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest GPU result with rows for this scenario."""
    return next(((p, d) for p, d in results if (d["scenarios"].get(scenario) or {}).get("rows")), None)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _codes(apis: tuple[str, ...] | list[str]) -> str:
    return "<br>".join(f"`{a}`" for a in apis) or "—"


def _header() -> str:
    """A table's header over one column per framework (its display name), and the rule under it."""
    return ("| | " + " | ".join(NAMES[f] for f in FRAMEWORKS) + " |\n"
            + "|---" * (len(FRAMEWORKS) + 1) + "|\n")


def _defaults_table() -> str:
    """The frameworks' defaults side by side, each cell from its backend (Backend.porting)."""
    cells = {}
    for fw in FRAMEWORKS:
        porting = backend_class(fw).porting
        if missing := [t for t in DEFAULT_TOPICS if t not in porting]:
            raise DocsError(f"{fw}'s backend states no porting cell for {', '.join(missing)}")
        cells[fw] = porting
    return _header() + "\n".join(f"| **{_cell(topic)}** | " + " | ".join(_cell(cells[fw][topic]) for fw in FRAMEWORKS)
                                  + " |" for topic in DEFAULT_TOPICS)


# ---------------------------------------------------------------------------------------------- measured

def _gaps(rows: dict[str, dict[str, Any]], fws: list[str], variant: str, label: str) -> list[str]:
    """Frameworks far behind the fastest at one variant: device-done, and host-return where the call is async."""
    out = []
    at = f"`{variant}`" + (f" ({label})" if label else "")
    ok = [fw for fw in fws if timed(rows.get(fw))]
    done = {fw: rows[fw]["timing"]["device_done"]["median"] for fw in ok}
    ret = {fw: rows[fw]["timing"]["host_return"]["median"] for fw in ok}
    if len(done) > 1:
        best = min(done, key=done.get)
        out += [f"{NAMES.get(fw, fw)} takes {sig(d / done[best], 2)}× as long as {NAMES.get(best, best)} at {at}: "
                f"{fmt_s(d)} vs {fmt_s(done[best])} device-done" for fw, d in done.items() if d > GAP * done[best]]
    asynchronous = [fw for fw in ok if ret[fw] < 0.5 * done[fw]]
    if len(asynchronous) > 1:
        best = min(asynchronous, key=ret.get)
        out += [f"{NAMES.get(fw, fw)}'s call returns {sig(ret[fw] / ret[best], 2)}× later than "
                f"{NAMES.get(best, best)}'s at {at}: {fmt_s(ret[fw])} vs {fmt_s(ret[best])} host-return (dispatch cost)"
                for fw in asynchronous if ret[fw] > 1.5 * ret[best]]
    return out


def _measured(root: Path, scn: dict[str, Any], rel: str, gpu: str, talking: frozenset[str] = frozenset()) -> list[str]:
    """What the committed GPU result says about one scenario: numbers, gaps, refuted claims, hazards.
    ``talking``: the ids of its claims about communication, which a run of one rank cannot decide."""
    fws = [f for f in FRAMEWORKS if any(r["framework"] == f for r in scn["rows"])]
    points = points_of(scn)
    report = Path(rel).with_suffix("") / "report.md"
    link = f", [its report](../{report.as_posix()})" if (root / report).exists() else ""
    if _one_rank(scn):  # a rank scenario run by one rank: nothing moved between ranks, so no figure is published
        return [f"**{NOT_MEASURED_ONE_GPU}** The newest run ([{Path(rel).name}](../{rel}){link}) had one rank: see "
                "[what one GPU cannot show](#one-gpu)."] + \
            _claim_lines(scn, talking, [])
    out = [f"**Measured on {gpu}** ([{Path(rel).name}](../{rel}){link}): device-done median (host-return), and the "
           "kernel clock: the device's own busy time per call."]
    header = (["point"] if len(points) > 1 else []) + ["variant"] + [NAMES.get(f, f) for f in fws]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    gaps, hazards = [], []
    for i, p in enumerate(points):
        label = str(p.get("label") or "")
        for v in scn.get("variants", []):
            rows = {r["framework"]: r for r in scn["rows"] if r["variant"] == v["name"] and r.get("point", 0) == i}
            if not rows:
                continue
            cells = []
            for fw in fws:
                r = rows.get(fw)
                if not timed(r):
                    cells.append(f"{r['status']}" if r else "—")
                    continue
                t = r["timing"]
                floor = f", {fmt_pct(pct_of_floor(r))} of floor" if pct_of_floor(r) is not None else ""
                kernel = kernel_of(t)
                kernel_text = f", kernel {fmt_s(kernel['median'])}" if kernel else ""
                cells.append(f"{fmt_s(t['device_done']['median'])} ({fmt_s(t['host_return']['median'])}){kernel_text}"
                             f"{floor}")
                chk = r.get("check") or {}
                if v.get("hazard") and chk.get("wrong"):
                    hazards.append(f"hazard `{v['name']}` went wrong in {chk['wrong']} of {chk.get('checked', 0)} "
                                   f"runs in {NAMES.get(fw, fw)}" + (f" at {label}" if label else ""))
            lines.append("| " + " | ".join(([label] if len(points) > 1 else []) + [f"`{v['name']}`"] + cells) + " |")
            if not v.get("hazard"):
                gaps += _gaps(rows, fws, v["name"], label)
    out.append("\n".join(lines))
    return out + _claim_lines(scn, frozenset(), gaps + hazards)


NOT_MEASURED_ONE_GPU = "Not measured: one GPU."
ONE_GPU = ('<a id="one-gpu"></a>\n\n## What one GPU cannot show\n\nThe rank scenarios (parts 2-6) ran with one rank '
           "where the measured sections say *Not measured: one GPU*. At one rank nothing is communicated: the rows "
           "check each framework's path (its outputs against the reference) and time one small point per operation, "
           "the calls' own overhead, which this guide does not compare. Claims about communication are decided at "
           "two ranks or more, which needs a machine of several GPUs.")


def _one_rank(scn: dict[str, Any]) -> bool:
    return {int(r["ranks"]) for r in scn["rows"] if "ranks" in r} == {1}


def _claim_lines(scn: dict[str, Any], skip: frozenset[str], items: list[str]) -> list[str]:
    """items, then the scenario's refuted and confirmed claims (but those in skip), as one list; [] if empty."""
    claims = [c for c in scn.get("claims", []) if c["claim"] not in skip]
    for c in claims:
        if c["verdict"] == "refuted":
            at = f" at {c['label']}" if c.get("label") else ""
            who = NAMES.get(c["framework"], c["framework"])
            items.append(f"refuted for {who}{at}: “{c['text']}” — {c['evidence']}")
    confirmed = sorted({c["text"] for c in claims if c["verdict"] == "confirmed"})
    for text in confirmed:
        who = sorted({c["framework"] for c in claims if c["text"] == text and c["verdict"] == "confirmed"},
                     key=FRAMEWORKS.index)
        named = []
        for f in who:  # a framework confirmed at some points of a sweep only: at which (the others said above)
            mine = [c for c in claims if c["text"] == text and c["framework"] == f]
            at = [c.get("label") or "" for c in mine if c["verdict"] == "confirmed"]
            named.append(NAMES.get(f, f) + (f" at {'/'.join(at)}" if len(at) < len(mine) and all(at) else ""))
        items.append(f"confirmed for {', '.join(named)}: “{text}”")
    return ["\n".join(f"- {_cell(i)}" for i in items)] if items else []


# ---------------------------------------------------------------------------------------------- generators

def _traps(root: Path, s: Any) -> list[str]:
    """A scenario's traps: framework notes, what a framework cannot express, GPU-only variants, hazards."""
    traps = [f"**{NAMES.get(fw, fw)}**: {s.framework_notes[fw]}" for fw in FRAMEWORKS if fw in s.framework_notes]
    for fw in FRAMEWORKS:
        for variant, why in not_expressible(root, s.name, fw).items():
            traps.append(f"**{NAMES[fw]}** has no equivalent of `{variant}`: {why}")
    gpu_only = [v.name + ("" if v.gpu_only is True else f" (in {', '.join(NAMES[f] for f in v.gpu_only)})")
                for v in s.variants if v.gpu_only]
    if gpu_only:
        traps.append(f"{', '.join(f'`{v}`' for v in gpu_only)} need a CUDA device (streams, events or pinned "
                     "memory): on a CPU device they are skipped with that reason")
    for v in s.variants:
        if v.hazard:
            traps.append(f"`{v.name}` is a hazard: it is wrong by design some of the time ({v.doc}); every timed "
                         "run is checked and the report counts the wrong ones")
    return traps


def _defaults_that_differ(root: Path, results: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Part 7: per scenario that measures a default (its spec's agree_by), the setting that makes the three
    agree and what the newest GPU result measured (its claims' verdicts and numbers)."""
    from scenarios import all_scenarios

    out = []
    for s in (s for s in all_scenarios() if s.agree_by):
        out.append(f"### [{s.title}](#{s.name})\n\n"
                   + _header()
                   + "| **to agree** | " + " | ".join(_cell(s.agree_by.get(f, "—")) for f in FRAMEWORKS) + " |")
        measured = measured_by(results, s.name)
        if measured is None:
            out.append("Not yet measured on a GPU.")
            continue
        path, doc = measured
        claims = doc["scenarios"][s.name].get("claims", [])
        lines = [f"{c['verdict']} for {NAMES.get(c['framework'], c['framework'])}"
                 + (f" at {c['label']}" if c.get("label") else "") + f": {c['evidence']}"
                 for c in claims if c["verdict"] in ("confirmed", "refuted")]
        out.append(f"Measured ([{path.name}](../{path.relative_to(root).as_posix()})):\n\n"
                   + ("\n".join(f"- {_cell(t)}" for t in lines) or "- every claim inconclusive in that run"))
    return ["The defaults below are measured as scenarios of their own (part 7): each framework runs with its "
            "real default, then with the setting that makes the three agree."] + out if out else []


def porting_guide(root: Path = ROOT) -> str:
    from scenarios import all_scenarios

    results, committed = gpu_results(root, [s.name for s in all_scenarios()])
    source = {s.name: measured_by(results, s.name) for s in all_scenarios()}
    used = [(p, d) for p, d in results if any(m is not None and m[0] == p for m in source.values())]
    parts = [
        "# Porting guide: " + " ⇄ ".join(NAMES[f] for f in FRAMEWORKS),
        "<!-- Generated by `python -m harness docs` (`make docs`) from scenarios/*.py, impls/ and the newest "
        "full-size GPU result in results/. Do not edit by hand: tests/test_docs.py fails when this file is stale. -->",
        "Each concept of the host/device paradigm, done three ways. For every scenario: the APIs side by side, "
        "the three implementations (they define the same functions in the same order, so `diff` shows only the "
        "framework), the traps, and what the GPU measured.",
        "## Defaults that differ everywhere",
        "The first three are pinned by the harness (`harness/backends/`) so that the three compare like with like; "
        "a port has to pin them too.",
        _defaults_table(),
        *_defaults_that_differ(root, results),
        "## Concepts",
        "\n".join(f"{n}. [`{s.name}`](#{s.name}) — {s.title}" for n, s in enumerate(all_scenarios(), 1)),
    ]
    if not used:
        parts.append("No full-size GPU result is committed in `results/` yet: the measured sections appear once "
                     "one is (`make compare` on a GPU, then `make docs`).")
    for path, doc in used:
        env = doc["environment"]
        versions = ", ".join(f"{NAMES.get(fw, fw)} {i['env'].get('version', '?')}"
                             for fw, i in env.get("frameworks", {}).items() if i.get("available"))
        which = [name for name, m in source.items() if m is not None and m[0] == path]
        parts.append(f"Measured sections come from `{path.relative_to(root).as_posix()}` ({env['gpu']}, "
                     f"driver {env.get('host', {}).get('driver', '?')}; {versions})"
                     + (f": {', '.join(f'`{n}`' for n in which)}." if len(used) > 1 else "."))
    if any(s.ranks and m is not None and _one_rank(m[1]["scenarios"][s.name]) for s in all_scenarios()
           if (m := source[s.name]) is not None):
        parts.append(ONE_GPU)
    for n, s in enumerate(all_scenarios(), 1):
        parts.append(f'<a id="{s.name}"></a>\n\n## {n}. {s.name} — {s.title}')
        parts.append(f"> {s.concept}")
        impl = {fw: f"[`{fw}_impl.py`](../impls/{s.name}/{fw}_impl.py)" for fw in FRAMEWORKS}
        parts.append(_header()
                     + "| **APIs** | " + " | ".join(_codes(s.key_apis.get(fw, ())) for fw in FRAMEWORKS) + " |\n"
                     + "| **impl** | " + " | ".join(impl[fw] for fw in FRAMEWORKS) + " |")
        parts.append(f"Spec: [`scenarios/{s.name}.py`](../scenarios/{s.name}.py). Variants, baseline first:\n\n"
                     + "\n".join(f"- `{v.name}`" + (" *(hazard)*" if v.hazard else "")
                                 + _gpu_mark(v) + f" — {v.doc}" for v in s.variants))
        traps = _traps(root, s)
        if traps:
            parts.append("**Traps**\n\n" + "\n".join(f"- {_cell(t)}" for t in traps))
        if s.metrics_doc:
            parts.append("Metrics the impls report: " + "; ".join(f"`{k}` — {v}" for k, v in s.metrics_doc.items()))
        measured = source[s.name]
        if measured is not None:
            path, doc = measured
            parts += _measured(root, doc["scenarios"][s.name], path.relative_to(root).as_posix(),
                               doc["environment"]["gpu"], frozenset(c.id for c in s.claims if c.communicates))
        elif committed:
            parts.append("*Not in any committed GPU result.*")
    return "\n\n".join(parts) + "\n"


def scenario_index() -> str:
    """docs/scenarios.md: every scenario in the order of every report, with its variants and its section of the
    porting guide, and the scenarios a default run leaves out."""
    from scenarios import OPT_IN, all_scenarios

    lines = ["| # | scenario | concept | variants (baseline first) | porting guide |", "|---|---|---|---|---|"]
    for n, s in enumerate(all_scenarios(), 1):
        vs = ", ".join(f"`{v.name}`" + (" (hazard)" if v.hazard else "") for v in s.variants)
        lines.append(f"| {n} | [`{s.name}`](../scenarios/{s.name}.py) | {_cell(s.title)} | {vs} | "
                     f"[{in_prose(' ⇄ ', ' ⇄ ')}](porting.md#{s.name}) |")
    opt_in = "\n".join(f"- `{name}`: {why}" for name, why in OPT_IN.items())
    return "\n\n".join([
        "# Scenarios",
        "<!-- Generated by `python -m harness docs` (`make docs`) from scenarios/*.py. Do not edit by hand: "
        "tests/test_docs.py fails when this file is stale. -->",
        "One concept of the GPU host/device paradigm each, in the order of every report and of the "
        "[porting guide](porting.md). A *hazard* variant is wrong by design some of the time (a missing wait): "
        "it is left out of the equivalence check, and every timed run of it is checked and counted.",
        "\n".join(lines),
        "A default `make compare` leaves these out; `--scenarios` names them to run them:\n\n" + opt_in,
        f"Each scenario's three implementations are `impls/<scenario>/{{{','.join(FRAMEWORKS)}}}_impl.py`; they "
        "define the same functions in the same order, so "
        f"`diff impls/sync_points/{FRAMEWORKS[0]}_impl.py impls/sync_points/{FRAMEWORKS[-1]}_impl.py` shows "
        "only the framework. **[porting.md](porting.md)** puts them side by side per concept: the APIs of "
        "the three, links to the impl files, the defaults that differ (precision, memory, streams, events, "
        "transfer paths), what one framework cannot express, and what the newest committed GPU result measured. "
        "It and this index are generated from the specs: `make docs` (`python -m harness docs`) rewrites them, "
        "and a test fails when the committed ones are stale. To add a scenario, see "
        "[CONTRIBUTING.md](CONTRIBUTING.md#add-a-scenario).",
    ]) + "\n"


def generate(root: Path = ROOT) -> dict[Path, str]:
    """{path relative to root: the text it should hold}."""
    return {PORTING: porting_guide(root), SCENARIOS: scenario_index()}


def stale(files: dict[Path, str], root: Path = ROOT) -> list[Path]:
    out = []
    for rel, text in files.items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            out.append(rel)
    return out


def write(files: dict[Path, str], root: Path = ROOT) -> list[Path]:
    """Write the files that changed, each through the one atomic writer; returns their paths."""
    written = stale(files, root)
    for rel in written:
        write_files((root / rel).parent, {rel.name: files[rel].encode()})
    return written
