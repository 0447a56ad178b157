"""Reward integrity (issue 12): hostile programs and answers against
verify.py/sandbox.py/graders.py, one block per class of attack. Every case asserts the safe verdict
and that the items batched with it are unaffected. Most run with the static screen switched off
(`no_screen`): the screen is a validity rule, and no guarantee may rest on it."""
import json
import os
import subprocess
import sys
import time

import pytest

import graders
import sandbox
import screen
import verify
from conftest import ROOT

# a result line written by user code itself, to every fd the child may hold (one of them is the
# result pipe)
FORGE = ("import os\n"
         "def forge(line):\n"
         "    for fd in range(3, 64):\n"
         "        try:\n"
         "            os.write(fd, line.encode())\n"
         "        except OSError:\n"
         "            pass\n"
         "    os._exit(0)\n")


def forged(values):
    return json.dumps({"ok": True, "error": "", "stdout": "", "values": values}) + "\n"


@pytest.fixture
def no_screen(monkeypatch):
    """The static screen off: programs run as they are (any bypass of it assumed found)."""
    monkeypatch.setattr(screen, "check", screen.nodes)


def golden(task, problems):
    done = verify.add_golds(task, problems)
    assert None not in done
    return done


CODE_O = {"program": "def f(x):\n    return [x, x * 2]", "input": "3", "output": "[3, 6]"}
TRUE = {"program": "def f(x):\n    return x > 2", "input": "3", "output": "True"}
F_PROBLEM = {"program": "def f(x):\n    return x * 2", "inputs": [str(k) for k in range(10)],
             "outputs": [str(2 * k) for k in range(10)], "message": "doubles"}


def grade_with_controls(task, problem, hostile_answers, right, wrong):
    """Grade hostile answers in one batch with a right and a wrong answer -> hostile verdicts (the
    controls are asserted here: the batch is unaffected)."""
    attempts = [dict(problem, answer=a) for a in hostile_answers + [right, wrong]]
    res = verify.grade(task, attempts, timeout=2.0)
    assert [r["correct"] for r in res[-2:]] == [True, False], res[-2:]
    return res[:-2]


# --------------------------------------------------------------------------- static screen bypasses

SCREEN_BYPASSES = [
    # names built at runtime
    "def f(x):\n    return locals()['x']",
    # an alias of getattr
    "def f(x):\n    g = getattr\n    return g(x, '__cl' + 'ass__')",
    # module aliased
    "import collections as c\ndef f(x):\n    m = c\n    m.Counter.__eq__ = None\n    return x",
    "import operator\ndef f(x):\n    return operator.attrgetter('__class__')(x)",
    "from operator import attrgetter as a\ndef f(x):\n    return a('real')(x)",
    "import string\ndef f(x):\n    return string.Formatter().get_field('0.real', [x], {})",
    "import traceback\ndef f(x):\n    return len(traceback.walk_stack(None))",
    "def f(x):\n    match x:\n        case int(__class__=c):\n            return 1\n    return 0",
    "def f(x):\n    match x:\n        case int(__self__=c):\n            return 1\n    return 0",
    "from codecs import open as o\ndef f(x):\n    return o('/etc/hostname').read()",
    "import tarfile\ndef f(x):\n    return tarfile.bltn_open('/etc/hostname').read()",
    "import fileinput\ndef f(x):\n    return list(fileinput.input('/etc/hostname'))",
    "import linecache\ndef f(x):\n    return linecache.getline('/etc/hostname', 1)",
    "def f(x):\n    return print.__self__",
]


def test_screen_rejects_the_known_bypasses():
    proposals = [{"program": p, "input": "1"} for p in SCREEN_BYPASSES]
    res = verify.validate("code_o", proposals + [CODE_O])
    assert [r["valid"] for r in res] == [False] * len(SCREEN_BYPASSES) + [True], \
        [(p, r["reason"]) for p, r in zip(SCREEN_BYPASSES, res)]
    assert all(r["reason"] and not r["reason"].startswith("error") for r in res[:-1])


