"""The result file: one JSON per `compare` run, carrying its environment, written atomically.

Files are never overwritten: a run writes results/<utc time>_<gpu or cpu>_<size>.json next to a
temporary file and renames it into place only when complete, so an interrupted run leaves nothing.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA = "triptych.result/1"
# A row's status: it ran ("ok"; "wrong" when a timed output missed its check), or why it did not.
STATUSES = ("ok", "wrong", "skipped", "error", "oom", "timeout", "crashed")
CLOCKS = ("host_return", "device_done", "device_events")


class ResultError(ValueError):
    """A result file that cannot be used; str(self) is the one-line reason."""


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def check_writable(folder: Path) -> None:
    """Fail early (before any work) if results cannot be written into folder."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-", delete=True):
            pass
    except OSError as e:
        raise ResultError(f"cannot write to {folder}: {e.strerror or e}") from None


def result_name(doc: dict[str, Any]) -> str:
    gpu = doc.get("environment", {}).get("gpu") or "cpu"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower() or "cpu"
    created = _dt.datetime.fromisoformat(doc["created"]).astimezone(_dt.timezone.utc)
    return f"{created:%Y%m%dT%H%M%SZ}_{slug}_{doc['size']}.json"  # letters, digits, '_', '-', '.' only


def unused_name(folder: Path, base: str, with_folder: bool = False) -> str:
    """base, or base with -1, -2, ... before its suffix: the first name not taken in folder (with_folder:
    nor the folder named after its stem, where the result's pictures go)."""
    path = folder / base
    stem, suffix = path.stem, path.suffix
    n = 1
    while path.exists() or (with_folder and (folder / path.stem).exists()):
        path = folder / f"{stem}-{n}{suffix}"
        n += 1
    return path.name


def write_atomic(doc: dict[str, Any], folder: Path, name: str | None = None) -> Path:
    """Write doc as JSON into folder under a new name; never replaces an existing file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / unused_name(folder, name or result_name(doc))
    text = json.dumps(_jsonable(doc), indent=1, sort_keys=False, allow_nan=False) + "\n"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)  # fails if path appeared meanwhile: no overwrite, ever
    except FileExistsError:
        return write_atomic(doc, folder, name)
    finally:
        os.unlink(tmp)
    return path


def load(path: str | Path) -> dict[str, Any]:
    """Load and validate a result file; ResultError with one line when it is not usable."""
    p = Path(path)
    if not p.exists():
        raise ResultError(f"{p}: no such file")
    if p.is_dir():
        raise ResultError(f"{p}: is a folder, not a result file")
    try:
        text = p.read_text()
    except OSError as e:
        raise ResultError(f"{p}: {e.strerror or e}") from None
    if not text.strip():
        raise ResultError(f"{p}: empty file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultError(f"{p}: not JSON (line {e.lineno}: {e.msg}); truncated?") from None
    validate(doc, str(p))
    return doc


def validate(doc: Any, where: str = "result") -> None:
    if not isinstance(doc, dict):
        raise ResultError(f"{where}: not a triptych result (top level is not an object)")
    schema = doc.get("schema")
    if schema != SCHEMA:
        raise ResultError(f"{where}: schema {schema!r} is not {SCHEMA!r}")
    for key, kind in (("created", str), ("size", str), ("environment", dict), ("scenarios", dict)):
        if not isinstance(doc.get(key), kind):
            raise ResultError(f"{where}: missing or malformed {key!r}")
    if not isinstance(doc["environment"].get("frameworks", {}), dict):
        raise ResultError(f"{where}: malformed environment.frameworks")
    if not isinstance(doc.get("complete", True), bool):
        raise ResultError(f"{where}: malformed 'complete'")
    not_run = doc.get("not_run", [])
    if not isinstance(not_run, list) or not all(isinstance(n, dict) and {"scenario", "why"} <= n.keys()
                                                for n in not_run):
        raise ResultError(f"{where}: malformed 'not_run'")
    for name, scn in doc["scenarios"].items():
        if not isinstance(scn, dict) or not isinstance(scn.get("rows"), list):
            raise ResultError(f"{where}: scenario {name!r} has no rows")
        points = scn.get("points", [])
        if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
            raise ResultError(f"{where}: scenario {name!r} has malformed points")
        for row in scn["rows"]:
            if not isinstance(row, dict) or not {"framework", "variant", "status"} <= row.keys():
                raise ResultError(f"{where}: scenario {name!r} has a malformed row")
            at = f"{where}: {name}/{row['framework']}/{row['variant']}"
            if row["status"] not in STATUSES:
                raise ResultError(f"{at} has an unknown status {row['status']!r}")
            point = row.get("point", 0)
            if points and not (isinstance(point, int) and 0 <= point < len(points)):
                raise ResultError(f"{at} names point {point!r} of {len(points)}")
            if row["status"] in ("ok", "wrong"):
                _validate_timing(row.get("timing"), at)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _validate_timing(t: Any, at: str) -> None:
    if not isinstance(t, dict):
        raise ResultError(f"{at} has no timing")
    for clock in ("host_return", "device_done"):
        st = t.get(clock)
        if not isinstance(st, dict) or not all(_number(st.get(k)) for k in ("median", "q1", "q3", "n")) or st["n"] < 1:
            raise ResultError(f"{at} has malformed {clock} timing")
    samples = t.get("samples", {})
    if not isinstance(samples, dict) or any(
            k not in CLOCKS or not isinstance(v, list) or not all(_number(x) for x in v) for k, v in samples.items()):
        raise ResultError(f"{at} has malformed timing samples")
    for clock, v in samples.items():
        if clock != "device_events" and len(v) != t[clock]["n"]:
            raise ResultError(f"{at} has {len(v)} {clock} samples where n is {t[clock]['n']}")
