"""The rank entry point under torchrun, unchanged: two launchers on localhost with --nnodes 2, as two
machines would run it (docs/ranks.md, "Across nodes"). Each rank checks its own share exactly."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.workers.ranks import free_ports
from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent


def torchrun() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    if exe.exists():
        return [str(exe)]
    if shutil.which("torchrun"):
        return ["torchrun"]
    return [sys.executable, "-m", "torch.distributed.run"]


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_two_torchrun_launchers_on_localhost(fw):
    backend_or_skip(fw)
    port = free_ports(1)[0]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    launchers = [subprocess.Popen([*torchrun(), "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node),
                                   "--master-addr", "127.0.0.1", "--master-port", str(port),
                                   "-m", "harness.workers.rank_main", "--framework", fw, "--scenarios", "ranks,collectives"],
                                  cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for node in (0, 1)]
    outs = []
    try:
        for p in launchers:
            outs.append(p.communicate(timeout=240)[0])
    finally:
        for p in launchers:
            if p.poll() is None:
                p.kill()
                p.wait()
    for node, (p, out) in enumerate(zip(launchers, outs)):
        assert p.returncode == 0, f"node {node}:\n{out[-3000:]}"
        lines = [ln for ln in out.splitlines() if ln.startswith(f"rank {node}/2 {fw} ")]
        assert len(lines) == 1 + 7, out[-3000:]  # ranks, and the 7 collectives at the smoke size
        assert all("exact" in ln and "WRONG" not in ln for ln in lines), out[-3000:]


def test_rank_main_outside_a_launcher_says_what_is_missing():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}
    p = subprocess.run([sys.executable, "-m", "harness.workers.rank_main", "--framework", "torch"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "$RANK is not set" in p.stderr
