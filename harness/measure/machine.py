"""The machine in the result: host, CPU, kernel, transparent huge pages, GPU clocks, code version.

Timings move with the host as much as with the code (a tiny torch op cost ~6 µs on one host and ~9 µs
on another with the same GPU), so the result records what the host was; the run's own calibration
(harness/measure/calibrate.py) and the GPU ceilings (Backend.ceilings, of the backend that measures them) measure it.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

# Free-form by nature: facts about the host or its GPU (python, platform, cpus, git, nvidia-smi's fields, ...);
# the result keeps them as the environment's host (model.Environment.host), whose keys are the facts' names
Facts = dict[str, Any]

import hypothesis
import numpy as np

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
GPU_QUERY = "name,driver_version"
# Asked apart, so that a field an older or newer driver does not know costs only these.
GPU_STATE = "clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,temperature.gpu,pstate"


def host_env() -> Facts:
    env: Facts = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "transparent_hugepages": thp_mode(),
        "numpy": np.__version__,
    }
    env["hypothesis"] = hypothesis.__version__
    env |= gpu_query()
    env["code"] = code_version()
    return env


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def thp_mode() -> str | None:
    """The bracketed word of /sys/kernel/mm/transparent_hugepage/enabled ("madvise", ...)."""
    try:
        text = THP.read_text()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")] if "[" in text else text.strip()


def gpu_query() -> Facts:
    """nvidia-smi's view of the first GPU now: name, driver, and its state (clocks in MHz, power in W,
    temperature in C, performance state); {} without nvidia-smi."""
    base = _smi(GPU_QUERY)
    if base is None:
        return {}
    out: Facts = {"nvidia_smi_gpu": base["name"], "driver": base["driver_version"]}
    state = _smi(GPU_STATE)
    if state is not None:
        out["gpu_state"] = state
    return out


def gpu_memory_bytes() -> int | None:
    """The first GPU's memory by the driver, or None where nvidia-smi does not answer."""
    total = (_smi("memory.total") or {}).get("memory.total", "")
    return int(total) << 20 if total.isdigit() else None


def _smi(fields: str) -> dict[str, str] | None:
    try:
        q = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if q.returncode != 0 or not q.stdout.strip():
        return None
    values = [v.strip() for v in q.stdout.strip().splitlines()[0].split(",")]
    keys = fields.split(",")
    return dict(zip(keys, values)) if len(values) == len(keys) else None


def code_version() -> str | None:
    """The project's git commit, with "+dirty" when the tree has uncommitted changes to tracked files;
    None where the tree has no .git (a copied working tree, e.g. on a lent GPU machine). $TRIPTYCH_CODE,
    where set, is taken as it is: a copied tree whose .git is stale or absent says its commit there."""
    if os.environ.get("TRIPTYCH_CODE"):
        return os.environ["TRIPTYCH_CODE"]
    root = Path(__file__).resolve().parent.parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")
