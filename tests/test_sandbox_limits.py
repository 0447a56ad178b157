"""Issue 22, the red team's second round against the sandbox's limits: a result line only the
harness can write (their cause 2), a time limit in CPU seconds (cause 6), the parent's code cache
bounded in characters (cause 9), and a retiring zygote that does not stall the batch (A12); round
7's L01 and E05: a child changes no other process's limits and signals no other process."""
import os
import subprocess
import sys
import threading
import time

import pytest

import sandbox
import screen
import verify
import zygote
from conftest import ROOT, address_space_cap
from test_sandbox_hostile import FORGE, find_sleeping_child


@pytest.fixture
def no_screen(monkeypatch):
    """The static screen off: programs run as they are (any bypass of it assumed found)."""
    monkeypatch.setattr(screen, "check", screen.nodes)


# ------------------------------------------------------- a result line only the harness writes

# f is visibly x + 1; it reaches os through an allowed module's globals (no import, no audit
# event) and writes the line of a run that returned 99 to every fd it has, then exits
FORGER = (FORGE.replace("import os\n", "import statistics\n") + "def f(x):\n"
          "    forge('{\"ok\": true, \"error\": \"\", \"stdout\": \"\", "
          "\"values\": [[\"int\", \"99\"]]}\\n')\n")
FORGER = FORGER.replace("def forge(line):\n", "def forge(line):\n"
                        "    os = statistics.mean.__globals__['random']._os\n")


def test_a_child_cannot_write_the_result_line_itself(no_screen):
    """With the screen off and os in hand, a program's own result line is refused: the zygote
    accepts only a line after the job's token, which the harness alone holds. The honest program
    of the batch is unaffected."""
    honest = {"program": "def f(x):\n    return x + 1", "input": "1"}
    forged, control = verify.validate("code_o", [{"program": FORGER, "input": "1"}, honest])
    assert control["valid"] and control["output"] == "2", control
    assert not forged["valid"] and "did not write" in forged["reason"], forged


# -------------------------------------------------------------- the time limit is CPU seconds

def spin_program():
    return "def f(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s"


def loops_for(cpu_s):
    """The n for which spin_program's f(n) takes about `cpu_s` seconds of CPU here."""
    n, started = 2_000_000, time.process_time()
    s = 0
    for i in range(n):
        s += i
    return int(n * cpu_s / max(time.process_time() - started, 1e-3))


def test_a_verdict_does_not_depend_on_the_load_of_the_host():
    """A program using ~40% of its 1 s limit in CPU is valid alone, and still valid (same output)
    in a batch of 8 while 3 busy processes load the 2 cores: the limit is the child's CPU time, not
    the wall clock (which timed it out under load before)."""
    n = loops_for(0.4)
    proposal = {"program": spin_program(), "input": str(n)}
    alone = verify.validate("code_o", [proposal], timeout=1.0)[0]
    assert alone["valid"], alone
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        loaded = verify.validate("code_o", [proposal] * 8, timeout=1.0)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert [r["reason"] for r in loaded] == ["valid"] * 8
    assert {r["output"] for r in loaded} == {alone["output"]}


def test_spinning_and_blocked_children_still_end(no_screen):
    """Past its CPU time a child ends at once ("timeout"); one that blocks for good uses no CPU and
    ends after zygote.IDLE_S of it, also a "timeout", long before the wall-clock backstop (4 x the
    limit + 1 s = 21 s here; red team round 3 F11). The locks of allowed modules never wait
    (test_no_model_program_waits_out_the_wall_clock), so the blocking call here is a read of an
    empty pipe through os, reached with the screen off."""
    spin = {"program": "def f(x):\n    while True:\n        x += 1", "input": "1"}
    blocked = {"program": "import statistics\ndef f(x):\n"
                          "    os = statistics.mean.__globals__['random']._os\n"
                          "    r, w = os.pipe()\n    return os.read(r, 1)", "input": "1"}
    started = time.monotonic()
    results = verify.validate("code_o", [spin], timeout=0.5)
    assert not results[0]["valid"] and "timeout" in results[0]["reason"], results
    assert time.monotonic() - started < 0.5 * 4 + 1 + sandbox.GRACE_S
    started = time.monotonic()
    results = verify.validate("code_o", [blocked] * 2, timeout=5.0)
    took = time.monotonic() - started
    for r in results:
        assert not r["valid"] and "timeout" in r["reason"], r
    assert took < 4 * zygote.IDLE_S + 1, took