def test_file_readers_read_nothing_private_even_without_the_screen(no_screen, tmp_path):
    secret = tmp_path / "token"
    secret.write_text("hunter2-token")
    secret.chmod(0o600)
    readers = [f"from codecs import open as o\ndef f(x):\n    return o('{secret}').read()",
               f"import tarfile\ndef f(x):\n    return tarfile.bltn_open('{secret}').read()",
               f"import linecache\ndef f(x):\n    return linecache.getline('{secret}', 1)",
               f"import fileinput\ndef f(x):\n    return ''.join(fileinput.input('{secret}'))",
               f"def f(x):\n    return open('/proc/self/root{secret}').read()"]
    res = verify.validate("code_o", [{"program": p, "input": "1"} for p in readers] + [CODE_O])
    assert res[-1]["valid"]
    for program, r in zip(readers, res):
        assert "hunter2" not in json.dumps(r), (program, r)


# ----------------------------------------------------------------------------- forged grades

def test_code_o_answers_cannot_forge_a_grade(no_screen):
    problem = golden("code_o", [CODE_O])[0]
    hostile = [
        # a result line of the old protocol ("equal": true) and of the new one, written by the
        # answer itself
        f"(exec({FORGE!r} + 'forge({forged([True])!r})'), 0)",
        f"(exec({FORGE!r} + 'forge({forged([True, True])!r})'), 0)",
        f"(exec({FORGE!r} + 'forge({forged([None])!r})'), 0)",
        # an always-equal object, and a stdlib class patched to be always equal
        "type('E', (), {'__eq__': lambda s, o: True})()",
        "exec('import collections\\ncollections.UserList.__eq__ = lambda s, o: True') or "
        "__import__('collections').UserList()",
    ]
    res = grade_with_controls("code_o", problem, hostile, "[3, 6]", "[3, 7]")
    assert [r["correct"] for r in res] == [False] * len(hostile), res


def test_code_i_answers_cannot_forge_a_grade(no_screen):
    """The output is in the student's prompt: an answer that could run beside f could claim it."""
    problem = golden("code_i", [CODE_O])[0]
    gold_line = forged([problem["gold"]])
    hostile = [
        # claims f(answer) == the gold
        f"exec({FORGE!r} + 'forge({gold_line!r})')",
        # swaps f while arguments are made
        "setattr(f, '__code__', (lambda x: [3, 6]).__code__) or 0",
        "__import__('sys').modules['__main__'].__dict__.update(f=lambda x: [3, 6]) or 0",
        f"exec({FORGE!r} + 'forge({forged([True])!r})')",
    ]
    res = grade_with_controls("code_i", problem, hostile, "3", "4")
    assert [r["correct"] for r in res] == [False] * len(hostile), res


def test_code_f_programs_cannot_forge_a_grade(no_screen):
    problem = golden("code_f", [F_PROBLEM])[0]
    # golds in the frame
    frames = "import sys\ndef f(x):\n    return sys._getframe(1).f_locals['golds'][0]"
    hostile = [
        FORGE + f"forge({forged([True] * 5)!r})\ndef f(x):\n    return 0",
        FORGE + f"forge({forged([['int', '0']] * 5)!r})\ndef f(x):\n    return 0",
        frames,
        "import collections\nclass E(list):\n    def __eq__(self, o):\n        return True\n"
        # planted in a stdlib module
        "collections.Counter = E\ndef f(x):\n    return collections.Counter()",
        "import fractions as m\nm.Fraction.__eq__ = lambda s, o: True\n"
        "def f(x):\n    return m.Fraction(1, 3)",
    ]
    right, wrong = "def f(x):\n    return x + x", "def f(x):\n    return x"
    res = grade_with_controls("code_f", problem, hostile, right, wrong)
    assert [r["correct"] for r in res] == [False] * len(hostile), res


