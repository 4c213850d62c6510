"""Host probe: is the Python loop's speed a property of the vCPU, of the time, or of SMT siblings?"""
import glob, json, os, subprocess, sys, time
sys.path.insert(0, ".")
from harness.measure.calibrate import python_loop_s
from harness.workers.cpus import cpu_times
tag = sys.argv[1]; sweeps = int(sys.argv[2]); gap = float(sys.argv[3])
cpus = sorted(os.sched_getaffinity(0))
def percpu():
    out = {}
    for line in open("/proc/stat"):
        if line.startswith("cpu") and line[3].isdigit():
            f = line.split(); out[int(f[0][3:])] = [int(x) for x in f[1:9]]
    return out
info = {"siblings": {}, "mhz": []}
for c in cpus:
    try: info["siblings"][c] = open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read().strip()
    except OSError: pass
info["mhz"] = [l.split(":")[1].strip() for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")]
info["flags_hypervisor"] = any("hypervisor" in l for l in open("/proc/cpuinfo") if l.startswith("flags"))
print("siblings", info["siblings"]); print("MHz", sorted(set(info["mhz"])))
rows = []; s0 = percpu(); t0 = time.time()
for k in range(sweeps):
    a = percpu(); r = {}
    for c in cpus:
        os.sched_setaffinity(0, {c}); r[c] = python_loop_s(2) * 1e3
    b = percpu(); os.sched_setaffinity(0, set(cpus))
    steal = {c: b[c][7] - a[c][7] for c in cpus}
    rows.append({"t": round(time.time() - t0, 1), "ms": r, "steal_ticks": steal})
    print(f"t={rows[-1]['t']:6.1f}s " + " ".join(f"{r[c]:5.1f}" for c in cpus) + "  steal=" + str(sum(steal.values())), flush=True)
    time.sleep(gap)
# SMT / shared-core test: a busy process pinned to CPU j, loop timed on CPU 0 (and on CPU 1)
busy = {}
for ref in (cpus[0], cpus[len(cpus)//2]):
    for j in cpus:
        if j == ref: continue
        p = subprocess.Popen([sys.executable, "-c", f"import os;os.sched_setaffinity(0,{{{j}}})\nwhile True: pass"])
        time.sleep(0.15); os.sched_setaffinity(0, {ref}); v = python_loop_s(3) * 1e3
        os.sched_setaffinity(0, set(cpus)); p.kill(); p.wait()
        busy[f"{ref}<-{j}"] = round(v, 2)
print("loop ms on ref CPU with a busy process on j:", busy)
s1 = percpu()
print("steal ticks per cpu over the probe:", {c: s1[c][7] - s0[c][7] for c in cpus})
print("loadavg", open("/proc/loadavg").read().strip())
json.dump({"info": info, "sweeps": rows, "busy": busy}, open(os.path.join(os.environ.get("OUT", "/tmp"), f"host_{tag}.json"), "w"))
