"""The check of a variant's timed outputs, handed to the timer (harness/measure/timing.py measure(check=)).

OutputCheck judges the outputs of the checked repeats against `want`: the float64 reference, or, where
the reference is too costly at the size, this framework's baseline outputs. It spends as little as the
verdict allows: outputs whose device digest (harness/backends/digest.py) is that of the first checked
outputs get the first verdict without a copy; outputs with the baseline's own digest pass with error 0;
a verdict on the same bytes by another process, framework or variant judged alike (judged_alike) stands
(the run's point cache, by device digest or sha256).
With nothing to check against it keeps a copy of the first outputs, which become the later variants'
`want`. Why a small object: the timer's loop stays about timing, and this state (the first verdict, the
errors, the metrics computed from the outputs) is one thing with its own tests.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, NotRequired, TypedDict

import numpy as np

from harness.check.equivalence import bit_exact, compare_outputs, relative_error
from scenarios.spec import Arrays, Params, Scenario, Variant

SAME_BYTES_SLICE = 1 << 20


class Verdict(TypedDict):
    """A check's outcome for outputs of one device digest (remember, recall; JSON in the run's cache): the
    outputs' relative error, the verdict, and the scenario's output metrics where they were computed."""

    err: float | None
    verdict: str | None  # None: right; else what was wrong
    metrics: NotRequired[dict[str, float]]


class OutputCheck:
    """check(outputs) -> None when right, else what is wrong. After the timed repeats: rel_errs (each
    checked repeat's error, hazards none), metrics (the scenario's output_metrics of the first outputs, where
    checked against the reference), captured (a copy of the first outputs, where there was nothing to check
    against, or where no digest could stand for them) and own_digest (those outputs' device digest).

    want_digest: the device digest of `want` where it is the baseline's outputs and its bytes pass a
    comparison with themselves: outputs with that digest are those bytes. cache: the run's point cache
    (harness/workers/point_cache.py: recall, remember, digest), where verdicts on the reference are shared."""

    def __init__(self, scn: Scenario, v: Variant, backend: Any, params: Params, want: Arrays | None,
                 want_is_reference: bool, want_digest: str | None, cache: Any) -> None:
        self.scn, self.v, self.b, self.params, self.want = scn, v, backend, params, want
        self.want_is_reference, self.want_digest, self.cache = want_is_reference, want_digest, cache
        self.rel_errs: list[float] = []
        self.metrics: dict[str, float] = {}
        self.captured: Arrays | None = None
        self.own_digest: str | None = None
        self._first: tuple[float | None, str | None, str | None] | None = None  # error, verdict, digest

    def __call__(self, out: Any) -> str | None:
        b, first = self.b, self._first
        if self.want is None:  # nothing to judge against: the first outputs become the later variants' want
            if self.captured is None:  # a copy: an impl may hand back a buffer of its state, which the next run overwrites
                self.captured, self.own_digest = copied(b.to_numpy(out)), b.digest(out)
            return None
        dev = b.digest(out)  # on the device: the same key, the same bytes, and no host copy to learn it
        got = None
        if first is not None and dev is not None and dev == first[2]:
            err, verdict = first[:2]  # the same bytes get the same verdict: not compared again
        elif dev is not None and dev == self.want_digest:  # the baseline's own bytes: equal, element for element
            err, verdict = None if self.v.hazard else 0.0, None
            self._first = self._first or (err, verdict, dev)
        elif (first is not None and dev is None and first[2] is None
              and same_bytes(got := b.to_numpy(out), self.captured)):
            err, verdict = first[:2]
        else:
            err, verdict, got = self._judge(out, got, first is None, dev)
            if first is None:
                self._first = (err, verdict, dev)
                if dev is None:  # later outputs are compared with these bytes
                    self.captured = copied(got)
        if err is not None:
            self.rel_errs.append(err)
        return verdict

    def _judge(self, out: Any, got: Arrays | None, is_first: bool, dev: str | None) -> tuple[float | None, str | None, Any]:
        """(relative error or None for a hazard, what is wrong or None, the numpy outputs or None where a
        verdict was recalled); the first output's metrics too. Against the shared reference, another
        process's verdict on the same bytes (by device digest or else by sha256) stands."""
        scn, params, v, want, cache = self.scn, self.params, self.v, self.want, self.cache
        metrics = is_first and scn.output_metrics is not None and self.want_is_reference and not v.hazard

        def usable(known: Verdict | None) -> bool:
            return known is not None and (not metrics or "metrics" in known)

        alike = judged_alike(v)
        known = cache.recall(scn, params, alike, dev) if self.want_is_reference else None
        if not usable(known):
            got = self.b.to_numpy(out) if got is None else got
            exact = bit_exact(scn, params, want, v.name)  # one pass decides; sha256 would cost more than it saves
            key = cache.digest(got) if self.want_is_reference and dev is None and (metrics or not exact) else None
            known = cache.recall(scn, params, alike, key)
            if not usable(known):
                errors: list[float] = []  # each output's relative error, from the comparison's own pass
                m = compare_outputs(scn, params, got, want, variant=v.name, errors=None if v.hazard or exact else errors)
                # bit-exact outputs that pass equal the reference element for element: their error is 0; wrong
                # ones (rare) take relative_error's pass over every output
                err = (None if v.hazard else 0.0 if exact and m is None else max(errors, default=0.0) if m is None
                       else float(relative_error(got, want)))
                known = {"err": err, "verdict": None if m is None else m.describe()}
                if metrics:
                    known["metrics"] = {k: float(x) for k, x in scn.output_metrics(got, want, params).items()}
                cache.remember(scn, params, alike, key, known)
            if self.want_is_reference:
                cache.remember(scn, params, alike, dev, known)
        assert known is not None
        if metrics:
            self.metrics.update(known["metrics"])
        return known["err"], known["verdict"], got


def judged_alike(v: Variant) -> str:
    """The name a verdict on given bytes is kept under in the point cache: what a check depends on besides
    the bytes and the point, the variant's own tolerance (or the scenario's) and whether it is a hazard (whose
    error is not kept). Variants alike in both share verdicts, across frameworks too: most variants of a
    scenario compute the same values by other means (donation's new_buffer and in_place write the same
    1 GiB). Outputs the cache can key (a device digest from 1 MiB, sha256 from 8 MiB) are then compared with
    the reference once a point, not once a variant."""
    tol = "scenario" if v.tolerance is None else hashlib.sha256(
        json.dumps(sorted(v.tolerance.by_dtype.items())).encode()).hexdigest()[:12]
    return f"{'hazard' if v.hazard else 'timed'}-{tol}"


def copied(a: Any) -> Any:
    """numpy outputs (arrays, or dicts of them) copied; anything else as it is."""
    if isinstance(a, dict):
        return {k: copied(x) for k, x in a.items()}
    return np.array(a, copy=True) if isinstance(a, np.ndarray) else a


def has_nan(a: Any) -> bool:
    """Does a numpy output (an array, or a dict of them) hold a NaN? In slices, as same_bytes reads."""
    if isinstance(a, dict):
        return any(has_nan(x) for x in a.values())
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "fc":
        return False
    flat = np.ravel(a, order="K")
    step = max(1, SAME_BYTES_SLICE // max(1, a.itemsize))
    return any(np.isnan(flat[i:i + step]).any() for i in range(0, flat.size, step))


def same_bytes(a: Any, b: Any) -> bool:
    """Are two numpy outputs (arrays, or dicts of them) the same bytes, dtypes and shapes? A check's
    verdict is a function of the outputs alone, so outputs equal to already checked ones need no second
    comparison with the reference (a float64 comparison of 8192 x 8192 took seconds a check:
    docs/design/untimed_costs.md). Anything else (objects, differing keys) is not the same: it is compared
    in full."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(same_bytes(a[k], b[k]) for k in a))
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.hasobject:
        return False
    dense = all(v.flags.c_contiguous or v.flags.f_contiguous for v in (a, b))
    if dense and a.strides == b.strides:  # one layout (a transposed output, as .cpu() keeps it): memory order
        x, y = (np.ravel(v, order="K").view(np.uint8) for v in (a, b))
    else:  # layouts that differ, or gaps: element order, which copies
        x, y = (np.ascontiguousarray(v).reshape(-1).view(np.uint8) for v in (a, b))
    # in 1 MiB slices: one comparison of a whole output first builds a boolean array as large as it,
    # whose fresh pages cost seconds a GiB on a cloud host
    return all(np.array_equal(x[i:i + SAME_BYTES_SLICE], y[i:i + SAME_BYTES_SLICE])
               for i in range(0, x.size, SAME_BYTES_SLICE))
