"""The environment variables the harness pins so that the frameworks compare like with like, each with the
value it replaced, so that a child process can read a framework's real defaults without them.

The pins travel with the environment into every process the harness starts; the record of what each
replaced travels beside them in $TRIPTYCH_PINNED (JSON: variable -> the user's value, or null where the
user had none), written by the first process that pins a variable, so that a worker two processes down
still knows which value was the user's. Why: a claim about a default must be able to fail (a user's own
CUPY_TF32=1 is that user's default; the harness's CUPY_TF32=0 is not CuPy's).
Nothing here imports a framework.
"""
from __future__ import annotations

import json
import os
from typing import Mapping

RECORD = "TRIPTYCH_PINNED"


def _record(env: Mapping[str, str]) -> dict[str, str | None]:
    try:
        got = json.loads(env.get(RECORD) or "{}")
    except ValueError:
        return {}
    return {str(k): (None if v is None else str(v)) for k, v in got.items()} if isinstance(got, dict) else {}


def pin(var: str, value: str) -> None:
    """Set os.environ[var] = value, remembering the value it replaced (only the first time it is pinned)."""
    record = _record(os.environ)
    if var not in record:
        record[var] = os.environ.get(var)
        os.environ[RECORD] = json.dumps(record, sort_keys=True)
    os.environ[var] = value


def unpinned(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of env (default: this process's) with every pinned variable back at the user's value (removed
    where the user had none) and the record dropped."""
    env = dict(os.environ if env is None else env)
    for var, value in _record(env).items():
        if value is None:
            env.pop(var, None)
        else:
            env[var] = value
    env.pop(RECORD, None)
    return env
