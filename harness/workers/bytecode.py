"""Compiled Python for the harness's own processes, where the interpreter keeps none.

A Python that writes no bytecode (PYTHONDONTWRITEBYTECODE, -B), over packages installed without their
compiled modules, compiles every module it imports from source, in every process: seconds of each worker's
start, some of them inside `prepare`, on the timing phase's path (docs/design/processes.md has a GPU host's
figures). There the run keeps its compiled modules in a folder of its own
(sys.pycache_prefix), and its workers and ranks read and write them there.

Each process sets this in itself, at its start (keep): nothing reaches a process through its environment but
the folder's name, so the processes a worker starts (cold_start's and memory_pools' children, which time a
user's cold start) compile as the user's own processes do. Nothing here imports a framework.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ENV = "TRIPTYCH_PYCACHE"  # the folder, from a run to its workers and ranks; set to "off" by a user: none
OFF = "off"


def uncompiled(modules: tuple[str, ...] | None = None) -> list[str]:
    """The installed modules among these (default: numpy and the frameworks, what a worker imports most of)
    whose package has no usable compiled file beside its source (found, not imported)."""
    if modules is None:
        try:
            from harness.backends import FRAMEWORKS  # a framework's name is its module's
        except ImportError:  # the harness's own dependencies are missing: python -m harness says which, next
            return []
        modules = ("numpy", *FRAMEWORKS)
    out = []
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None)
        if origin and origin.endswith(".py") and not _compiled(origin):
            out.append(name)
    return out


def _compiled(source: str) -> bool:
    """Whether the file compiled from source beside it (where the install left it) is one this Python reads:
    its magic number, and the source's time and size where it records them (PEP 552: else its hash, taken
    as checked)."""
    prefix, sys.pycache_prefix = sys.pycache_prefix, None
    try:
        compiled = importlib.util.cache_from_source(source)
    finally:
        sys.pycache_prefix = prefix
    try:
        with open(compiled, "rb") as f:
            head = f.read(16)
        st = os.stat(source)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(head[4:8], "little") & 1:  # hash-based
        return True
    return (int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)


def folder(environ: dict[str, str] | None = None) -> str | None:
    """The folder a run's processes keep compiled modules in, or None where the interpreter does itself:
    the user's $TRIPTYCH_PYCACHE where set (off: none); else none where the user keeps a prefix of their own;
    else, where this Python writes no bytecode and an installed package came without its compiled modules,
    triptych/pycache under $XDG_CACHE_HOME (~/.cache)."""
    env = os.environ if environ is None else environ
    named = env.get(ENV, "")
    if named:
        return None if named == OFF else os.path.abspath(os.path.expanduser(named))
    if sys.pycache_prefix or env.get("PYTHONPYCACHEPREFIX"):  # the user keeps compiled modules somewhere already
        return None
    if not sys.flags.dont_write_bytecode or not uncompiled():
        return None
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "triptych", "pycache")


def offer() -> str | None:
    """In a run's first process: decide the folder (folder()), keep this process's modules there (keep) and
    name it to every process the run starts; the folder, or None."""
    got = folder()
    if got is not None:
        os.environ[ENV] = got
        keep()
    return got


def keep() -> None:
    """In a worker or a rank, before it imports a framework: compile into the folder $TRIPTYCH_PYCACHE names
    and read from it (none named, or off: as the interpreter does). A folder that cannot be made: as before."""
    named = os.environ.get(ENV, "")
    if not named or named == OFF:
        return
    try:
        Path(named).mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    sys.pycache_prefix, sys.dont_write_bytecode = named, False


def serve(conn: object, fw: str) -> None:
    """A spawned worker's target (harness/workers/worker.py ProcessWorker): the folder kept before the
    worker's modules, numpy among them, are imported; then the worker's loop (as worker._serve)."""
    keep()
    from harness.workers import protocol
    from harness.workers.handlers import answer

    protocol.serve(conn, fw, answer)
