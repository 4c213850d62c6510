"""What a scenario's params may be, read from its own hypothesis strategy (and its size presets), so
that `check --params` refuses a zero, an absurd size or an unknown dtype in one line instead of
dividing by zero or asking for petabytes. The bounds are derived, never written twice."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scenarios.spec import Params, Scenario


@dataclass
class Domain:
    """One param: integers in [lo, hi] and/or one of `choices`."""

    lo: int | None = None
    hi: int | None = None
    choices: set[Any] = field(default_factory=set)

    def admit(self, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool):
            self.lo = value if self.lo is None else min(self.lo, value)
            self.hi = value if self.hi is None else max(self.hi, value)
        else:
            self.choices.add(value)

    def refuse(self, value: Any) -> str | None:
        """Why value is out of this domain, or None."""
        if value in self.choices and type(value) is not bool:
            return None
        if self.lo is not None and isinstance(value, int) and not isinstance(value, bool):
            return None if self.lo <= value <= self.hi else f"must be between {self.lo} and {self.hi}, not {value}"
        wanted = ([f"an integer in [{self.lo}, {self.hi}]"] if self.lo is not None else []) + \
                 ["one of " + ", ".join(map(repr, sorted(self.choices, key=str)))] * bool(self.choices)
        return f"must be {' or '.join(wanted)}, not {value!r}"


def _unwrap(s: Any) -> Any:
    while hasattr(s, "wrapped_strategy"):
        s = s.wrapped_strategy
    return s


def _collect(strategy: Any, d: Domain) -> None:
    s = _unwrap(strategy)
    if hasattr(s, "original_strategies"):  # one_of
        for o in s.original_strategies:
            _collect(o, d)
    elif hasattr(s, "start") and hasattr(s, "end"):  # integers(lo, hi)
        d.admit(s.start)
        d.admit(s.end)
    elif hasattr(s, "elements"):  # sampled_from
        for e in s.elements:
            d.admit(e)
    else:
        raise TypeError(f"cannot read bounds from the strategy {s!r}")


def domains(scn: Scenario) -> dict[str, Domain]:
    """{param: Domain}: the strategy's bounds, widened to the size presets' points (check may
    reproduce a timed point too)."""
    out: dict[str, Domain] = {}
    for key, strategy in _unwrap(scn.params()).mapping.items():
        _collect(strategy, out.setdefault(key, Domain()))
    if "seed" in out:  # a timed point carries the run's seed, drawn from 32 bits (compare --seed)
        out["seed"].admit(2**32 - 1)
    for size in ("smoke", "full"):
        for point in scn.points(size):
            for key, value in point.items():
                if key in out:
                    out[key].admit(value)
    return out


def refuse(scn: Scenario, params: Params) -> str | None:
    """The one-line reason params do not fit scn, or None."""
    ds = domains(scn)
    missing = [k for k in ds if k not in params]
    if missing:
        return f"missing {', '.join(missing)} (params: {', '.join(ds)})"
    extra = [k for k in params if k not in ds and k != "label"]
    if extra:
        return f"no param {', '.join(map(repr, extra))} (params: {', '.join(ds)})"
    for key, d in ds.items():
        why = d.refuse(params[key])
        if why:
            return f"{key} {why}"
    return None