def test_parent_side_equality_table():
    """verify.equal is Python's == on the decoded values (AZR's semantics), on encodings the
    children made."""
    cases = [   # (gold expression, value expression, equal)
        ("{'a': 1, 'b': 2}", "{'b': 2, 'a': 1}", True),
        ("{1, 2, 3}", "{3, 2, 1}", True),
        ("{1, 2}", "frozenset({1, 2})", True),
        ("1.0", "1", True), ("1", "True", True), ("0", "False", True), ("2", "True", False),
        ("0.1 + 0.2", "0.3", False), ("-0.0", "0.0", True),
        ("float('nan')", "float('nan')", False), ("[float('nan')]", "[float('nan')]", False),
        ("float('inf')", "1e999", True),
        ("[1, [2, (3, {'x': {4}})]]", "[1, [2, (3, {'x': {4}})]]", True),
        ("[1, [2, (3, {'x': {4}})]]", "[1, [2, [3, {'x': {4}}]]]", False),
        ("(1, 2)", "[1, 2]", False), ("[]", "()", False),
        ("Counter('aab')", "{'a': 2, 'b': 1}", True),
        ("Counter('aab')", "Counter({'b': 1, 'a': 2})", True),
        ("OrderedDict([(1, 2), (3, 4)])", "OrderedDict([(3, 4), (1, 2)])", False),
        ("OrderedDict([(1, 2), (3, 4)])", "{3: 4, 1: 2}", True),
        ("deque([1, 2])", "deque([1, 2])", True), ("deque([1, 2])", "[1, 2]", False),
        ("defaultdict(list, {1: [2]})", "{1: [2]}", True),
        ("b'ab'", "b'ab'", True), ("b'ab'", "'ab'", False), ("b'ab'", "bytearray(b'ab')", True),
        ("2 ** 200", "2 ** 200", True), ("2 ** 200", "2 ** 200 + 1", False),
        ("-(2 ** 70)", "-(2 ** 70)", True),
        ("Fraction(1, 2)", "0.5", True), ("Decimal('1.10')", "Decimal('1.1')", True),
        ("1 + 2j", "complex(1, 2)", True), ("range(3)", "range(0, 3)", True),
        ("None", "None", True),
        ("'a'", "'a '", False), ("'\\udcff'", "'\\udcff'", True), ("...", "...", True),
    ]
    code = ("from collections import Counter, OrderedDict, deque, defaultdict\n"
            "from fractions import Fraction\nfrom decimal import Decimal\n")
    # each case's two expressions, one after the other
    exprs = []
    for gold, value, _ in cases:
        exprs += [gold, value]
    job = {"code": code}
    jobs = [dict(job, calls=[f"(\n{e}\n)"]) for e in exprs]
    runs = sandbox.run(jobs)
    assert all(r["ok"] for r in runs), [r["error"] for r in runs if not r["ok"]]
    for k, (gold, value, same) in enumerate(cases):
        g, v = runs[2 * k]["values"][0], runs[2 * k + 1]["values"][0]
        assert verify.equal(g, v) == same, (gold, value)
        assert json.loads(json.dumps(g)) == g                       # archive-safe
    namespace = {}
    exec(code, namespace)
    # decode is exact, not just == (a defaultdict's factory aside)
    for k, e in enumerate(exprs):
        want = eval(e, namespace)
        got = verify.decode(runs[k]["values"][0])
        assert type(got) is type(want), e
        assert repr(got) == repr(want) or e.startswith("defaultdict"), e


def test_encodings_refuse_what_is_not_plain():
    code = "import collections\nclass I(int):\n    pass\nclass D(dict):\n    pass\n" \
           "x = []\nx.append(x)\ndeep = []\nfor _ in range(500):\n    deep = [deep]\n"
    exprs = ["I(3)", "D()", "x", "deep", "object()", "print", "collections.UserList()",
             "[0] * 10**6", "'a' * 10**7"]
    runs = sandbox.run([{"code": code, "calls": [e]} for e in exprs] + [
        {"code": code, "calls": ["[1]"]}])
    assert [r["ok"] for r in runs] == [False] * len(exprs) + [True], [r["error"] for r in runs]
    bad = [None, [], ["int"], ["int", 5], ["list", "x"], ["dict", [[["list", []], ["None"]]]],
           ["nope"], ["str", "a", "b"], ["Fraction", "1", "0"], ["float", "0x1p+99999"],
           ["int", "1" * 2 * 10**6], deep_list(200)]
    for enc in bad:
        with pytest.raises(ValueError):
            verify.decode(enc)
        assert not verify.equal(enc, ["None"]) and not verify.equal(["None"], enc)


def deep_list(depth):
    enc = ["list", []]
    for _ in range(depth):
        enc = ["list", [enc]]
    return enc


# ----------------------------------------------------------------------------- forged validity

