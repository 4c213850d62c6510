"""The registry and the impl contract: every scenario has three impls exposing the same functions in
the same order (so `diff` shows only the framework), and no framework is imported where it must not be."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from harness import backends
from scenarios import ORDER, all_scenarios, get

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORK_MODULES = {"torch", "cupy", "cupyx", "jax", "jaxlib"}


def _functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]


def _module_names(path: Path) -> set[str]:
    """Module-level functions and assigned names."""
    names = set()
    for n in ast.parse(path.read_text()).body:
        if isinstance(n, ast.FunctionDef):
            names.add(n.name)
        elif isinstance(n, ast.Assign):
            names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    return names


def test_registry_matches_the_scenario_files():
    files = {p.stem for p in (ROOT / "scenarios").glob("*.py") if p.stem not in {"__init__", "spec"} and not p.stem.startswith("_")}
    assert set(ORDER) == files
    assert len(ORDER) == len(set(ORDER))
    with pytest.raises(KeyError, match="unknown scenario"):
        get("no_such_scenario")


@pytest.mark.parametrize("name", ORDER)
def test_scenario_contract(name):
    s = get(name)
    names = [v.name for v in s.variants]
    assert len(names) == len(set(names)), "variant names must be unique"
    assert not s.variants[0].hazard, "the baseline comes first and is not a hazard"
    assert {"smoke", "full"} <= set(s.sizes)
    assert s.concept and s.title
    assert set(s.key_apis) == set(backends.FRAMEWORKS)


@pytest.mark.parametrize("name", ORDER)
def test_inputs_are_deterministic_and_never_zeros(name):
    s = get(name)
    p = s.params_for_size("smoke") | {"seed": 11}
    a, b = s.make_inputs(p), s.make_inputs(p)
    c = s.make_inputs(p | {"seed": 12})
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        if a[k].size > 1:
            assert np.count_nonzero(a[k]) > 0.9 * a[k].size, f"{name}: input {k!r} is mostly zeros"
            assert not np.array_equal(a[k], c[k]), f"{name}: input {k!r} ignores the seed"
    ref = s.reference(a, p)
    assert all(np.asarray(v).dtype == np.float64 for v in ref.values() if np.asarray(v).dtype.kind == "f")


def _literal(path: Path, name: str) -> dict:
    """A module-level dict literal such as NOT_EXPRESSIBLE, or {}."""
    for n in ast.parse(path.read_text()).body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            return ast.literal_eval(n.value)
    return {}


@pytest.mark.parametrize("name", ORDER)
def test_three_impls_expose_the_same_functions_in_the_same_order(name):
    folder = ROOT / "impls" / name
    funcs = {fw: _functions(folder / f"{fw}_impl.py") for fw in backends.FRAMEWORKS}
    # A variant a framework cannot express has no run_ function there; the rest line up.
    absent = {f"run_{v}" for fw in backends.FRAMEWORKS for v in _literal(folder / f"{fw}_impl.py", "NOT_EXPRESSIBLE")}
    funcs = {fw: [f for f in fs if f not in absent] for fw, fs in funcs.items()}
    assert funcs["torch"] == funcs["cupy"] == funcs["jax"], funcs
    s = get(name)
    for fw in backends.FRAMEWORKS:
        path = folder / f"{fw}_impl.py"
        defined = _module_names(path)
        assert "prepare" in defined
        not_expressible = _literal(path, "NOT_EXPRESSIBLE")
        assert set(not_expressible) <= {v.name for v in s.variants}, f"{fw}: NOT_EXPRESSIBLE names unknown variants"
        assert all(isinstance(why, str) and why for why in not_expressible.values()), f"{fw}: give each reason"
        for v in s.variants:
            assert f"run_{v.name}" in defined or v.name in not_expressible, f"{fw}: no run_{v.name} and no reason"
            assert not (f"run_{v.name}" in defined and v.name in not_expressible), f"{fw}: run_{v.name} is dead code"
        assert len(path.read_text().splitlines()) <= 150, f"{path} is over the ~150-line budget"


def test_no_framework_import_outside_impls_and_backends():
    offenders = []
    for path in [*(ROOT / "harness").rglob("*.py"), *(ROOT / "scenarios").rglob("*.py")]:
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("harness", "backends"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            offenders += [f"{rel}: {m}" for m in mods if m.split(".")[0] in FRAMEWORK_MODULES]
    assert not offenders


def test_importing_the_harness_and_impls_loads_no_framework_on_a_device():
    import subprocess
    import sys

    code = (
        "import sys, importlib\n"
        "import pkgutil, harness, harness.run.cli\n"
        "for m in pkgutil.walk_packages(harness.__path__, 'harness.'):\n"
        "    if not m.name.startswith('harness.backends.') and m.name != 'harness.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "import scenarios\n"
        "assert not {'torch','cupy','jax'} & set(sys.modules), sorted({'torch','cupy','jax'} & set(sys.modules))\n"
        f"for s in {list(ORDER)!r}:\n"
        "    for fw in ('torch', 'cupy', 'jax'):\n"
        "        try:\n"
        "            importlib.import_module(f'impls.{s}.{fw}_impl')\n"
        "        except ImportError as e:  # a framework not installed here: nothing to import\n"
        "            assert e.name and e.name.split('.')[0] == fw, e\n"
        "import jax, torch\n"
        "assert not jax._src.xla_bridge._backends, 'a JAX backend was initialised at import'\n"
        "assert not torch.cuda.is_initialized(), 'torch initialised CUDA at import'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_all_scenarios_in_order():
    """Every scenario module on disk is registered, once, under its own name, in ORDER's order."""
    on_disk = {p.stem for p in (ROOT / "scenarios").glob("*.py") if p.stem not in ("__init__", "spec")
               and not p.stem.startswith("_")}
    assert set(ORDER) == on_disk and len(ORDER) == len(on_disk)
    assert [s.name for s in all_scenarios()] == list(ORDER)
    assert all(s.__class__.__module__ == "scenarios.spec" for s in all_scenarios())
