"""No import circles inside the project (harness, scenarios, impls), lazy imports inside functions
included: a circle makes a module's meaning depend on which side was imported first."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "scenarios", "impls")


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST, here: str, is_pkg: bool, known: set[str]) -> set[str]:
    """Project modules an import statement loads (a `from pkg import name` loads pkg.name where that
    is a module, else pkg)."""
    out: set[str] = set()
    if isinstance(node, ast.Import):
        out |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = here.split(".")[: len(here.split(".")) - node.level + (1 if is_pkg else 0)]
            base = ".".join(anchor + ([base] if base else []))
        out.add(base)
        out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m in known}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = {(_module(p, root), p) for pkg in PACKAGES for p in (root / pkg).rglob("*.py")}
    known = {m for m, _ in files}
    graph: dict[str, set[str]] = {}
    for mod, path in files:
        tree = ast.parse(path.read_text(), str(path))
        deps: set[str] = set()
        for node in ast.walk(tree):
            deps |= _targets(node, mod, path.name == "__init__.py", known)
        graph[mod] = deps - {mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _is_parent_package(a: str, b: str) -> bool:
    return b.startswith(a + ".") or a.startswith(b + ".")


def test_no_import_circles():
    graph = import_graph()
    # A package's __init__ naming its own submodules (harness.backends -> harness.backends.base) and the
    # submodule importing the package's names back is how packages work, not a circle between modules.
    pruned = {m: {d for d in deps if not _is_parent_package(m, d)} for m, deps in graph.items()}
    assert cycles(pruned) == []


def test_the_detector_finds_a_circle(tmp_path):
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "harness" / "a.py").write_text("from harness import b\n")
    (tmp_path / "harness" / "b.py").write_text("def f():\n    from harness.c import x\n")
    (tmp_path / "harness" / "c.py").write_text("import harness.a\n")
    assert cycles(import_graph(tmp_path)) == [["harness.a", "harness.b", "harness.c"]]


def _folder(module: str) -> str:
    """A module's folder in the stage graph: harness's stage package (harness.run, harness.workers, ...),
    or the top folder (scenarios, impls) for everything else."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "harness" and len(parts) > 1 else parts[0]


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """folder -> folders its modules import (harness's stage packages, scenarios, impls); the top folders
    harness, scenarios and impls also as one node each, so that a circle between them shows."""
    out: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        for d in deps:
            for a, b in ((_folder(mod), _folder(d)), (mod.split(".")[0], d.split(".")[0])):
                out.setdefault(a, set())
                if a != b and not _is_parent_package(a, b):
                    out[a].add(b)
    return out


def test_no_folder_circles():
    """A stage package imports only stages below it, and harness, scenarios and impls import each other in
    one direction (impls -> scenarios -> nothing of ours; harness loads impls by name at run time only)."""
    graph = import_graph()
    # harness/__init__.py and __main__.py stand above every stage.
    graph = {m: d for m, d in graph.items() if m not in ("harness", "harness.__main__")}
    assert cycles(folder_graph(graph)) == []


def test_the_folder_detector_finds_a_circle(tmp_path):
    for pkg in ("harness", "harness/run", "harness/workers", "scenarios", "impls"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "harness" / "run" / "a.py").write_text("from harness.workers import b\n")
    (tmp_path / "harness" / "workers" / "b.py").write_text("def f():\n    from harness.run import c\n")
    (tmp_path / "harness" / "run" / "c.py").write_text("")
    (tmp_path / "scenarios" / "s.py").write_text("import impls.i\n")
    (tmp_path / "impls" / "i.py").write_text("from scenarios import s2\n")
    (tmp_path / "scenarios" / "s2.py").write_text("")
    assert cycles(import_graph(tmp_path)) == []
    assert cycles(folder_graph(import_graph(tmp_path))) == [["harness.run", "harness.workers"], ["impls", "scenarios"]]


def test_harness_is_stage_packages():
    """At most 8 stage packages under harness/, and no module at its top beyond the package's own two."""
    top = ROOT / "harness"
    packages = sorted(p.name for p in top.iterdir() if (p / "__init__.py").is_file())
    modules = sorted(p.name for p in top.glob("*.py"))
    assert len(packages) <= 8, packages
    assert modules == ["__init__.py", "__main__.py"], modules
