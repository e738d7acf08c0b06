"""Developers only, on a GPU machine as root: can a grading sandbox get a cgroup there, and does CUDA still start
in it? Prints the grader's cgroup, tries a child of a nested ("leaf") layout and, for comparison, a sibling, starts
CUDA in each, and checks that memfd memory is counted (an OOM kill past memory.max). Writes JSON to argv[1]."""
import json, os, subprocess, sys, time
from pathlib import Path

out = {"when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
own = Path("/proc/self/cgroup").read_text()
out["proc_self_cgroup"] = own
out["cgroup_mounts"] = [l for l in Path("/proc/self/mountinfo").read_text().splitlines() if "cgroup" in l]
rel = own.strip().splitlines()[-1].split(":", 2)[2]
G = Path("/sys/fs/cgroup") / rel.lstrip("/")
def rd(p):
    try: return Path(p).read_text().strip()
    except OSError as e: return f"<{e}>"
for f in ("cgroup.controllers", "cgroup.subtree_control", "cgroup.type", "cgroup.procs", "memory.max", "pids.max"):
    out[f"own/{f}"] = rd(G / f)
out["parent/cgroup.subtree_control"] = rd(G.parent / "cgroup.subtree_control") if G != G.parent else None
out["devices"] = sorted(str(p) for p in Path("/dev").glob("nvidia*"))

CUDA = ("import torch,time;t=time.time();x=torch.ones(1<<20,device='cuda');"
        "print('cuda ok',torch.cuda.get_device_name(),float(x.sum()),round(time.time()-t,2))")
HOG = ("import os,mmap;fd=os.memfd_create('hog');n=0\n"
       "while n<4096:\n os.ftruncate(fd,(n+64)<<20);m=mmap.mmap(fd,(n+64)<<20);m[n<<20:(n+64)<<20]=b'x'*(64<<20);m.close();n+=64\n"
       "print('memfd not bounded',n,'MB')")

def run_in(group, code, name):
    def pre():
        (group / "cgroup.procs").write_text(str(os.getpid()))
    try:
        p = subprocess.run([sys.executable, "-c", code], preexec_fn=pre, capture_output=True, text=True, timeout=120)
        out[name] = {"rc": p.returncode, "stdout": p.stdout[-500:], "stderr": p.stderr[-800:],
                     "events": rd(group / "memory.events")}
    except Exception as e:
        out[name] = {"error": repr(e)}

def make(group, mem_mb=2048):
    group.mkdir(exist_ok=True)
    for f, v in (("memory.max", str(mem_mb << 20)), ("memory.swap.max", "0"), ("pids.max", "256")):
        try: (group / f).write_text(v)
        except OSError as e: out.setdefault("write_errors", []).append(f"{group/f}: {e}")

# 1. a sibling (the parent's subtree), as the course's code does on v2 when its own group holds processes
if G != Path("/sys/fs/cgroup"):
    try:
        sib = G.parent / "tc-probe-sibling"; make(sib)
        run_in(sib, CUDA, "sibling_cuda")
    except OSError as e:
        out["sibling_error"] = repr(e)
# 2. nested: move every process of the own group into a leaf, enable the controllers, sandboxes as children
try:
    leaf = G / "tc-probe-leaf"; leaf.mkdir(exist_ok=True)
    for pid in rd(G / "cgroup.procs").split():
        try: (leaf / "cgroup.procs").write_text(pid)
        except OSError as e: out.setdefault("move_errors", []).append(f"{pid}: {e}")
    for c in ("memory", "pids"):
        try: (G / "cgroup.subtree_control").write_text(f"+{c}")
        except OSError as e: out.setdefault("enable_errors", []).append(f"{c}: {e}")
    out["own/after/subtree_control"] = rd(G / "cgroup.subtree_control")
    box = G / "tc-probe-box"; make(box)
    run_in(box, CUDA, "nested_cuda")
    run_in(box, HOG, "nested_memfd_hog")
    box2 = G / "tc-probe-box2"; make(box2, 8192)
    procs = []
    for i in range(4):  # several CUDA contexts at once, each in its own cgroup
        b = G / f"tc-probe-par{i}"; make(b)
        procs.append(subprocess.Popen([sys.executable, "-c", CUDA], preexec_fn=lambda b=b: (b / "cgroup.procs").write_text(str(os.getpid())),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out["nested_parallel"] = [(p.wait(120), p.stdout.read()[-200:], p.stderr.read()[-300:]) for p in procs]
except OSError as e:
    out["nested_error"] = repr(e)
Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
print(json.dumps(out, indent=1)[:6000])
