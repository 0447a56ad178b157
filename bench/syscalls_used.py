"""Which system calls the sandbox's zygotes (once locked down) and their children make on honest
work, traced with strace; prints ONE JSON line. It is how isolation.ALLOWED_SYSCALLS (layer 7's
allowlist) was measured, and how to check it on another kernel, C library or Python.

  python bench/syscalls_used.py [--data_dir data] [--limit 40]

The work, from --data_dir (filled by `python evaluate.py fetch`; each part skipped when absent):
the 256 AZR code_o seeds validated and graded (code_o and code_i, their own answers), the code_f
seeds validated and graded, and `evaluate.py selfcheck` on HumanEval+
and MBPP+ (canonical solutions under the benchmark harness: signals, timers, stdin). Needs strace
and a root session (or ptrace rights over one's own processes). Out: {"used": [names],
"not_allowed": [used names missing from isolation.ALLOWED_SYSCALLS], "denied_calls": how many calls
failed with ENOSYS (the allowlist's answer), "processes": traced children}.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import data  # noqa: E402
import isolation  # noqa: E402

WORK = r'''
import json, os, sys
sys.path.insert(0, {root!r})
import verify
folder = {seeds!r}
files = (("code_o", "7b_coder_seed_io.jsonl"), ("code_f", "7b_coder_code_f_seed_io.jsonl"))
for task, name in files:
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        continue
    rows = [json.loads(line) for line in open(path)]
    if task == "code_f":
        proposals = [{{"program": r.get("snippet", r.get("program")), "inputs": r["inputs"],
                      "message": r.get("message") or "a hint"}} for r in rows]
    else:
        proposals = [{{"program": r.get("snippet", r.get("program")), "input": r["input"]}}
                     for r in rows]
    results = verify.validate(task, proposals)
    problems = [dict(p, gold=r["gold"], **{{k: r[k] for k in ("output", "outputs") if k in r}})
                for p, r in zip(proposals, results) if r["valid"]]
    if task == "code_f":
        verify.grade("code_f", [dict(p, answer=p["program"]) for p in problems])
    else:
        verify.grade("code_o", [dict(p, answer=p["output"]) for p in problems])
        verify.grade("code_i", [dict(p, answer=p["input"]) for p in problems])
'''


def traced(command, out, env=None):
    """Run `command` under strace -f, its trace in `out`."""
    strace = ["strace", "-f", "-qq", "-s", "16", "-o", out]
    subprocess.run(strace + command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def used(trace):
    """A trace -> (syscall names made by zygotes after their seccomp filter and by every process a
    locked zygote forked, count of ENOSYS results there, those processes)."""
    line_re = re.compile(r"^(\d+)\s+(?:<\.\.\. )?([a-z_0-9]+)[( ]")
    locked, inside, names, enosys = set(), set(), set(), 0
    zygotes = set()
    for line in open(trace, errors="replace"):
        m = line_re.match(line)
        if not m:
            continue
        pid, name = int(m.group(1)), m.group(2)
        if name == "execve" and "--worker" in line:
            zygotes.add(pid)
        if pid in inside or pid in locked:
            names.add(name)
            if "ENOSYS" in line:
                enosys += 1
        if name in ("clone", "fork", "vfork", "clone3") and (pid in locked or pid in inside
                                                             or pid in zygotes):
            child = re.search(r"= (\d+)$", line.strip())
            if child and (pid in locked or pid in inside):
                inside.add(int(child.group(1)))
            elif child:
                # a zygote's wrapper starting the zygote proper (its PID namespace's init)
                zygotes.add(int(child.group(1)))
        if name == "prctl" and "PR_SET_SECCOMP" in line and pid in zygotes:
            locked.add(pid)
    return names, enosys, inside


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--data_dir", default=os.path.join(ROOT, "data"),
                        help="AZR seeds and benchmarks from `python evaluate.py fetch` (each skipped"
                        " when absent)")
    parser.add_argument("--limit", type=int, default=40, help="items per benchmark")
    args = parser.parse_args()
    if not shutil.which("strace"):
        raise SystemExit("strace is not installed")
    folder = tempfile.mkdtemp(prefix="populora-syscalls-")
    names, enosys, processes = set(), 0, set()
    work = WORK.format(root=ROOT, seeds=os.path.abspath(args.data_dir))
    runs = [[sys.executable, "-c", work]]
    if all(os.path.isfile(data.path(name, args.data_dir)) for name in ("humanevalplus", "mbppplus")):
        runs.append([sys.executable, "evaluate.py", "selfcheck", "--data_dir", args.data_dir,
                     "--benchmarks", "humanevalplus,mbppplus", "--limit", str(args.limit)])
    for n, command in enumerate(runs):
        trace = os.path.join(folder, f"trace{n}")
        traced(command, trace)
        more, denied, children = used(trace)
        names |= more
        enosys += denied
        processes |= children
    shutil.rmtree(folder)
    # and those seccomp_programs allows with conditions on their arguments
    allowed = set(isolation.ALLOWED_SYSCALLS.split()) | {"clone", "prlimit64", "futex"}
    print(json.dumps({"used": sorted(names), "not_allowed": sorted(names - allowed),
                      "denied_calls": enosys, "processes": len(processes),
                      "kernel": os.uname().release, "machine": os.uname().machine}))


if __name__ == "__main__":
    main()