def test_validity_results_are_checked_in_the_parent(no_screen):
    body = "\ndef f(x):\n    return 1"
    hostile = [
        # a value that is not a string
        FORGE + f"forge({forged([1])!r})" + body,
        FORGE + f"forge({forged([['1']])!r})" + body,                             # no encoding
        # a broken encoding
        FORGE + f"forge({forged([['1', ['int', 'zz']]])!r})" + body,
        # repr over the cap
        FORGE + f"forge({forged([['x' * 3000, ['str', 'x']]])!r})" + body,
        # two values for one call
        FORGE + f"forge({forged(['1', '2'])!r})" + body,
        "import os\nos.write(5, b'{}')" + body,
    ]
    res = verify.validate("code_o", [{"program": p, "input": "1"} for p in hostile] + [CODE_O])
    assert [r["valid"] for r in res] == [False] * len(hostile) + [True], [r["reason"] for r in res]
    assert res[-1]["output"] == "[3, 6]"
    assert res[-1]["gold"] == ["list", [["int", "3"], ["int", "6"]]]


# ----------------------------------------------------------------------------- batch crashes

BAD_LINES = ['{"ok": true, "error": "", "stdout": "", "values": null}\n',
             '{"ok": true, "error": "", "stdout": "", "values": []}\n',
             '{"ok": true, "error": "", "stdout": "", "values": [[[]]]}\n',
             '{"ok": true, "error": "", "stdout": "", "values": [{"a": 1}]}\n',
             '{"ok": true, "error": 5, "stdout": [], "values": [1]}\n',
             '{"ok": "yes", "error": "", "stdout": "", "values": [true]}\n',
             '{"ok": true, "error": "", "stdout": "", "values": ' + "[" * 100_000 + "]" * 100_000
             + '}\n',
             '[1, 2]\n', 'not json\n', '{"ok": true}\n{"ok": true}\n', '\n']


def test_malformed_result_lines_fail_their_item_only(no_screen):
    programs = [FORGE + f"forge({line!r})\ndef f(x):\n    return x" for line in BAD_LINES]
    res = verify.validate("code_o", [{"program": p, "input": "3"} for p in programs] + [CODE_O])
    verdicts = [r["valid"] for r in res]
    assert verdicts == [False] * len(BAD_LINES) + [True], [r["reason"] for r in res]
    f_problem = golden("code_f", [F_PROBLEM])[0]
    right, wrong = "def f(x):\n    return 2 * x", "def f(x):\n    return 1"
    res = grade_with_controls("code_f", f_problem, programs, right, wrong)
    assert [r["correct"] for r in res] == [False] * len(BAD_LINES)
    answers = [f"exec({FORGE!r} + 'forge({line!r})')" for line in BAD_LINES]
    problem = golden("code_i", [CODE_O])[0]
    res = grade_with_controls("code_i", problem, answers, "3", "4")
    assert [r["correct"] for r in res] == [False] * len(BAD_LINES)
    res = grade_with_controls("code_o", problem, answers, "[3, 6]", "[3, 6, 9]")
    assert [r["correct"] for r in res] == [False] * len(BAD_LINES)


def test_forged_mark_lines_fail_their_program_only():
    items = graders_items()
    head = "def has_close_elements(numbers, threshold):\n"
    marks = ["{}", '{"outs": null, "times": [], "error": "", "wall": 0}',
             '{"outs": [{"h": 1}], "times": [0], "error": "", "wall": 0}',
             '{"outs": [], "times": ["x"], "error": "", "wall": 0}',
             "[" * 100_000 + "]" * 100_000]
    hostile = []
    for mark in marks:
        write = f"    sys.__stdout__.write({graders.MARK + mark!r} + '\\n')\n"
        hostile.append("import sys\n" + head + write + "    raise SystemExit\n")
    programs = [(0, code) for code in hostile]
    programs += [(0, items[0]["canonical"]), (0, head + "    return False\n")]
    verdicts = graders.score_evalplus("humanevalplus", items, programs, EVAL_CFG)
    assert [v["correct"] for v in verdicts] == [False] * len(hostile) + [True, False], verdicts


def graders_items():
    import evaluate
    folder = os.path.join(ROOT, "tests", "fixtures", "bench")
    return evaluate.load_benchmark("humanevalplus", folder)[:1]


EVAL_CFG = {"min_time_limit": 1.0, "time_limit_factor": 4.0, "task_timeout": 20.0,
            "reference_timeout": 60.0, "memory_mb": 1024, "lcb_timeout": 2.0}


