"""Issue 22, the process side: what one job leaves behind that another could read (class 2: a
zygote remembers earlier jobs; class 6: state between jobs), and whether a validity check's two
runs really live in different worlds (class 3). Attack programs run through verify.execute /
sandbox.run with no static screen, as root; tests/test_sandbox_modes.py runs the same classes as an
unprivileged user."""
import os

import pytest

import sandbox
import verify
from test_sandbox_hostile import zygote_memory_contains


@pytest.fixture
def one_zygote(monkeypatch):
    """One zygote per family: consecutive jobs of a family land on the same zygote."""
    monkeypatch.setattr(sandbox, "WORKERS_PER_FAMILY", 1)
    sandbox.shutdown()
    yield
    sandbox.shutdown()


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
        assert not zygote_memory_contains(zygote["pid"], marker.encode())


# ------------------------------------------------------------------ class 6: state between jobs

SYSV = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "def segment(key, create):\n"
        "    flags = 0o1666 if create else 0\n"
        "    ident = libc.shmget(key, 1 << 20 if create else 0, flags)\n"
        "    if ident < 0:\n"
        "        return None, ctypes.get_errno()\n"
        "    return ctypes.c_char_p(libc.shmat(ident, None, 0)), 0\n")


def test_nothing_a_job_leaves_reaches_the_next(one_zygote):
    """Files planted where a child can write (its cwd's folder, /tmp, /var/tmp, /dev/shm), a SysV
    segment (which would outlive the child, beyond its memory limit), the inodes of the scratch
    tmpfs used up: the next job on the same zygote finds none of it and runs."""
    key = 0x5EC0 + os.getpid() % 1000
    plant = (SYSV + "import os\n"
             "for d in (os.path.dirname(os.getcwd()), '/tmp', '/var/tmp', '/dev/shm'):\n"
             "    try:\n        os.mkdir(d + '/planted')\n    except OSError:\n        pass\n"
             f"memory, errno = segment({key}, True)\n"
             "if memory:\n    memory.value = b'left-behind'\n"
             "n = 0\n"
             "try:\n    while True:\n        os.mkdir('/tmp/fill%d' % n)\n        n += 1\n"
             "except OSError:\n    pass\nprint(n)")
    look = (SYSV + "import os\nseen = []\n"
            "for d in (os.path.dirname(os.getcwd()), '/tmp', '/var/tmp', '/dev/shm'):\n"
            "    try:\n        names = os.listdir(d)\n    except OSError:\n        names = []\n"
            "    seen += [d for n in names if n == 'planted' or n.startswith('fill')]\n"
            f"memory, errno = segment({key}, False)\n"
            "print(seen, memory.value if memory else None)")
    # the one page a zygote shares with its children (their acknowledgement), reached through
    # the zygote's own module (benchmark code may import __main__)
    shared = ("import __main__\npage = __main__._acknowledged\n"
              "print(bytes(page[1:9]))\npage[1:9] = b'leftover'")
    jobs = [{"code": plant, "family": 0, "timeout": 10}, {"code": look, "family": 0},
            {"code": "print('honest')", "family": 0}, {"code": shared, "family": 0},
            {"code": shared, "family": 0}]
    res = sandbox.run(jobs)
    assert res[0]["ok"], res[0]
    assert res[1]["stdout"] == "[] None\n", res[1]
    assert res[2]["stdout"] == "honest\n", res[2]
    assert res[3]["stdout"] == res[4]["stdout"] == repr(bytes(8)) + "\n", res[3:]


# ----------------------------------------- class 3: a validity check's two runs, different worlds

def test_two_runs_see_different_clocks_and_share_no_ipc():
    """The two runs of a validity check (families 0 and 1, run at the same time) cannot agree on
    a value read from the monotonic or boot clock (each zygote's children have a random offset) or
    passed through SysV shared memory (private per zygote, and denied)."""
    clocks = ("import time\n"
              "print(int(time.monotonic()) // 100000, "
              "int(time.clock_gettime(time.CLOCK_BOOTTIME)) // 100000)")
    key = 0x7E57 + os.getpid() % 1000
    rendezvous = (SYSV + "import os, time\n"
                  f"memory, errno = segment({key}, True)\n"
                  "if memory is None:\n    print('no segment', errno)\n"
                  "else:\n"
                  "    if not memory.value:\n        memory.value = os.urandom(8).hex().encode()\n"
                  "    time.sleep(0.5)\n    print(memory.value)")
    for code in (clocks, rendezvous):
        a, b = sandbox.run([{"code": code, "family": family} for family in (0, 1)])
        assert a["ok"] and b["ok"], (a, b)
        assert a["stdout"] != b["stdout"] or a["stdout"].startswith("no segment"), (a, b)
    lay = sandbox.layers()
    if lay["time_namespace"]:
        a, b = sandbox.run([{"code": clocks, "family": family} for family in (0, 1)])
        assert a["stdout"] != b["stdout"]