# ------------------------------------------------------------------- the parent's code cache

def test_the_code_cache_is_bounded_in_characters(monkeypatch):
    """Distinct large programs screened one after another keep at most screen.CODES_CHARS
    characters of text (and their code objects) in the parent, not CODES_TEXTS programs of any
    size (the red team's 50 KB programs grew the parent 0.33 MB each, to ~2.7 GB)."""
    monkeypatch.setattr(screen, "CODES_CHARS", 300_000, raising=False)
    screen._CODES.clear()
    for k in range(40):
        screen.prepare_program(f"def f(a):\n    return a + {k}\nS = '{'y' * 36_000}'\n")
    kept = sum(len(text) for text, mode in screen._CODES)
    assert 0 < kept <= 300_000, kept
    # the newest text is there (screened once, then compiled from the cache)
    assert any(text.startswith("def f(a):\n    return a + 39") for text, mode in screen._CODES)


# ---------------------------------------------------------------- a zygote that retires


# with the screen off: a child clears the byte that says it read its whole job, so its zygote
# retires after the job (it cannot trust its request pipe)
RETIRING = ("import statistics\n"
            "def f(x):\n"
            "    g = type(statistics.mean.__globals__['sys'].stdout.buffer).write.__globals__\n"
            "    g['_acknowledged'][0] = 0\n"
            "    return x")


def test_a_retiring_zygote_does_not_stall_the_batch(no_screen, monkeypatch):
    """Each job of a batch makes its zygote retire. The parent starts the replacements and goes on
    with the batch: it never waits for one to be ready (a synchronous start was ~0.35 s of a
    stalled parent per such job); the next run finds them ready."""
    sandbox.run([{"code": "x = 1", "audit": True}])
    waited = [0.0]
    hello = sandbox._hello

    def timed_hello(worker):
        started = time.monotonic()
        try:
            return hello(worker)
        finally:
            waited[0] += time.monotonic() - started
    monkeypatch.setattr(sandbox, "_hello", timed_hello)
    before = {z["pid"] for z in sandbox.zygotes()}
    retiring = [{"code": RETIRING, "calls": ["f(1)"], "audit": True}] * 12
    results = sandbox.run(retiring)
    # a zygote whose child broke the acknowledgement trusts nothing of that job
    assert [r["error"] for r in results] == ["malformed result"] * 12, results
    # zygotes retired and were replaced, with the parent blocked well under one start in all
    assert len(before - {z["pid"] for z in sandbox.zygotes()}) >= 2
    assert waited[0] < 0.1, waited
    honest = [{"code": "def f(x):\n    return x", "calls": ["f(2)"], "audit": True}] * 4
    assert [r["values"] for r in sandbox.run(honest)] == [[["int", "2"]]] * 4


