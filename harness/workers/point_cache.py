"""A point's host inputs and reference, made once in a compare run and read back by its other processes.

Every framework times a point in two processes (harness/workers/processes.py), and all six need the same host
inputs and float64 reference, deterministic from the params. Made in each, they were the largest
untimed cost of several scenarios in a GPU run (sync_points' 1 GiB of inputs: seconds a process;
docs/design/untimed_costs.md). The first process to reach a point
writes them as .npy files to the run's folder ($TRIPTYCH_POINT_CACHE, made by the runner, emptied after
each point, removed with the run); the others read the inputs back into fresh arrays with np.load, not as
memory maps, so that what an impl copies from is ordinary anonymous memory in every process. The reference
comes back as a copy-on-write memory map: only the untimed checks read it, a chunk at a time, and copying it
whole cost a process seconds (donation's 2 GiB reference; docs/design/processes.md).
Without the variable (tests, a rank under torchrun) every process makes its own.

The same folder keeps the verdicts of the timed checks against the reference (remember / recall),
keyed by how the outputs are judged (harness/check/outputs.py judged_alike: a tolerance, a hazard or not) and a
digest of their bytes: a process whose outputs are the bytes another process, framework or variant already
checked the same way gets that check's verdict, error and output metrics without comparing 64 M elements in
float64 again (matmul_precision: seconds a check, most of its timing phase). Outputs that differ by one bit are
compared in full, so a wrong output is still caught.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any

import numpy as np

from harness.check.outputs import Verdict  # what a check found, kept here for other processes
from scenarios.spec import Arrays, Params, Scenario


ENV = "TRIPTYCH_POINT_CACHE"
# The run's persistent compilation cache (JAX's, harness/backends/jax_backend.py): every JAX worker compiled
# every variant in its own process, 14 s a process in a full GPU run; more processes a row, more compiles.
# The first process of a point compiles (its first_call_s, the row's, stays a cold compile) and writes
# the program; the row's later processes read it. Removed with the run: no run reads another's programs.
COMPILE_ENV = "TRIPTYCH_COMPILE_CACHE"


def make(scn: Scenario, params: Params) -> tuple[Arrays, Arrays | None]:
    inputs = scn.make_inputs(params)
    return inputs, scn.reference(inputs, params) if scn.cheap_reference(params) else None


def _key(scn: Scenario, params: Params) -> str:
    return hashlib.sha256(json.dumps([scn.name, params], sort_keys=True, default=str).encode()).hexdigest()[:24]


def inputs_and_reference(scn: Scenario, params: Params) -> tuple[Arrays, Arrays | None]:
    """(host inputs, reference or None where it is too costly), from the run's cache where there is one."""
    root = os.environ.get(ENV)
    if not root or not os.path.isdir(root):
        return make(scn, params)
    path = os.path.join(root, _key(scn, params))
    if os.path.isdir(path):
        return _read(path)
    inputs, expected = make(scn, params)
    _write(root, path, inputs, expected)
    return inputs, expected


def _storable(arrays: Arrays | None) -> bool:
    return arrays is None or all(type(a) is np.ndarray and a.dtype != object for a in arrays.values())


def _write(root: str, path: str, inputs: Arrays, expected: Arrays | None) -> None:
    if not (_storable(inputs) and _storable(expected)):
        return  # a scalar or an object array would not come back as it went in: each process makes its own
    tmp = tempfile.mkdtemp(dir=root, prefix=".part-")
    try:
        meta: dict[str, list[str] | None] = {"inputs": list(inputs), "reference": None if expected is None else list(expected)}
        for part in ("inputs", "reference"):
            for i, a in enumerate((inputs if part == "inputs" else expected or {}).values()):
                np.save(os.path.join(tmp, f"{part}-{i}.npy"), a, allow_pickle=False)
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f)
        os.rename(tmp, path)  # whole or absent: a reader never sees a half-written point
    except OSError:  # a full disk costs the next process its own make, not the run
        shutil.rmtree(tmp, ignore_errors=True)


def _read(path: str) -> tuple[Arrays, Arrays | None]:
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)

    def part(name: str, mmap: str | None = None) -> Arrays:
        return {k: np.load(os.path.join(path, f"{name}-{i}.npy"), mmap_mode=mmap) for i, k in enumerate(meta[name])}

    # the reference mapped, not copied ("c": a write stays in this process); the inputs as fresh arrays
    return part("inputs"), None if meta["reference"] is None else part("reference", "c")


DIGEST_MIN_BYTES = 8 << 20  # below this a comparison costs less than hashing and a file


def digest(outputs: Any) -> str | None:
    """sha256 of numpy outputs (an array or a dict of them): names, dtypes, shapes and bytes; None where
    there is no run cache, the outputs are small (DIGEST_MIN_BYTES) or not plain arrays."""
    root = os.environ.get(ENV)
    arrays = outputs if isinstance(outputs, dict) else {"": outputs}
    if not root or not all(isinstance(a, np.ndarray) and not a.dtype.hasobject for a in arrays.values()):
        return None
    if sum(a.nbytes for a in arrays.values()) < DIGEST_MIN_BYTES:
        return None
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(json.dumps([k, a.dtype.str, a.shape]).encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def _verdict_path(scn: Scenario, params: Params, alike: str, key: str) -> str | None:
    root = os.environ.get(ENV)
    if not root or not os.path.isdir(root):
        return None
    return os.path.join(root, f"verdicts-{_key(scn, params)}", f"{alike}-{key[:40]}.json")


def recall(scn: Scenario, params: Params, alike: str, key: str | None) -> Verdict | None:
    """What remember stored for outputs of digest `key` at this point, judged as `alike` names (checked against
    its reference), or None."""
    path = _verdict_path(scn, params, alike, key) if key else None
    if path is None or not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def remember(scn: Scenario, params: Params, alike: str, key: str | None, known: Verdict) -> None:
    """Store a check's outcome ({"err", "verdict", "metrics"?}, JSON) for outputs of digest `key`, judged as
    `alike` names."""
    path = _verdict_path(scn, params, alike, key) if key else None
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".part-")
        with os.fdopen(fd, "w") as f:
            json.dump(known, f)
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):  # a full disk, or metrics that JSON cannot hold: no shortcut
        pass


def start() -> str:
    """A fresh cache folder for this run, named in the environment that worker processes inherit; beside
    it the run's compilation cache (COMPILE_ENV), which lives as long as the run."""
    root = tempfile.mkdtemp(prefix="triptych-points-")
    os.environ[ENV] = root
    os.mkdir(root + "-compiled")
    os.environ[COMPILE_ENV] = root + "-compiled"
    return root


def clear(root: str | None = None) -> None:
    """Forget every point (after a point is timed: the disk holds one point at a time); root: a cache
    folder of its own (an interleaved run's side), else the one this process's environment names."""
    root = root or os.environ.get(ENV)
    if root and os.path.isdir(root):
        for name in os.listdir(root):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def stop(root: str) -> None:
    if os.environ.get(ENV) == root:
        del os.environ[ENV]
    if os.environ.get(COMPILE_ENV) == root + "-compiled":
        del os.environ[COMPILE_ENV]
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(root + "-compiled", ignore_errors=True)


def orphaned() -> None:
    """The run's cache folders, removed by a worker whose parent died (harness/workers/protocol.py serve):
    nobody else is left to remove them from the temporary folder."""
    for key in (ENV, COMPILE_ENV):
        root = os.environ.get(key)
        if root and os.path.basename(root).startswith("triptych-points-"):
            shutil.rmtree(root, ignore_errors=True)