def test_switching_off_the_alarm_does_not_buy_time():
    """The per-input alarm is the program's to switch off; the CPU the kernel counted is not."""
    items = graders_items()
    cheat = ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
             "signal.setitimer = lambda *a: None\nspent = []\n" + items[0]["canonical"]
             + "\n_right = has_close_elements\n"
             "def has_close_elements(numbers, threshold):\n    if not spent:\n        import time\n"
             "        end = time.process_time() + 2.5\n        while time.process_time() < end:\n"
             "            pass\n        spent.append(1)\n    return _right(numbers, threshold)\n")
    cfg = dict(EVAL_CFG, min_time_limit=0.05, time_limit_factor=1.0, task_timeout=0.5)
    programs = [(0, cheat), (0, items[0]["canonical"])]
    verdicts = graders.score_evalplus("humanevalplus", items, programs, cfg)
    assert [v["correct"] for v in verdicts] == [False, True], verdicts
    assert "time" in verdicts[0]["reason"], verdicts[0]


# ----------------------------------------------------------------------------- state between runs

def one_zygote(monkeypatch):
    monkeypatch.setattr(sandbox, "WORKERS_PER_FAMILY", 1)
    sandbox.shutdown()


def test_no_state_survives_from_one_run_to_the_next(monkeypatch):
    one_zygote(monkeypatch)
    plant = ("import os, posix\n"                    # posix: the functions layer 3 took from os
             "for d in ('/tmp', '/var/tmp', '/dev/shm', '.', os.environ.get('TMPDIR', '.')):\n"
             "    try:\n        open(d + '/marker', 'w').close()\n"
             "    except OSError:\n        pass\n"
             "    try:\n        posix.mkdir(d + '/dir')\n    except OSError:\n        pass\n")
    look = ("import os\nseen = []\n"
            "for d in ('/tmp', '/var/tmp', '/dev/shm', '.'):\n"
            "    seen += [n for n in os.listdir(d) if n in ('marker', 'dir')]\nprint(seen)")
    deep = ("import posix\nfor _ in range(3000):\n    posix.mkdir('d')\n    posix.chdir('d')\n"
            "for _ in range(300):\n    open('%d' % _, 'w').close()\nprint('deep')")
    try:
        # generous time: a loaded machine is slow to make 3,000 nested folders
        jobs = [{"code": code, "family": 0, "timeout": 30}
                for code in (plant, look, deep, look, "print('ran')")]
        res = sandbox.run(jobs)
    finally:
        sandbox.shutdown()
    assert res[0]["ok"] and res[2]["stdout"] == "deep\n", res[:3]
    assert [r["stdout"] for r in (res[1], res[3], res[4])] == ["[]\n", "[]\n", "ran\n"], res


def test_no_earlier_result_is_left_in_a_zygote(monkeypatch):
    """Results pass through a buffer the zygote gives back after each job; its heap holds none of
    them."""
    if os.geteuid() != 0:
        pytest.skip("reads the zygote's memory through /proc (root)")
    one_zygote(monkeypatch)
    marker = "populora" + "-heap-" + "marker"
    make = f"print(''.join(['{marker[:8]}', '{marker[8:]}']) * 3)"
    try:
        res = sandbox.run([{"code": make, "family": 0}, {"code": "print(1)", "family": 0}] +
                          [{"code": f"def f(x):\n    return '{marker[:8]}' + x",
                            "calls": [f"f('{marker[8:]}!')"], "family": 0}])
        # one more job: the zygote gives a result's pages back after sending it, before the next
        sandbox.run([{"code": "print(2)", "family": 0}])
        assert marker in res[0]["stdout"] and res[2]["ok"]
        zygote = next(z["pid"] for z in sandbox.zygotes() if z["family"] == 0)
        found = zygote_memory_contains(zygote, marker.encode())
    finally:
        sandbox.shutdown()
    assert not found