def test_no_model_program_waits_out_the_wall_clock():
    """A model child has one thread, so a lock it holds cannot be released while it waits: a wait
    with a timeout fails at once (seccomp's ETIMEDOUT, isolation._futex_rules), as if its time had
    passed, and a wait for ever ends after zygote.IDLE_S, as a timeout. A loop of 0.4 s waits then
    spends CPU and ends at its CPU limit like any loop (red team round 4 G11: it held its zygote to
    the 4 x limit + 1 s backstop); 150 waits of 0.1 s with a little work between them (under the
    idle watch's 1 % of a CPU) end at once (round 21, A03: 16 s of wall clock, valid); queue
    programs that do not wait still run."""
    if not sandbox.layers()["seccomp"]:
        pytest.skip(f"seccomp is off here: {sandbox.layers()['why']['seccomp']}")
    waiter = ("import queue\ndef f(x):\n    m = queue.Queue().mutex\n    m.acquire()\n"
              "    while True:\n        x += m.acquire(True, 0.4) + 1")
    forever = "import queue\ndef f(x):\n    return queue.SimpleQueue().get()"
    dozer = ("import queue\ndef f(x):\n    m = queue.Queue().mutex\n    m.acquire()\n    s = 0\n"
             "    for i in range(x):\n        m.acquire(True, 0.1)\n        for j in range(20000):\n"
             "            s += j\n    return s % 7")
    honest = ("import queue\ndef f(x):\n    q = queue.Queue()\n    q.put(x)\n    q.put(x + 1)\n"
              "    return [q.get(), q.get_nowait(), q.empty()]")
    started = time.monotonic()
    results = verify.validate("code_o", [{"program": dozer, "input": "150"},
                                         {"program": forever, "input": "1"},
                                         {"program": honest, "input": "1"}], timeout=5.0)
    took = time.monotonic() - started
    assert results[0]["valid"] and results[0]["output"] == str(150 * 199990000 % 7), results[0]
    assert not results[1]["valid"] and "timeout" in results[1]["reason"], results[1]
    assert results[2]["valid"] and results[2]["output"] == "[1, 2, True]", results[2]
    # the dozer's 15 s of waits do not sleep; the forever-waiter ends after about IDLE_S
    assert took < 5.0, took
    started = time.monotonic()
    result = verify.validate("code_o", [{"program": waiter, "input": "1"}], timeout=2.0)[0]
    took = time.monotonic() - started
    assert not result["valid"] and "timeout" in result["reason"], result
    # the waiter's 2 s of CPU, not the 9 s backstop
    assert took < 2.0 * 4 + 1, took


# ------------------------------------------------------- a child reaches no other process

# benchmark code (verify.execute) tries to lower the hard RLIMIT_AS of pid 1 (the zygote, where a
# PID namespace makes it init), of its parent and of itself by pid, then lowers its own through
# setrlimit and reads it back through getrlimit and prlimit(0) (the C library's prlimit64(0, ...))
PRLIMIT = ("import os, resource\nout = []\n"
           "for pid in (1, os.getppid(), os.getpid()):\n"
           "    try:\n"
           "        resource.prlimit(pid, resource.RLIMIT_AS, (1000 << 20, 1000 << 20))\n"
           "        out.append('set')\n"
           "    except OSError as e:\n"
           "        out.append(e.errno)\n"
           "resource.setrlimit(resource.RLIMIT_AS, (900 << 20, 900 << 20))\n"
           "print(out, resource.getrlimit(resource.RLIMIT_AS)[1] >> 20,\n"
           "      resource.prlimit(0, resource.RLIMIT_AS)[0] >> 20)")


def test_a_child_changes_no_other_process_s_limits():
    """prlimit64 on any pid but 0 (the caller) fails with EPERM, the child's own pid included: a
    child that keeps its zygote's uid (a normal user's trainer) lowered its zygote's hard RLIMIT_AS
    through pid 1, and every later child of that zygote failed its set-up (red team round 7 L01).
    As root the kernel refuses another uid's process anyway; the own-pid call shows the filter.
    getrlimit and setrlimit still work; the zygote's later children run jobs of 1 GiB."""
    if not sandbox.layers()["seccomp"]:
        pytest.skip(f"seccomp is off here: {sandbox.layers()['why']['seccomp']}")
    first = sandbox.run([{"code": PRLIMIT}])[0]
    assert first["stdout"] == "[1, 1, 1] 900 900\n", first
    honest = {"code": "x = bytearray(400 << 20)\nprint('OK')", "zygote": first["zygote"]}
    assert [r["stdout"] for r in sandbox.run([honest] * 4)] == ["OK\n"] * 4


