"""The framework registry (harness/backends/__init__.py): the frameworks in order, imported lazily, each
backend's facts complete; and no framework named in harness code outside the backends, so that adding a
framework is a backend module, a registry line and its impl files."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import backends
from harness.run import runner
from harness.backends.base import Backend
from harness.backends.dist import RankEnv
from harness.report.docs import DEFAULT_TOPICS
from harness.workers.ranks import Workers, rank_env

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORK_MODULES = ("torch", "cupy", "cupyx", "jax", "jaxlib")
WORD = re.compile(r"\b(torch|cupy\w*|jax)\b", re.IGNORECASE)
# (file, text) pairs that may name a framework in a string of code; keep it empty where possible.
ALLOWED: set[tuple[str, str]] = set()


def _harness_files() -> list[Path]:
    return sorted(p for p in (ROOT / "harness").rglob("*.py")
                  if p.relative_to(ROOT).parts[:2] != ("harness", "backends"))


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant of the module (f-strings' literal parts included) that is not a docstring."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_registry_lists_torch_cupy_jax_in_order():
    assert backends.FRAMEWORKS == ("torch", "cupy", "jax")
    assert list(backends.display_names()) == list(backends.FRAMEWORKS)
    for fw in backends.FRAMEWORKS:
        cls = backends.backend_class(fw)
        assert issubclass(cls, Backend) and cls.name == fw
        assert isinstance(backends.get(fw), cls) and backends.get(fw) is backends.get(fw)
    with pytest.raises(KeyError, match="unknown framework 'mxnet'"):
        backends.backend_class("mxnet")


def test_importing_the_registry_imports_no_framework_and_no_backend_module():
    code = (
        "import sys\n"
        "import harness.backends as b\n"
        "lazy = [m for m in ('harness.backends.torch_backend', 'harness.backends.cupy_backend',\n"
        "                    'harness.backends.jax_backend') if m in sys.modules]\n"
        "assert not lazy, f'imported by harness.backends: {lazy}'\n"
        "facts = [(c.display_name, c.colour, c.module, c.porting, c.rank_env('h', [1] * c.rank_ports))\n"
        "         for c in map(b.backend_class, b.FRAMEWORKS)]\n"
        "import harness.report.labels, harness.report.charts, harness.report.docs, harness.workers.faults, harness.workers.ranks\n"
        "import harness.run.runner, harness.workers.rank_main, harness.run.parser\n"
        "harness.run.parser.build_parser()\n"
        f"loaded = [m for m in {FRAMEWORK_MODULES!r} if m in sys.modules]\n"
        "assert not loaded, f'a framework was imported: {loaded}'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_no_framework_is_named_in_harness_code_outside_the_backends():
    """The word cupy nowhere (comments included), and no string of code (a docstring is prose) naming a
    framework: what differs between frameworks is a backend's class attribute, asked through the registry."""
    cupy = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in _harness_files()
            for i, line in enumerate(p.read_text().splitlines(), 1) if "cupy" in line.lower()]
    assert not cupy, "\n".join(cupy)
    named = [f"{p.relative_to(ROOT)}:{line}: {text!r}" for p in _harness_files() for line, text in _code_strings(p)
             if WORD.search(text) and (p.relative_to(ROOT).as_posix(), text) not in ALLOWED]
    assert not named, "\n".join(named)


def test_every_backend_states_its_facts():
    classes = [backends.backend_class(fw) for fw in backends.FRAMEWORKS]
    for cls in classes:
        assert cls.display_name and cls.short_name and cls.module and cls.profiler, cls.name
        assert list(cls.porting) == list(DEFAULT_TOPICS), cls.name  # the guide's rows, in its order
    assert len({c.colour for c in classes}) == len(classes)
    assert [c.name for c in classes if c.measures_ceilings] == [backends.ceilings_framework()] == ["cupy"]
    assert backends.in_prose() == "torch, CuPy and JAX"


def test_each_rank_finds_its_framework_rendezvous_on_a_port_of_its_own(monkeypatch):
    """ranks.rank_env hands every framework the ports its backend asks for; dist.RankEnv reads them back."""
    ports = [41000 + i for i in range(1 + backends.rendezvous_ports())]
    for k, v in rank_env(1, 2, ports).items():
        monkeypatch.setenv(k, v)
    env = RankEnv.from_environ()
    assert (env.rank, env.world_size, env.port) == (1, 2, ports[0])
    assert sorted(env.port_for(fw) for fw in backends.FRAMEWORKS) == ports


class _Pool:
    def __init__(self, got):
        self.got, self.asked = got, []

    def request(self, op, *args, timeout=None, **kwargs):
        self.asked.append(op)
        return self.got


class _UI:
    def __init__(self):
        self.steps, self.notes = [], []

    def step(self, text):
        self.steps.append(text)

    def note(self, text):
        self.notes.append(text)

    def advance(self):
        pass


def test_the_ceilings_are_measured_by_the_backend_that_says_it_measures_them(monkeypatch):
    """runner asks the registry, not a name: move the attribute and the request moves with it."""
    from scenarios import get

    monkeypatch.setattr(backends.backend_class("cupy"), "measures_ceilings", False)
    monkeypatch.setattr(backends.backend_class("torch"), "measures_ceilings", True)
    scn = get("collectives")
    torch_pool, cupy_pool = _Pool({"ceilings": {"x": 1.0}, "not_measured": {}}), _Pool({})
    machine, ui = {}, _UI()
    run = runner.Run(runner.CompareOptions(scenarios=[], frameworks=["torch", "cupy"], size="full", examples=1,
                                           seed=0, timeout_s=5.0), ui)
    run.machine = machine
    both = Workers([{"torch": torch_pool, "cupy": cupy_pool}], ["torch", "cupy"], {})
    assert run.rank_ceilings(scn, [], both) is None
    assert torch_pool.asked == ["ceilings"] and cupy_pool.asked == [] and machine == {"x": 1.0}
    assert ui.steps == ["collectives · raw floor (the PyTorch ranks, NCCL without a framework)"]
    why = run.rank_ceilings(scn, [], Workers([{"cupy": cupy_pool}], ["cupy"], {"torch": {"why": "no GPU"}}))
    assert why == "no raw floor: it is measured by the PyTorch ranks (NCCL), unavailable here (no GPU)"
