"""Issue 22, the process side: what one job leaves behind that another could read (class 2: a
zygote remembers earlier jobs; class 6: state between jobs), and whether a validity check's two
runs really live in different worlds (class 3). Attack programs run through verify.execute /
sandbox.run with no static screen, as root; tests/test_sandbox_modes.py runs the same classes as an
unprivileged user."""
import json
import os
import subprocess
import sys

import pytest

import sandbox
import verify
from conftest import ROOT


@pytest.fixture
def one_zygote(monkeypatch):
    """One zygote per family: consecutive jobs of a family land on the same zygote."""
    monkeypatch.setattr(sandbox, "WORKERS_PER_FAMILY", 1)
    sandbox.shutdown()
    yield
    sandbox.shutdown()


def memory_of(pid):
    """The writable memory of process `pid` and of its children (a zygote's namespace wrapper has
    the zygote as its child), as one bytes."""
    pids = [pid] + [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    chunks = []
    for p in pids:
        with open(f"/proc/{p}/maps") as maps, open(f"/proc/{p}/mem", "rb") as mem:
            for line in maps:
                span, perms = line.split()[:2]
                if "rw" not in perms:
                    continue
                lo, hi = (int(x, 16) for x in span.split("-"))
                try:
                    mem.seek(lo)
                    chunks.append(mem.read(hi - lo))
                except OSError:
                    continue
    return b"".join(chunks)


# ------------------------------------------------------------------ class 2: a zygote's memory

def test_no_job_payload_ever_enters_a_zygote(one_zygote):
    """A job's program, its calls' arguments and its stdin never pass through the zygote (a later
    child is a copy of it): the child reads its payload after the fork, from the request pipe."""
    if os.geteuid() != 0:
        pytest.skip("reads the zygote's memory through /proc (root)")
    marker = "populora-payload-" + os.urandom(6).hex()
    program = f"SECRET = {marker!r}[::-1]\ndef f(x):\n    return len(SECRET) + x\n"
    teacher = {"program": program, "input": f"len({marker!r}) * 0"}
    code_i = {"program": program, "input": "1", "output": "35"}
    verify.validate("code_o", [teacher])
    verify.grade("code_i", [dict(code_i, gold=["int", "23"], answer=f"len({marker!r}) * 0")])
    verify.execute([{"code": "print(len(input()))", "stdin": marker}])
    # one more run each: whatever the zygote kept of a result has been given back
    verify.validate("code_o", [{"program": "def f(x):\n    return x", "input": "1"}])
    for zygote in sandbox.zygotes():
        assert marker.encode() not in memory_of(zygote["pid"])