# kill(0) (its process group) and kill(-1) (every process it may signal), SIGTERM ignored first
SIGNALS = ("import ctypes, os, signal\nlibc = ctypes.CDLL(None)\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "group, every = libc.kill(0, signal.SIGTERM), libc.kill(-1, signal.SIGTERM)\n"
           "print(os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid(), group)")


def test_a_zygote_whose_child_cannot_set_up_retires():
    """Behind the filter: a zygote whose child's set-up fails retires, since what failed may fail
    in every later child (L01 lowered the zygote's hard RLIMIT_AS: every later child failed its
    set-up, a job error, so the zygote was kept). The set-up failure made here is a memory limit no
    rlimit can hold (2^63 bytes); a job pinned to that zygote then finds it gone."""
    failed = sandbox.run([{"code": "print(1)", "memory_mb": 1 << 43}])[0]
    if address_space_cap() is not None:
        # a host's hard limit is kept, the larger one never asked for: no set-up failure to make
        assert failed["ok"], failed
        pytest.skip("the host caps address space (ulimit -Hv): this set-up cannot fail here")
    assert failed["error"].startswith("sandbox set-up failed"), failed
    after = sandbox.run([{"code": "print(2)", "zygote": failed["zygote"]}, {"code": "print(3)"}])
    assert [r["error"] for r in after] == ["its zygote is gone", ""], after


def test_a_child_signals_no_other_process():
    """Each child is a process group and a session of its own before any user code runs, so
    kill(0) reaches itself alone: a normal user's child ended the process the pool started for its
    zygote (outside the child's PID namespace, in the zygote's process group), and the pool
    replaced the zygote (red team round 7 E05). After kill(0) and kill(-1) (which reaches no
    process of another uid, and none outside a PID namespace) the zygote answers a job pinned to
    it, and the pool replaced none."""
    first = sandbox.run([{"code": SIGNALS}])[0]
    assert first["stdout"] == "True True 0\n", first
    before = {z["pid"] for z in sandbox.zygotes()}
    again = sandbox.run([{"code": "print('alive')", "zygote": first["zygote"]}])[0]
    assert again["stdout"] == "alive\n", again
    assert {z["pid"] for z in sandbox.zygotes()} == before


def test_a_child_does_not_outlive_its_zygote():
    """A child of its own process group is out of the reach of the pool's kill of its zygote's
    group: it gets SIGKILL when its zygote dies (the parent-death signal, set after its uid drop),
    so a sleeping child does not live on."""
    sandbox.run([{"code": "print(1)"}])
    children = []

    def kill():
        children.append(find_sleeping_child(os.getpid()))
        for z in sandbox.zygotes():
            os.killpg(z["pid"], 9)
    threading.Timer(1.0, kill).start()
    result = sandbox.run([{"code": "import time\ntime.sleep(20)", "timeout": 30}])[0]
    assert result["error"] == "worker died", result
    assert children[0], "the sleeping child was not found"
    for _ in range(100):
        if not alive(children[0]):
            break
        time.sleep(0.05)
    assert not alive(children[0])


def alive(pid):
    """Is process `pid` there and not a zombie?"""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "State:\tZ" not in fh.read()
    except OSError:
        return False


def test_a_host_memory_limit_below_the_childs_is_kept():
    """Red team round 8 E01: under a host's hard address-space limit below a child's 1 GiB (`ulimit
    -v` on a cluster node), each child asked to raise it, failed its set-up, and every job came
    back "worker died" while the sandbox reported itself healthy. Now a child keeps the lower
    limit."""
    code = ("import verify\nprint(verify.validate('code_o', [{'program': 'def f(x):\\n"
            "    return x + 1', 'input': '1'}])[0]['reason'])")

    def host_limit():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (900 << 20, 900 << 20))
    out = subprocess.run([sys.executable, "-c", code], preexec_fn=host_limit, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "valid", (out.stdout, out.stderr[-2000:])