def zygote_memory_contains(pid, needle):
    """Does a writable mapping of process `pid` (and of its namespace child, if it is a wrapper)
    hold needle?"""
    pids = [pid] + [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    for p in pids:
        with open(f"/proc/{p}/maps") as maps, open(f"/proc/{p}/mem", "rb") as mem:
            for line in maps:
                span, perms = line.split()[:2]
                if "rw" not in perms:
                    continue
                lo, hi = (int(x, 16) for x in span.split("-"))
                try:
                    mem.seek(lo)
                    if needle in mem.read(hi - lo):
                        return True
                except OSError:
                    continue
    return False


# ----------------------------------------------------------------------------- other pools

def test_children_of_another_pool_cannot_be_signalled():
    """Two pools (two trainers): different uid ranges, so a child of one cannot kill a child of the
    other."""
    other = subprocess.Popen([sys.executable, "-c", "import sandbox, sys\n"
                              "job = {'code': 'import os, time\\nprint(os.getuid())\\n"
                              "time.sleep(4)'}\n"
                              "r = sandbox.run([dict(job, timeout=20)])\n"
                              "print(r[0]['ok'], r[0]['stdout'].strip())"],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True)
    target = None
    # the other pool's child: a process whose parent is one of its zygotes
    for _ in range(100):
        time.sleep(0.1)
        target = find_sleeping_child(other.pid)
        if target:
            break
    assert target, "the other pool's child was not found"
    kill = f"import ctypes, os\nprint(ctypes.CDLL(None).kill({target}, 9), os.getuid())"
    mine = sandbox.run([{"code": kill}])[0]
    ok, uid = other.communicate(timeout=30)[0].split()
    assert ok == "True", "the other pool's job was killed"
    assert mine["stdout"].split()[0] == "-1"
    if os.geteuid() == 0:
        assert mine["stdout"].split()[1] != uid


def find_sleeping_child(root):
    """pid of a grandchild (or deeper) of `root` running `time.sleep`: the other pool's child."""
    tree = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            tree[int(pid)] = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
    below = {root}
    for _ in range(4):
        below |= {pid for pid, parent in tree.items() if parent in below}
    for pid in below - {root}:
        zygote = tree.get(pid)
        if zygote in below and zygote != root and tree.get(zygote) in below:
            try:
                if "State:\tS" in open(f"/proc/{pid}/status").read():
                    return pid
            except OSError:
                continue
    return None


# ----------------------------------------------------------------------------------- seccomp

def test_seccomp_denies_namespace_trace_mount_and_key_syscalls():
    lay = sandbox.layers()
    if not lay["seccomp"]:
        pytest.skip(f"seccomp is off here: {lay['why']['seccomp']}")
    # (name, syscall number on x86_64, arguments): each must fail with EPERM (or ENOSYS for clone3)
    calls = [("unshare", 272, (0x10000000,)), ("setns", 308, (0, 0)), ("ptrace", 101, (0, 0, 0, 0)),
             ("mount", 165, (0, 0, 0, 0, 0)), ("bpf", 321, (0, 0, 0)), ("keyctl", 250, (0, 0)),
             ("process_vm_readv", 310, (1, 0, 0, 0, 0, 0)), ("io_uring_setup", 425, (1, 0)),
             ("chmod", 90, (b".", 0o777)), ("clone3", 435, (0, 0)),
             # issue 22, class 8: newer than the old denylist (or than libseccomp 2.5): the mount
             # API's open_tree_attr, listmount/statmount, the *xattrat and file_setattr calls, a
             # number no kernel has yet; and SysV IPC, exec, pidfd_getfd
             ("open_tree_attr", 467, (-100, b"/", 0, 0, 0)), ("listmount", 458, (0, 0, 0, 0)),
             ("statmount", 457, (0, 0, 0, 0)),
             ("setxattrat", 463, (-100, b".", 0, b"user.x", 0, 0)),
             ("removexattrat", 466, (-100, b".", 0, b"user.x")),
             ("file_setattr", 469, (0, 0, 0, 0, 0)),
             ("future", 600, ()), ("shmget", 29, (0, 4096, 0o1600)), ("msgget", 68, (0, 0o1600)),
             ("execve", 59, (b"/bin/true", 0, 0)), ("pidfd_getfd", 438, (0, 0, 0))]
    if os.uname().machine != "x86_64":
        pytest.skip("syscall numbers here are x86_64's")
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nout = []\n"
            f"for name, number, args in {calls!r}:\n"
            "    ctypes.set_errno(0)\n"
            "    out.append((name, libc.syscall(number, *args), ctypes.get_errno()))\nprint(out)")
    result = sandbox.run([{"code": code}])[0]
    assert result["ok"], result
    for name, value, errno in eval(result["stdout"]):
        assert value == -1 and errno in (1, 38), (name, value, errno)
