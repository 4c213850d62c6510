"""The result file: one JSON per `compare` run, carrying its environment, written atomically.

Files are never overwritten: a run writes <out>/<utc time>_<gpu or cpu>_<size>.json through the
one atomic writer (harness/results/files.py), so an interrupted write leaves nothing. A file is read back
through `read` only (or `load`, its dict view), which upgrades an older version's document (upgrade),
validates it as a whole against harness/results/schema/result.schema.json and returns the typed Result
(harness/results/model.py).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import json
import math
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import numpy as np

from harness.results import files
from harness.results.model import Json, Result, counts_of
from harness.results.schema_check import Checker, SchemaError

SCHEMA = "triptych.result/2"
# Older versions `read` upgrades: /1 is /2's document under the old name (harness/results/schema/result-1.schema.json)
UPGRADES = ("triptych.result/1",)
# A row's status: it ran ("ok"; "wrong" when a timed output missed its check), or why it did not.
STATUSES = ("ok", "wrong", "skipped", "error", "oom", "timeout", "crashed")


class ResultError(ValueError):
    """A result file that cannot be used; str(self) is the one-line reason."""


def _text(x: str) -> str:
    """x as text that UTF-8 can hold: a lone surrogate (an undecodable byte of a path or an argument, a
    \\udc80 escape in a file) is written as its escape, so that every writer of the text (the result, the
    report, a terminal) can encode it."""
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        return x.encode("utf-8", "backslashreplace").decode("utf-8")
    return x


def _jsonable(x: Any) -> Any:
    if isinstance(x, str):
        return _text(x)
    if isinstance(x, dict):
        return {_text(str(k)): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def gpu_slug(gpu: str | None) -> str:
    """A GPU's name as result file names spell it: cpu without a GPU."""
    return re.sub(r"[^A-Za-z0-9]+", "-", gpu or "cpu").strip("-").lower() or "cpu"


def result_name(doc: Result | Json) -> str:
    if isinstance(doc, Result):
        doc = doc.to_dict()
    slug = gpu_slug(doc.get("environment", {}).get("gpu"))
    created = _dt.datetime.fromisoformat(doc["created"]).astimezone(_dt.timezone.utc)
    return f"{created:%Y%m%dT%H%M%SZ}_{slug}_{doc['size']}.json"  # letters, digits, '_', '-', '.' only


def unused_name(folder: Path, base: str, with_folder: bool = False) -> str:
    """base, or base with -1, -2, ... before its suffix: the first name not taken in folder (with_folder:
    nor the folder named after its stem, where the result's pictures go). Only a hint: claim_name is
    what makes a name one run's alone."""
    path = folder / base
    stem, suffix = path.stem, path.suffix
    n = 1
    while path.exists() or (with_folder and (folder / path.stem).exists()):
        path = folder / f"{stem}-{n}{suffix}"
        n += 1
    return path.name