# ------------------------------------------------ a job pinned to the zygote that ran another

def test_a_pinned_job_runs_in_the_world_of_the_job_it_follows(monkeypatch):
    """sandbox.run: a job's "zygote" (a result's "zygote") runs it on that zygote: the same hash
    seed, so the same hash of a string, among six zygotes with six seeds; a job pinned to a zygote
    the pool no longer has fails alone ("its zygote is gone"), beside an unpinned one that runs."""
    monkeypatch.setattr(sandbox, "WORKERS_PER_FAMILY", 3)
    sandbox.shutdown()
    try:
        job = {"code": "print(hash('populora'))"}
        first = sandbox.run([dict(job) for _ in range(12)])
        seen = {r["zygote"]: r["stdout"] for r in first}
        assert len(set(seen.values())) > 1 and 0 not in seen, first
        pinned = sandbox.run([dict(job, zygote=z) for z in seen for _ in range(3)])
        assert [r["stdout"] for r in pinned] == [seen[z] for z in seen for _ in range(3)]
        assert [r["zygote"] for r in pinned] == [z for z in seen for _ in range(3)]
        gone = sandbox.run([dict(job, zygote=max(seen) + 100), dict(job)])
        assert not gone[0]["ok"] and gone[0]["error"] == "its zygote is gone", gone
        assert gone[1]["ok"] and gone[1]["stdout"] in seen.values(), gone
    finally:
        sandbox.shutdown()


def test_a_check_whose_zygote_is_gone_is_run_elsewhere(monkeypatch):
    """verify.grade: a code_i self-check pinned to a zygote that has been replaced since its attempt
    ran (whatever replaced it: another problem's program, a crash) runs in both families instead:
    an honest problem is graded, not void (red team round 4 G08: one teacher's program voided
    another's problem by retiring the zygote)."""
    problem = {"program": "def f(x):\n    return x + 1", "input": "5"}
    result = verify.validate("code_i", [problem])[0]
    problem.update(output=result["output"], gold=result["gold"], args=result["args"])
    calls = []
    real = verify._call_f

    def kill_after_the_attempts(entries, families, timeout):
        runs = real(entries, families, timeout)
        if not calls:
            for z in sandbox.zygotes():
                os.killpg(z["pid"], 9)
        calls.append([e.get("zygote", 0) for e in entries])
        return runs
    monkeypatch.setattr(verify, "_call_f", kill_after_the_attempts)
    graded = verify.grade("code_i", [dict(problem, answer=a) for a in ("5", "4", "6")])
    assert [(g["correct"], g["void"]) for g in graded] == [(True, False), (False, False),
                                                          (False, False)], graded
    # attempts; the pinned checks (their zygotes gone); the same checks unpinned
    assert len(calls) == 3 and all(calls[1]) and not any(calls[2]), calls


def test_a_zygote_forks_every_child_from_the_same_heap(one_zygote):
    """The zygote lets go of all it made for a job before the next, so a fresh object's address
    does not move from job to job (it moved one 64-byte slot a job: a per-job bit that no
    per-zygote check catches, which let a teacher choose its students' failure rate through a
    default repr or a set's order; red team round 5 H01-H03). What is left: some addresses take
    one of two values in turn (a zygote runs a job of its own first, so its first child's heap is
    settled too: red team round 6, I04)."""
    job = {"code": "class B:\n    pass\nprint(id(object()) & 0xffff, id(B()) & 0xffff)",
           "family": 0}
    seen = {r["stdout"] for r in sandbox.run([dict(job) for _ in range(12)])}
    # (12 distinct before: one per job)
    assert len(seen) <= 2, seen
