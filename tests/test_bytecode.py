"""Compiled Python for the harness's own processes (harness/workers/bytecode.py): when a run keeps a folder of
its own, that its workers (of this tree, and of a side's tree) compile into it, and that the processes they
start do not."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from harness.workers import bytecode
from tests.conftest import backend_or_skip


@pytest.fixture
def restored(monkeypatch):
    """This process's own setting back after the test (keep() changes it)."""
    monkeypatch.setattr(sys, "pycache_prefix", sys.pycache_prefix)
    monkeypatch.setattr(sys, "dont_write_bytecode", sys.dont_write_bytecode)
    monkeypatch.delenv(bytecode.ENV, raising=False)
    return monkeypatch


def test_a_package_installed_without_its_compiled_modules_is_found_without_importing_it(tmp_path, monkeypatch):
    import py_compile

    pkg = tmp_path / "triptych_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert bytecode.uncompiled(("triptych_probe_pkg", "no_such_module_here")) == ["triptych_probe_pkg"]
    py_compile.compile(str(pkg / "__init__.py"), doraise=True)  # beside its source, as pip leaves it
    assert bytecode.uncompiled(("triptych_probe_pkg",)) == []
    (pkg / "__init__.py").write_text("raise RuntimeError('imported, changed')\n")  # stale: compiled again
    assert bytecode.uncompiled(("triptych_probe_pkg",)) == ["triptych_probe_pkg"]


def test_the_folder_is_the_users_or_one_of_the_runs_only_where_python_would_compile_every_process(restored):
    writes = types.SimpleNamespace(dont_write_bytecode=False)
    writes_none = types.SimpleNamespace(dont_write_bytecode=True)
    assert bytecode.folder({bytecode.ENV: "/somewhere"}) == "/somewhere"
    assert bytecode.folder({bytecode.ENV: "~/pyc"}) == os.path.expanduser("~/pyc")  # one folder for every cwd
    assert bytecode.folder({bytecode.ENV: "rel"}) == os.path.abspath("rel")
    assert bytecode.folder({bytecode.ENV: bytecode.OFF}) is None
    restored.setattr(bytecode, "uncompiled", lambda: ["torch"])
    restored.setattr(sys, "flags", writes_none)
    assert bytecode.folder({"PYTHONPYCACHEPREFIX": "/mine"}) is None  # the user's own prefix stands
    restored.setattr(sys, "flags", writes)
    assert bytecode.folder({}) is None  # Python keeps its own __pycache__
    restored.setattr(sys, "flags", writes_none)
    assert bytecode.folder({"XDG_CACHE_HOME": "/c"}) == "/c/triptych/pycache"
    restored.setattr(bytecode, "uncompiled", lambda: [])
    assert bytecode.folder({"XDG_CACHE_HOME": "/c"}) is None  # every package came compiled


def test_keep_compiles_into_the_named_folder_and_a_process_started_after_compiles_as_before(restored, tmp_path):
    """keep() sets this process alone: nothing goes into the environment but the folder's name, so a child
    (cold_start's, which times a user's cold start) keeps the user's setting."""
    from impls._shared.child import child_env

    code = "import json, sys; print(json.dumps([sys.pycache_prefix, sys.dont_write_bytecode]))"
    want = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True,
                          check=True).stdout  # before keep(): as the user's own process
    restored.setenv(bytecode.ENV, str(tmp_path / "pyc"))
    restored.setattr(sys, "dont_write_bytecode", True)
    bytecode.keep()
    assert sys.pycache_prefix == str(tmp_path / "pyc") and not sys.dont_write_bytecode
    assert (tmp_path / "pyc").is_dir()
    got = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(got) == json.loads(want) and json.loads(got)[0] is None


def test_keep_does_nothing_where_no_folder_is_named_or_it_is_off(restored):
    before = (sys.pycache_prefix, sys.dont_write_bytecode)
    bytecode.keep()
    restored.setenv(bytecode.ENV, bytecode.OFF)
    bytecode.keep()
    assert (sys.pycache_prefix, sys.dont_write_bytecode) == before


@pytest.mark.parametrize("side", [False, True], ids=["a run's worker", "a side's worker"])
def test_a_worker_compiles_what_it_imports_into_the_runs_folder(restored, tmp_path, side):
    """A worker of this tree (multiprocessing's spawn, which passes -B where this Python writes no bytecode,
    through bytecode.serve) and a side's worker (its start-up code, which an older tree's worker runs too) both
    write the modules they import into the folder, from the first: numpy and the worker's own."""
    backend_or_skip("torch")
    from harness.workers.worker import ProcessWorker

    folder = tmp_path / "pyc"
    restored.setenv(bytecode.ENV, str(folder))
    if side:
        from harness.run.interleave import Side, SideWorker
        from tests.test_interleaved_regress import ROOT

        w = SideWorker("torch", Side("baseline", str(ROOT), sys.executable))
    else:
        w = ProcessWorker("torch")
    try:
        assert w.request("hello", timeout=120)["available"]
    finally:
        w.close()
    compiled = list(folder.rglob("torch/**/*.pyc"))
    assert compiled, sorted(p.name for p in folder.rglob("*.pyc"))[:5]
    # kept before the worker's own modules are imported, and numpy with them
    assert list(folder.rglob("numpy/__init__.*.pyc")) and list(folder.rglob("harness/workers/protocol.*.pyc"))


def test_a_run_names_the_folder_to_its_processes_and_keeps_its_own_modules_there(tmp_path):
    """python -m harness decides the folder first (here the user's), compiles what it imports next into it, and
    a rank process keeps it too (here one that stops at once: no rank environment)."""
    from impls._shared.child import child_env

    folder = tmp_path / "pyc"
    env = child_env() | {bytecode.ENV: str(folder)}
    subprocess.run([sys.executable, "-m", "harness", "list"], env=env, capture_output=True, check=True, timeout=300)
    assert list(folder.rglob("harness/run/cli.*.pyc"))
    ranks = tmp_path / "ranks"
    got = subprocess.run([sys.executable, "-m", "harness.workers.rank_main", "--framework", "torch"],
                         env={k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
                         | {bytecode.ENV: str(ranks)}, capture_output=True, text=True, timeout=300)
    assert got.returncode == 2, got.stderr[-300:]
    assert list(ranks.rglob("harness/workers/handlers.*.pyc"))  # kept before the rank's own imports