def claim_name(folder: Path, doc: Result | Json) -> str:
    """Claim the result's name in folder for this run alone: its pictures' folder (stem/, os.mkdir) and
    an empty placeholder file (O_CREAT|O_EXCL), both atomic, so that two runs writing into one folder
    at the same moment never share or replace each other's files. write_atomic(..., claimed=True)
    then replaces the placeholder. A folder that takes nothing (full, read-only): the first free name,
    unclaimed, for write_or_rescue to deal with."""
    base = Path(result_name(doc))
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return unused_name(folder, base.name, with_folder=True)
    for n in range(10_000):
        stem = base.stem if n == 0 else f"{base.stem}-{n}"
        try:
            os.mkdir(folder / stem)
        except FileExistsError:
            continue
        except OSError:
            return unused_name(folder, base.name, with_folder=True)
        try:
            os.close(os.open(folder / f"{stem}{base.suffix}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            os.rmdir(folder / stem)
            continue
        except OSError:
            os.rmdir(folder / stem)
            return unused_name(folder, base.name, with_folder=True)
        return f"{stem}{base.suffix}"
    raise OSError(f"{folder}: no free name for {base.name} after 10000 tries")


def release_folder(folder: Path, name: str) -> None:
    """Remove the pictures' folder that claim_name made for name where nothing was put in it."""
    with contextlib.suppress(OSError):
        os.rmdir(Path(folder) / Path(name).stem)


def as_written(doc: Result | Json) -> Json:
    """doc as a reader of its file gets it back (numpy scalars, tuples and infinities as JSON has them),
    without the schema check: what `compare` renders its report from."""
    if isinstance(doc, Result):
        doc = doc.to_dict()
    return json.loads(json.dumps(_jsonable(doc), allow_nan=False))


def write_atomic(doc: Result | Json, folder: Path, name: str | None = None, claimed: bool = False) -> Path:
    """Write doc as JSON into folder under a new name; never replaces an existing file, except the
    placeholder of a name this run claimed (claim_name; claimed=True)."""
    data = _encode(doc)
    if claimed and name is not None and _is_placeholder(Path(folder) / name):
        return files.write_files(folder, {name: data})[0]
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            return files.write_files(folder, {unused_name(folder, name or result_name(doc)): data}, exclusive=True)[0]
        except FileExistsError:  # the name was taken meanwhile: the next one
            continue


def _encode(doc: Result | Json, default: Callable[[Any], Any] | None = None) -> bytes:
    if isinstance(doc, Result):
        doc = doc.to_dict()
    return (json.dumps(_jsonable(doc), indent=1, sort_keys=False, allow_nan=False, default=default) + "\n").encode()


def _unwritten(x: Any) -> Any:
    if isinstance(x, bytes):  # a --profile trace, which only the final result's folder holds
        return f"{len(x)} bytes, written beside the final result"
    raise TypeError(f"{type(x).__name__} in a result document")


def checkpoint_name(doc: Result | Json) -> str:
    """The name of a running compare's checkpoint (its result's stem, this process, .partial.json): one run's
    alone, and not a result name, so that nothing reads it as a finished run (harness/report/docs.py)."""
    return f"{Path(result_name(doc)).stem}.pid{os.getpid()}.partial.json"


def write_checkpoint(doc: Result | Json, folder: Path) -> Path:
    """doc, the run so far, into folder under checkpoint_name, replacing the last checkpoint atomically."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    return files.write_files(folder, {checkpoint_name(doc): _encode(doc, default=_unwritten)})[0]


def _is_placeholder(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def write_or_rescue(doc: Result | Json, folder: Path, name: str, claimed: bool = False) -> tuple[Path, str | None]:
    """(where the result went, None) or, when folder cannot take it (full disk, turned read-only, a file
    size limit), (the rescue copy, the one-line reason naming where it went): measurements that were made
    are never thrown away while some place can hold them. The last place is the smallest form: the
    document compact and gzip-compressed (a tenth of the bytes), in the same places, for a limit on the
    size of a file. NowhereToWrite (one line) where none could take it.
    claimed: name was claimed by claim_name (its placeholder is replaced, or removed on a rescue)."""
    try:
        return write_atomic(doc, folder, name, claimed=claimed), None
    except OSError as e:
        why = f"could not write the result into {folder}: {e.strerror or e}"
        if claimed and _is_placeholder(Path(folder) / name):
            with contextlib.suppress(OSError):
                os.unlink(Path(folder) / name)
            release_folder(folder, name)
    tried = []
    for rescue in files.rescue_folders():
        try:
            return write_atomic(doc, rescue, name), why
        except OSError as e:
            tried.append(f"{rescue}: {e.strerror or e}")

    plain = doc.to_dict() if isinstance(doc, Result) else doc
    packed = gzip.compress(json.dumps(_jsonable(plain), separators=(",", ":"), allow_nan=False).encode(), mtime=0)
    for place in (Path(folder), *files.rescue_folders()):
        try:
            place.mkdir(parents=True, exist_ok=True)
            path = files.write_files(place, {unused_name(place, name + ".gz"): packed}, exclusive=True)[0]
        except OSError:
            continue
        return path, (f"{why}; nor in {'; '.join(tried)}; so compressed, the smallest form (gunzip it to read it; "
                      f"{len(packed)} bytes)")
    raise files.NowhereToWrite(f"{why}; no rescue folder could take it either ({'; '.join(tried)}), not even "
                         f"compressed ({len(packed)} bytes)")


def refused(doc: Result | Json) -> str | None:
    """Why `read` would refuse doc once written (one line), or None: a writer checks what it wrote with
    the readers' own check, so that a run never passes with a file that report and regress refuse."""
    try:
        validate(as_written(doc))
    except ResultError as e:
        return str(e)
    return None


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
MAX_BYTES = 256 << 20  # a full run of every scenario is a few MB
MAX_DEPTH = 32  # a result nests about ten deep
MAX_DIGITS = 40  # an integer in a result (a seed, a count) has at most 20


def read(path: str | Path) -> Result:
    """The one loader: a result file parsed, upgraded to this version (upgrade), validated as a whole
    and typed; ResultError with one line naming what is wrong."""
    p = Path(path)
    if p.suffix != ".json" and not p.is_dir():
        raise ResultError(f"{p}: not a result file (their names end in .json)")
    try:
        data = files.read_regular(p, MAX_BYTES)
    except IsADirectoryError:
        raise ResultError(f"{p}: is a folder, not a result file") from None
    except FileNotFoundError:
        raise ResultError(f"{p}: no such file") from None
    except OSError as e:
        raise ResultError(f"{p}: {e.strerror or e}") from None
    except ValueError as e:
        raise ResultError(f"{p}: {'is a folder, not a result file' if p.is_dir() else e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ResultError(f"{p}: not UTF-8 text (byte {e.start}: {e.reason}); not a result file") from None
    if not text.strip():
        raise ResultError(f"{p}: empty file")
    try:
        doc = json.loads(text, parse_constant=_no_constant, parse_int=_int, parse_float=_float,
                         object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise ResultError(f"{p}: not JSON (line {e.lineno}: {e.msg}); truncated?") from None
    except RecursionError:
        raise ResultError(f"{p}: nested deeper than a result file ever is") from None
    except ValueError as e:
        raise ResultError(f"{p}: {e}") from None
    if _SURROGATE.search(text):  # only an escape in the text can make one: UTF-8 itself holds none
        doc = _jsonable(doc)
    doc = upgrade(doc)
    validate(doc, str(p))
    return Result.from_dict(doc)


def upgrade(doc: Any) -> Any:
    """An older version's document as this version has it; anything else as it is (validate names it).
    /1 -> /2: the version alone: /2 declares fields /1 left open (a row's sync_method, ranks, a
    timing's noise, ...), which /1 files have with the same types, and changes no shape."""
    if isinstance(doc, dict) and doc.get("schema") in UPGRADES:
        return {k: (SCHEMA if k == "schema" else v) for k, v in doc.items()}
    return doc


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"not a result file: an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def _float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"not a result file: the number {text[:40]} is too large for a float")
    return x


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> Json:  # a JSON object as read: free-form
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"not a result file: the key {dup[:60]!r} appears twice in one object")
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"not a result file: JSON has no {name} (a result writes NaN as null)")


def _depth(doc: Any) -> int:
    deepest, todo = 0, [(doc, 1)]
    while todo:
        x, d = todo.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break
        if isinstance(x, dict):
            todo += [(v, d + 1) for v in x.values()]
        elif isinstance(x, list):
            todo += [(v, d + 1) for v in x]
    return deepest


_CHECKER: list[Any] = []


def validate(doc: Any, where: str = "result") -> None:
    """The whole document against harness/results/schema/result.schema.json (harness/results/schema_check.py: the same
    check with or without jsonschema installed), then what a schema cannot say: a row's point within
    the scenario's points, one row per framework x variant x point, samples that agree with their
    counts. ResultError with one line naming the field."""
    doc = upgrade(doc)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ResultError(f"{where}: not a triptych result (schema {got if not isinstance(got, str) else got[:60]!r} "
                          f"is not {SCHEMA!r}{''.join(f' nor {u!r}' for u in UPGRADES)})")
    if _depth(doc) > MAX_DEPTH:
        raise ResultError(f"{where}: nested deeper than a result file ever is ({MAX_DEPTH} levels)")
    if not _CHECKER:
        _CHECKER.append(Checker(json.loads((Path(__file__).parent / "schema" / "result.schema.json").read_text())))
    try:
        _CHECKER[0].check(doc)
    except SchemaError as e:
        raise ResultError(f"{where}: {e}"[:400]) from None
    for name, scn in doc["scenarios"].items():
        points = len(scn.get("points") or [])
        seen: set[tuple[str, str, int]] = set()
        for i, row in enumerate(scn["rows"]):
            at = f"{where}: scenarios.{name}.rows[{i}]"
            if row.get("scenario", name) != name:
                raise ResultError(f"{at}.scenario: {row['scenario']!r} in the rows of {name}")
            if points and row.get("point", 0) >= points:
                raise ResultError(f"{at}.point: {row['point']} names a point of {points}")
            key = (row["framework"], row["variant"], row.get("point", 0))
            if key in seen:
                raise ResultError(f"{at}: a second row for {key[0]}/{key[1]} at point {key[2]}")
            seen.add(key)
            _check_samples(row.get("timing") or {}, at)
        for i, c in enumerate(scn.get("claims") or []):
            if points and c.get("point", 0) >= points:
                raise ResultError(f"{where}: scenarios.{name}.claims[{i}].point: {c['point']} names a point of {points}")


def _check_samples(t: Json, at: str) -> None:  # a timing as its file has it, not yet trusted
    loops, done = t.get("host_loops"), (t.get("samples") or {}).get("device_done")
    if loops is not None and done is not None and len(loops) != len(done):
        raise ResultError(f"{at}.timing.host_loops: {len(loops)} loops where samples.device_done has {len(done)}")
    for clock, v in (t.get("samples") or {}).items():
        counts = counts_of(t, clock)
        if clock != "device_events" and isinstance(t.get(clock), dict) and len(v) != t[clock]["n"]:
            raise ResultError(f"{at}.timing.samples.{clock}: {len(v)} samples where n is {t[clock]['n']}")
        if counts and clock != "device_events" and sum(counts) != len(v):
            raise ResultError(f"{at}.timing.processes: their {'kernel_n' if clock == 'kernel' else 'n'} add up to "
                              f"{sum(counts)}, but samples.{clock} has {len(v)}")
