"""What a JAX call runs on the device: the programs it dispatches, eager ops included.

JAX dispatches a jitted function, and every eager op (an index, a reshape, `[None]`), as one compiled
program each. After the first call a C++ fast path skips Python, so nothing there can be counted;
`jax_programs` turns that path off for its block, so every dispatch goes through
pxla.ExecuteReplicated and is recorded by name. A timed JAX variant should dispatch the programs it
names and nothing else: an eager op in a timed region is host and device work the other frameworks
do not pay.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator

TRANSFERS = ("device_put", "make_array_from_process_local_data")


@contextlib.contextmanager
def jax_programs() -> Iterator[list[str]]:
    """Yield a list that fills with the name of every program dispatched inside the block."""
    import jax
    from jax._src import pjit
    from jax._src.interpreters import pxla

    names: list[str] = []
    call, fastpath = pxla.ExecuteReplicated.__call__, pjit._get_fastpath_data
    moves = {t: getattr(jax, t) for t in TRANSFERS}

    def counted(self, *args, **kwargs):
        names.append(self.name)
        return call(self, *args, **kwargs)

    def moved(name):
        def record(*args, **kwargs):
            names.append(name)
            return moves[name](*args, **kwargs)
        return record

    pxla.ExecuteReplicated.__call__ = counted
    for t in TRANSFERS:
        setattr(jax, t, moved(t))
    pjit._get_fastpath_data = lambda *a, **k: None
    jax.clear_caches()  # the fast paths already built would still skip Python
    try:
        yield names
    finally:
        pxla.ExecuteReplicated.__call__, pjit._get_fastpath_data = call, fastpath
        for t, f in moves.items():
            setattr(jax, t, f)


def eager_programs(names: list[str]) -> list[str]:
    """The entries of a jax_programs list that are eager ops (a program JAX made for one primitive)
    or host-to-device transfers, not programs the impl jitted."""
    import jax.numpy as jnp
    from jax import lax
    from jax._src import core

    prims = {v.name for m in list(sys.modules.values())
             if m and getattr(m, "__name__", "").startswith(("jax._src", "jax.lax"))  # CuPy puts an object in sys.modules
             for v in vars(m).values() if isinstance(v, core.Primitive)}
    library = prims | set(dir(jnp)) | set(dir(lax))  # jnp.ravel and friends are jitted library functions
    return [n for n in names if n in TRANSFERS or (n.startswith("jit(") and n[4:-1] in library)]
