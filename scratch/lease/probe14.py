"""Lease 14's probe (issue 51): what compiled Python costs a worker on the lent GPU host. Prints whether its
Python writes bytecode, which frameworks came without compiled modules (harness/workers/bytecode.py
uncompiled), and times `import numpy, <fw>` in fresh processes, three rounds: compiling from source each time
(-B and an empty prefix, as the workers did before ae7413e) against the run's folder, warmed first.
usage: PYTHONPATH=. python3 scratch/lease/probe14.py ROUNDS"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness.workers import bytecode

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
print(json.dumps({"dont_write_bytecode": sys.flags.dont_write_bytecode, "uncompiled": bytecode.uncompiled(),
                  "folder": bytecode.folder(), "python": sys.executable}), flush=True)
warm = tempfile.mkdtemp(prefix="pyc_warm_")
env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(args, env):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, capture_output=True)
    return round(time.perf_counter() - t0, 3)


for fw in ("torch", "cupy", "jax"):
    code = f"import numpy, {fw}"
    try:
        timed(["-X", f"pycache_prefix={warm}", "-c", code], env)  # fills the folder
    except subprocess.CalledProcessError:
        print(json.dumps({"framework": fw, "error": "import failed"}), flush=True)
        continue
    for r in range(rounds):
        empty = tempfile.mkdtemp(prefix="pyc_empty_")
        each = timed(["-B", "-X", f"pycache_prefix={empty}", "-c", code], os.environ)
        shutil.rmtree(empty, ignore_errors=True)
        cached = timed(["-X", f"pycache_prefix={warm}", "-c", code], env)
        plain = timed(["-c", code], os.environ)
        print(json.dumps({"framework": fw, "round": r, "compiling_s": each, "folder_s": cached,
                          "as_installed_s": plain}), flush=True)
shutil.rmtree(warm, ignore_errors=True)
