"""docs/CONTRIBUTING.md's "Add a scenario", followed literally: a toy scenario (y = 2x + 1, two variants, one
claim, one metric) is written into a copy of the repository step by step, then checked and run through
`compare --size smoke` there. The steps are read from the doc: each step's bold part is a file this test writes
or edits, or a command it runs, so a step the doc adds, drops or renames fails here instead of going stale."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "CONTRIBUTING.md"
NAME = "toy"
# What the steps' commands read: the code, the tests (and their pytest settings) for the test step.
COPIED = ("harness", "scenarios", "impls", "tests", "pyproject.toml")
REGISTRY = "scenarios/__init__.py"
BOLD = re.compile(r"\*\*`([^`]+)`\*\*")

SPEC = '''"""toy — y = 2x + 1, in two framework calls or in one."""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict


class Calls:
    """Makes a framework call and counts it: the `calls` metric is counted from the calls made."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.n += 1
        return f(*args, **kwargs)


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])
    return {"x": rng.standard_normal(int(p["n"]), dtype=np.float32)}


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    return {"y": 2.0 * inputs["x"].astype(np.float64) + 1.0}


def _fewer_calls(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    two, one = (rows[v]["timing"]["metrics"]["calls"] for v in ("two_calls", "one_call"))
    return Verdict("fewer_calls", fw, "confirmed" if one < two else "refuted",
                   f"{one:g} call(s) fused against {two:g}", {"one_call": one, "two_calls": two})


SCENARIO = Scenario(
    name="toy",
    title="y = 2x + 1 in one call",
    concept="A multiply and an add are two framework calls; one fused call computes the same y = 2x + 1.",
    variants=(
        Variant("two_calls", "a multiply, then an add: two calls"),
        Variant("one_call", "one fused call"),
    ),
    params=lambda: S.params(n=S.dims(1, 64)),
    sizes={"smoke": {"n": 1024}, "full": {"n": 1 << 20}},
    make_inputs=make_inputs,
    reference=reference,
    tolerance=Tolerance({"float32": (1e-6, 1e-6)}),
    claims=(Claim("fewer_calls", "The fused variant makes fewer framework calls.", _fewer_calls),),
    key_apis={"torch": ("torch.add(input, other, alpha=2)",), "cupy": ("cupy.ElementwiseKernel",),
              "jax": ("jax.jit",)},
    framework_notes={"torch": "alpha scales the second operand inside the one add kernel.",
                     "cupy": "An ElementwiseKernel, compiled at its first call.",
                     "jax": "XLA fuses the multiply and the add of one jitted function into one kernel."},
    metrics_doc={"calls": "framework calls the variant made"},
)
'''

# The three impls differ only in the framework's lines, as the impl contract asks: one text, three fillings.
IMPL = '''"""toy in {title}: {how}."""
from __future__ import annotations

import {module}

from harness.measure.metrics import emit
from scenarios.toy import Calls
{programs}

def prepare(inputs, params, device):
    # the inputs uploaded once, untimed
    {prepare}


def run_two_calls(state):
    call = Calls()
    y = call({first}, state["x"]{by_two})  # one {unit}{queued}
    y = call({second}, y{plus_one})  # a second, {ordered}
    emit("calls", call.n)
    return {{"y": y}}


def run_one_call(state):
    call = Calls()
    y = call({fused})  # 2x + 1 in one {unit}
    emit("calls", call.n)
    return {{"y": y}}
'''
ON_STREAM = {"queued": " on the current stream", "ordered": "ordered after the first by the stream", "unit": "kernel",
             "by_two": ", 2", "plus_one": ", 1"}
TORCH = IMPL.format(**ON_STREAM, title="PyTorch", how="two kernels (mul, add), or one (torch.add with alpha)",
                    module="torch", programs="",
                    prepare='return {"x": torch.from_numpy(inputs["x"]).to(device), '
                            '"ones": torch.ones(int(params["n"]), device=device)}',
                    first="torch.mul", second="torch.add", fused='torch.add, state["ones"], state["x"], alpha=2')
CUPY = IMPL.format(**ON_STREAM, title="CuPy", how="two kernels (multiply, add), or one (an ElementwiseKernel)",
                   module="cupy", programs='\nAFFINE = cupy.ElementwiseKernel("T x", "T y", "y = 2 * x + 1", "toy_affine")'
                                          '  # compiled at its first call\n',
                   prepare='with device:\n        return {"x": cupy.asarray(inputs["x"])}',
                   first="cupy.multiply", second="cupy.add", fused='AFFINE, state["x"]')
JAX = IMPL.format(title="JAX", how="two jitted programs (multiply, add), or one (XLA fuses both into one kernel)",
                  module="jax", programs="\nMUL, ADD = jax.jit(lambda x: x * 2), jax.jit(lambda y: y + 1)  # compiled at "
                                         "the first call\nAFFINE = jax.jit(lambda x: 2 * x + 1)  # one program, fused\n",
                  prepare='return {"x": jax.device_put(inputs["x"], device)}', first="MUL", second="ADD",
                  by_two="", plus_one="", unit="dispatch", queued="; returns a future at once",
                  ordered="waiting on the first's output by data flow", fused='AFFINE, state["x"]')

# The files the test writes, by the doc's names for them.
FILES = {
    "scenarios/<name>.py": SPEC,
    "impls/<name>/__init__.py": "",
    "impls/<name>/torch_impl.py": TORCH,
    "impls/<name>/cupy_impl.py": CUPY,
    "impls/<name>/jax_impl.py": JAX,
}


def steps(doc: str, section: str) -> list[str]:
    """The numbered steps of a section, each as one line of text (its indented continuation joined)."""
    body = doc.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    found: list[str] = []
    for line in body.splitlines():
        if m := re.match(r"\d+\. (.*)", line):
            found.append(m.group(1))
        elif found and line.startswith("   "):
            found[-1] += " " + line.strip()
        elif found and line.strip():
            break  # the list has ended
    return found


def register(repo: Path, step: str) -> None:
    """The registry step: append the name to the tuple the step names (ORDER)."""
    m = re.search(r'append `"<name>"` to `(\w+)`', step)
    assert m, f"the registry step no longer says which tuple to append to: {step[:200]}"
    path = repo / REGISTRY
    text, n = re.subn(rf"(\n{m.group(1)}: tuple\[str, \.\.\.\] = \((?:\n    \"\w+\",)*)",
                      lambda t: t.group(1) + f'\n    "{NAME}",', path.read_text(), count=1)
    assert n == 1, f"{REGISTRY} has no tuple {m.group(1)} written as expected"
    path.write_text(text)


def run(repo: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """In the copy, as a contributor's shell would: none of the harness's own variables a test may have set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIPTYCH_")} | {"PYTHONPATH": str(repo)}
    return subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def make_docs(repo: Path, argv: list[str], out: Path) -> None:
    """`make docs`: the Makefile's recipe, with this interpreter."""
    recipe = re.search(r"^docs:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, "the Makefile has no docs target"
    r = run(repo, shlex.split(recipe.group(1).replace("$(PY)", sys.executable)))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    index, guide = (repo / "docs" / "scenarios.md").read_text(), (repo / "docs" / "porting.md").read_text()
    assert f"[`{NAME}`](../scenarios/{NAME}.py)" in index and f'<a id="{NAME}"></a>' in guide
    assert "`torch.add(input, other, alpha=2)`" in guide  # its APIs, and its lesson heading its section
    assert "**A multiply and an add are two framework calls; one fused call computes the same y = 2x + 1.**" in guide


def pytest_step(repo: Path, argv: list[str], out: Path) -> None:
    r = run(repo, [sys.executable, *argv[1:], "-p", "no:cacheprovider"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    passed = re.search(r"(\d+) passed", r.stdout)
    # the contract, deterministic inputs and the three impls, and torch and JAX for each variant (CuPy skips)
    assert passed and int(passed.group(1)) >= 3 + 2 * 2 and "failed" not in r.stdout, r.stdout[-2000:]


def compare(repo: Path, argv: list[str], out: Path) -> None:
    """The doc's compare, on torch and JAX (the CPU's), one worker process each, into the test's folder."""
    r = run(repo, [sys.executable, *argv[1:], "--frameworks", "torch,jax", "--processes", "1", "--seed", "1",
                   "--out", str(out), "--no-report"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    [result] = out.glob("*.json")
    scn = json.loads(result.read_text())["scenarios"][NAME]
    assert scn["equivalence"]["status"] == "passed", scn["equivalence"]
    rows = {(row["framework"], row["variant"]): row for row in scn["rows"]}
    assert set(rows) == {(fw, v) for fw in ("torch", "jax") for v in ("two_calls", "one_call")}
    assert all(row["status"] == "ok" and row["check"]["wrong"] == 0 for row in rows.values()), rows
    assert {k: row["timing"]["metrics"]["calls"] for k, row in rows.items()} == {
        ("torch", "two_calls"): 2, ("torch", "one_call"): 1, ("jax", "two_calls"): 2, ("jax", "one_call"): 1}
    assert scn["metrics_doc"] == {"calls": "framework calls the variant made"}
    assert sorted((c["framework"], c["claim"], c["verdict"]) for c in scn["claims"]) == [
        ("jax", "fewer_calls", "confirmed"), ("torch", "fewer_calls", "confirmed")]


COMMANDS = {"make docs": make_docs, "python -m pytest": pytest_step, "python -m harness compare": compare}


def test_the_doc_names_each_step_this_test_takes():
    """Read without running anything: every bold part of the checklist is a file this test writes, the
    registry it edits, or a command it runs, and each of those is in the checklist."""
    named = [b.replace("<name>", NAME) for s in steps(DOC.read_text(), "Add a scenario") for b in BOLD.findall(s)]
    files = {b for b in named if not b.startswith(("make ", "python "))}
    commands = {next((c for c in COMMANDS if b.startswith(c)), b) for b in named if b.startswith(("make ", "python "))}
    assert files == {f.replace("<name>", NAME) for f in FILES} | {REGISTRY}
    assert commands == set(COMMANDS)


def test_a_toy_scenario_added_by_the_checklist_runs_through_compare(tmp_path):
    for fw in ("torch", "jax"):
        backend_or_skip(fw)
    repo = tmp_path / "repo"
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, repo / name)
    done = []
    for step in steps(DOC.read_text(), "Add a scenario"):
        for bold in BOLD.findall(step):
            thing = bold.replace("<name>", NAME)
            if command := next((c for c in COMMANDS if thing.startswith(c)), None):
                COMMANDS[command](repo, shlex.split(thing), tmp_path / "out")
                done.append(command)
            elif bold in FILES:
                (repo / thing).parent.mkdir(parents=True, exist_ok=True)
                (repo / thing).write_text(FILES[bold])
                done.append(bold)
            elif thing == REGISTRY:
                register(repo, step)
                done.append(thing)
            else:
                pytest.fail(f"CONTRIBUTING.md's checklist names {bold!r}, which this test does not do")
    assert sorted(done) == sorted([*FILES, REGISTRY, *COMMANDS]), done
