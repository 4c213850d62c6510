"""Where the workers' and ranks' main threads spent a profiled compare: py-spy's raw samples (record --idle
--subprocesses -r RATE -f raw) attributed to the steps of a pass, first matching rule wins.

usage: python scratch/lease/attribute.py RATE RAW[.gz] [RAW[.gz] ...]   (one column per file)
"""
import gzip
import sys
from collections import Counter

# (step, any of these function names in the stack); checked in this order
RULES = [
    ("a rank group's NCCL start (CuPy's accept, in the background)", ("init_process_group",)),
    ("kernel clock (JAX trace)", ("_kernel_clocks",)),
    ("equivalence (hypothesis)", ("equiv", "run_variants")),
    ("sync census, timeline, profile", ("_count_syncs", "trace_variant", "profile_variant")),
    ("host inputs and reference", ("inputs_and_reference",)),
    ("the host loop beside each request", ("python_loop_s",)),
    ("calibration and ceilings", ("calibrate", "ceilings", "rank_ceilings")),
    ("checks", ("OutputCheck.__call__", "_time_variant.<locals>.check")),
    ("between repeats (poisoning, refills)", ("_repeat.<locals>.timed_before",)),
    ("timed repeats (the calls and their syncs)", ("_repeat",)),
    ("a rank group agreeing", ("agree_stop",)),
    ("first call and warm-up", ("measure",)),
    ("prepare (the state)", ("prepare",)),
    ("freeing device memory", ("free_memory",)),
    ("collecting the heap before a request", ("_settle_heap",)),
]
SERVING = ("answer", "Rank.answer")  # inside a request
WAITING = "waiting for a request"
START = "worker start (import, device)"
EXIT = "worker and rank exit (joining what they started)"


def frames(line):
    stack, _, count = line.rpartition(" ")
    parts = stack.split(";")
    return [p.rsplit(" (", 1)[0] for p in parts], parts, int(count)


def step(names, parts):
    if all(p.startswith("process ") for p in parts):
        return None  # no Python frame at all: a thread in native code, idle where py-spy ran with --idle
    worker = any(("spawn_main" in p or "rank_main" in p) for p in parts[:3]) or any("rank_main" in p for p in parts)
    if not worker or any(n.endswith("_bootstrap_inner") for n in names):
        return None  # the runner's own process, or a thread that is not a worker's main thread
    if any(n == "_exit_function" for n in names):
        return EXIT
    if not any(n in ("serve", "_serve") for n in names):
        return START
    if not any(n in SERVING for n in names):
        return START if any(n in ("hello", "load") for n in names) else WAITING
    if any(n in ("hello", "_hello") for n in names) and not any(n.endswith("init_process_group") for n in names):
        return START  # a worker's or a rank's first request: its imports and its device
    for name, funcs in RULES:
        if any(n in funcs or n.endswith("." + f) for n in names for f in funcs):
            return name
    return "other, inside a request"


def attribute(path, rate):
    got = Counter()
    with (gzip.open(path, "rt", errors="replace") if path.endswith(".gz") else open(path, errors="replace")) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or not line[-1].isdigit():
                continue
            names, parts, n = frames(line)
            s = step(names, parts)
            if s is not None:
                got[s] += n / rate
    return got


def main():
    rate, paths = float(sys.argv[1]), sys.argv[2:]
    cols = [attribute(p, rate) for p in paths]
    order = [START] + [r[0] for r in RULES] + ["other, inside a request", EXIT]
    background = RULES[0][0]
    print("| step | " + " | ".join(paths) + " |")
    print("|---|" + "---|" * len(paths))
    for s in order:
        print(f"| {s} | " + " | ".join(f"{c.get(s, 0):.1f}" for c in cols) + " |")
    print("| busy in all (the NCCL start left out) | " + " | ".join(
        f"{sum(v for k, v in c.items() if k not in (WAITING, background)):.1f}" for c in cols) + " |")
    print(f"| ({WAITING}) | " + " | ".join(f"{c.get(WAITING, 0):.1f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
