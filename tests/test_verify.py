"""verify.py + sandbox.py: prompts, parsers, validity, grading, complexity, CLI, hostile code, the
worker pool, and the AZR seed tally (real data, skipped without ../shared)."""
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

import sandbox
import verify
import zygote
from conftest import ROOT, address_space_cap, shared_path

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "verify_problems.jsonl")
PROBLEMS = [json.loads(line) for line in open(FIXTURE)]


def think(answer):
    """A well-formed response (the continuation after the prompt's "<think>")."""
    return f" I should reason. </think>\n<answer>{answer}</answer>"


# ----------------------------------------------------------------------------- prompts


def test_teacher_prompts():
    refs = PROBLEMS[:6]
    for task in ("code_i", "code_o"):
        p = verify.teacher_prompt(task, refs)
        assert p.startswith("A conversation between User and Assistant.")
        assert p.endswith("\nAssistant: <think>")
        assert p.count("<snippet_") == 6 and p.count("```output") == 6 and refs[3]["program"] in p
        # banned words listed
        assert "Reference code snippets" in p and "subprocess" in p
    assert "must work out the input." in verify.teacher_prompt("code_i", [])
    assert "must work out the output." in verify.teacher_prompt("code_o", [])
    p = verify.teacher_prompt("code_f", [], PROBLEMS[0]["program"])
    assert PROBLEMS[0]["program"] + "\nf(<|YOUR INPUT WILL BE PLUGGED HERE|>)" in p
    assert "```message" in p


def test_student_prompts_show_half_of_code_f():
    problem = {"program": "def f(x):\n    return x", "inputs": [f"{k}" for k in range(10)],
               "outputs": [f"'out{k}'" for k in range(10)], "message": "identity"}
    p = verify.student_prompt("code_f", problem)
    assert "```input_4\n4\n```" in p and "'out4'" in p and "input_5" not in p and "'out5'" not in p
    assert "def f(x)" not in p and p.endswith("Assistant: <think>")
    p = verify.student_prompt("code_o", PROBLEMS[0])
    assert PROBLEMS[0]["program"] in p and PROBLEMS[0]["input"] in p
    assert PROBLEMS[0]["output"] not in p
    p = verify.student_prompt("code_i", PROBLEMS[0])
    assert PROBLEMS[0]["output"] in p and "```input\n" not in p


def test_prompt_text_is_unchanged():
    """A warm-started model was trained on these prompts word for word (prompts.py): a change to
    their text must be deliberate, and this hash updated with it. Every task type's teacher and
    student prompt, with sentinel fields."""
    x = "\x00"
    texts = []
    for task in ("code_i", "code_o"):
        texts.append(verify.teacher_prompt(task, [{"program": x, "input": x, "output": x}] * 2))
        texts.append(verify.student_prompt(task, {"program": x, "input": x, "output": x}))
    texts.append(verify.teacher_prompt("code_f", [], x))
    code_f = {"program": x, "inputs": [x] * 4, "outputs": [x] * 4, "message": x}
    texts.append(verify.student_prompt("code_f", code_f))
    digest = hashlib.sha256("\x01".join(texts).encode()).hexdigest()
    assert digest == "24669953c968f180c2d5619efbbd598cf81cf9b9faeba1292ac7aeebea6e7b38"


# ----------------------------------------------------------------------------- parsers

PY, INP = "```python\ndef f(x):\n    return x\n```", "```input\n1, 2\n```"
IDENTITY = "def f(x):\n    return x"


def input_fences(n):
    """n `input` fences holding 0, 1, ..., n - 1."""
    return "".join(f"```input\n{k}\n```\n" for k in range(n))


TEACHER_CASES = [
    ("code_o", think(f"{PY}\n{INP}"), {"program": IDENTITY, "input": "1, 2"}),
    # first fences win
    ("code_o", think(f"```\ndef g(x):\n    return x\n```\n{INP}\n```python\nother\n```\n"
                     "```input\n3\n```"),
     {"program": "def g(x):\n    return x", "input": "1, 2"}),
    ("code_i", think(f"{PY}\n```input\n[1,\n 2]\n```"), {"program": IDENTITY, "input": "[1,\n 2]"}),
    # no input fence
    ("code_o", think(PY), None),
    ("code_o", f" no closing think <answer>{PY}{INP}</answer>", None),
    # no answer tags
    ("code_o", f" </think> {PY}{INP}", None),
    # truncated
    ("code_o", f" </think><answer>{PY}{INP}", None),
    # the last 10 kept
    ("code_f", think(input_fences(12) + "```message\nadds one\n```"),
     {"inputs": [str(k) for k in range(2, 12)], "message": "adds one"}),
    ("code_f", think(input_fences(10) + "<message>tag form</message>"),
     {"inputs": [str(k) for k in range(10)], "message": "tag form"}),
    ("code_f", think(input_fences(9) + "```message\nm\n```"), None),
    # no message
    ("code_f", think(input_fences(10)), None),
]


@pytest.mark.parametrize("task,response,expected", TEACHER_CASES)
def test_parse_teacher(task, response, expected):
    assert verify.parse_teacher(task, response) == expected


STUDENT_CASES = [
    # the last fence
    ("code_o", think("```output\n1\n```\n```output\n[2, 3]\n```"), "[2, 3]"),
    # whole answer as fallback
    ("code_o", think("  'abc'  "), "'abc'"),
    ("code_i", think("```input\n'a',\n'b'\n```"), "'a',\n'b'"),
    ("code_i", think(""), None),
    ("code_f", think("```python\ndef f(x): return 1\n```\ntext\n"
                     "```python\ndef f(x):\n    return 2\n```"),
     "def f(x):\n    return 2"),
    # code_f needs a fence
    ("code_f", think("def f(x): return 1"), None),
    # no </think>
    ("code_o", "<answer>1</answer>", None),
    ("code_o", None, None),
]


@pytest.mark.parametrize("task,response,expected", STUDENT_CASES)
def test_parse_student(task, response, expected):
    assert verify.parse_student(task, response) == expected


# ----------------------------------------------------------------------------- validity


def test_fixture_problems_reproduce_and_normalise():
    proposals = [{"program": p["program"], "input": p["input"]} for p in PROBLEMS]
    res = verify.validate("code_o", proposals)
    assert [r["reason"] for r in res] == ["valid"] * len(PROBLEMS)
    assert [r["output"] for r in res] == [p["output"] for p in PROBLEMS]
    # `def solve` -> `def f`, layout kept
    renamed = res[6]["program"]
    assert renamed.startswith("def f(grid):")
    assert renamed.count("\n") == PROBLEMS[6]["program"].count("\n")


LOOP = "def f(x):\n    while True:\n        pass"
# (program, input, valid, reason fragment)
VALIDITY_CASES = [
    ("def g(x):\n    return g2(x)\ndef g2(y):\n    return y", "1", False,
     "several top-level functions"),
    ("def f(x):\n    f = 3\n    return x", "1", True, "valid"),
    ("def g(x):\n    f = 3\n    return x", "1", False, "name f is already used"),
    ("x = 1", "1", False, "no top-level function"),
    ("def f(x) return x", "1", False, "syntax error"),
    ("import os\ndef f(x):\n    return x", "1", False, "not an allowed module"),
    ("from os import path\ndef f(x):\n    return x", "1", False, "not an allowed module"),
    ("import numpy.random\ndef f(x):\n    return x", "1", False, "not an allowed module"),
    ("def f(x):\n    return eval('x')", "1", False, "banned name: eval"),
    ("def f(x):\n    g = open\n    return x", "1", False, "banned name: open"),
    # a parameter called input is fine
    ("def f(input):\n    return input * 2", "3", True, "valid"),
    ("def f(x):\n    return ().__class__.__bases__[0]", "1", False, "banned attribute"),
    ("def f(x):\n    return getattr(f, '__glob' + 'als__')", "1", False, "needs a constant"),
    ("def f(x):\n    return '{0.__globals__}'.format(f)", "1", False, "banned name in a format field"),
    ("def f(x):\n    return '{0:{1.__class__}}'.format(x, f)", "1", False, "banned name in a format field"),
    ("def f(x):\n    return ('{0.__glo' + 'bals__}').format(f)", "1", False, "format only on a constant"),
    ("def f(x):\n    return str(x) + 'mro' + 'co_names'", "1", True, "valid"),
    # parses, but the compiler refuses it: invalid, never an exception out of the batch
    ("def f(a):\n    y = *a\n    return y", "[1]", False, "does not compile"),
    ("import collections\ndef f(x):\n    collections.Counter.__eq__ = None\n    return x", "1",
     False, "imported"),
    ("from collections import Counter\ndef f(x):\n    Counter.update = None\n    return x", "1",
     False, "imported"),
    ("def f(x):\n    return x", "'abcdefgh'", True, "valid"),
    ("def f(x):\n    return len('abcdefgh') + len(x)", "'abcdefgh'", False, "verbatim"),
    ("def f(x):\n    return 1 / x", "0", False, "ZeroDivisionError"),
    ("def f(x):\n    return [x] * 3000", "1", False, "longer than 2000"),
    ("def f(x):\n    return float('nan')", "1", False, "nan or inf"),
    ("def f(x):\n    return object()", "1", False, "not a plain value"),
    ("class A:\n    def __repr__(self):\n        return '1'\ndef f(x):\n    return A()", "1", False,
     "plain value"),
    ("class A:\n    def __repr__(self):\n        raise RuntimeError('no')\ndef f(x):\n"
     "    return A()", "1", False, "plain value"),
    ("def f(x):\n    return {'kiwi', 'fig', 'plum', 'pear', 'lime', 'date', 'yuzu', 'sloe'}", "1",
     False, "non-deterministic"),
    ("def f(x):\n    return sorted({'kiwi', 'fig', 'plum', 'pear', 'lime'})", "1", True, "valid"),
    # no call-text injection
    ("def f(x):\n    return x", "1), (2", False, "not an argument list"),
    ("def f(x):\n    return x", "__import__('os')", False, "banned name"),
    ("import typing\ndef f(x):\n    return typing.sys.modules['os'].getpid()", "1", False,
     "banned attribute"),
    ("import posix\ndef f(x):\n    return posix.getpid()", "1", False, "not an allowed module"),
    ("import timeit\ndef f(x):\n    return timeit.timeit('1', number=1)", "1", False,
     "not an allowed module"),
    # a multi-line input
    ("def f(a, b):\n    return a + b", "[1,\n 2],\n[3]", True, "valid"),
    ("import json\ndef f(x):\n    return getattr(getattr(json, 'codecs'), 'open')", "1", False,
     "used as a value"),
    ("import json\ndef f(x):\n    return json.codecs.lookup('utf-8')", "1", False,
     "banned attribute: json.codecs"),
]


def test_validity_table():
    proposals = [{"program": p, "input": i} for p, i, _, _ in VALIDITY_CASES]
    res = verify.validate("code_o", proposals, timeout=2.0)
    for (program, inp, valid, reason), r in zip(VALIDITY_CASES, res):
        assert (r["valid"], reason in r["reason"]) == (valid, True), (program, inp, r)
        assert (r["output"] is None) == (not valid)
    multi_line = [i for _, i, _, _ in VALIDITY_CASES].index("[1,\n 2],\n[3]")
    assert res[multi_line]["output"] == "[1, 2, 3]"


def test_validate_bad_requests_never_raise():
    bad = [None, 1, "text", {}, {"program": 5, "input": "1"}, {"program": "def f(x): return x"}]
    res = verify.validate("code_i", bad)
    assert all(not r["valid"] and r["reason"].startswith("bad request") for r in res)
    assert verify.validate("code_o", []) == []


def test_code_f_validity():
    base = {"program": "def f(x):\n    return x % 3", "message": "remainders"}
    inputs = [str(k) for k in range(10)]
    cases = [(dict(base, inputs=inputs), True, "valid"),
             (dict(base, inputs=["3"] * 10), False, "2 distinct"),
             (dict(base, inputs=inputs[:9]), False, "need 10"),
             (dict(base, inputs=inputs[:9] + ["'a'"]), False, "TypeError"),
             (dict(base, inputs=inputs, message="def f(x):\n    return x % 3"), False,
              "contains the program"),
             (dict(base, inputs=inputs, message=" "), False, "empty")]
    res = verify.validate("code_f", [c for c, _, _ in cases])
    for (_, valid, reason), r in zip(cases, res):
        assert r["valid"] == valid and reason in r["reason"], r
    assert res[0]["outputs"] == [repr(k % 3) for k in range(10)]


# ----------------------------------------------------------------------------- grading

ALWAYS_EQ = ("class E:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
             "def f(x):\n    return E()")
CODE_O = {"program": "def f(x):\n    return [x, x * 2]", "input": "3", "output": "[3, 6]"}
COUNTER = {"program": "from collections import Counter\ndef f(s):\n    return Counter(s)",
           "input": "'aab'", "output": "Counter({'a': 2, 'b': 1})"}
# (task, attempt, correct)
GRADE_CASES = [
    ("code_o", dict(CODE_O, answer="[3, 6]"), True),
    # Python ==, as AZR
    ("code_o", dict(CODE_O, answer="[3.0, 6]"), True),
    ("code_o", dict(CODE_O, answer="[3,\n 6]"), True),
    ("code_o", dict(CODE_O, answer="[3, 7]"), False),
    # f is not in scope
    ("code_o", dict(CODE_O, answer="f(3)"), False),
    ("code_o", dict(CODE_O, answer="type('E', (), {'__eq__': lambda s, o: True})()"), False),
    ("code_o", dict(CODE_O, answer="__import__('os')"), False),
    ("code_o", dict(CODE_O, answer=None), False),
    ("code_o", dict(COUNTER, answer="Counter({'b': 1, 'a': 2})"), True),
    # Counter == dict, as Python
    ("code_o", dict(COUNTER, answer="{'a': 2, 'b': 1}"), True),
    ("code_i", dict(CODE_O, answer="3"), True),
    ("code_i", dict(CODE_O, answer="4"), False),
    # another input that works
    ("code_i", dict(PROBLEMS[0], answer="[2, 3, 1],\n'x'"), True),
    ("code_i", dict(CODE_O, answer="3), (4"), False),
    # an answer may not run f (2 of AZR's 256 seeds have such inputs, valid for code_o only): a
    # search for the input is no answer (red team round 18, A05)
    ("code_i", dict(CODE_O, answer="f(1)[0] + 2"), False),
]
F_ATTEMPT = {"program": "def f(x):\n    return x * 2", "inputs": [str(k) for k in range(10)],
             "outputs": [str(2 * k) for k in range(10)], "message": "doubles"}
GRADE_CASES += [
    ("code_f", dict(F_ATTEMPT, answer="def f(x):\n    return x + x"), True),
    # renamed to f
    ("code_f", dict(F_ATTEMPT, answer="def double(y):\n    return 2 * y"), True),
    # fails hidden half
    ("code_f", dict(F_ATTEMPT, answer="def f(x):\n    return 2 * x if x < 5 else 0"), False),
    # shown half unchecked
    ("code_f", dict(F_ATTEMPT, answer="def f(x):\n    return 2 * x if x >= 5 else 0"), True),
    # always-equal object
    ("code_f", dict(F_ATTEMPT, answer=ALWAYS_EQ), False),
    ("code_f", dict(F_ATTEMPT, answer="class I(int):\n    def __eq__(s, o):\n        return True\n"
                                      "def f(x):\n    return I(0)"), False),
    ("code_f", dict(F_ATTEMPT, answer="import os\ndef f(x):\n    return 2 * x"), False),
    ("code_f", dict(F_ATTEMPT, answer="from unittest.mock import ANY\ndef f(x):\n    return ANY"),
     False),
]


def with_golds(task, attempts):
    """Attempts on problems written by hand -> the same with the gold encodings validation gives."""
    done = verify.add_golds(task, attempts)
    assert None not in done
    return done


def test_grade_table():
    for task in verify.TASKS:
        cases = [(a, c) for t, a, c in GRADE_CASES if t == task]
        res = verify.grade(task, with_golds(task, [a for a, _ in cases]), timeout=2.0)
        for (attempt, correct), r in zip(cases, res):
            assert r["correct"] == correct, (task, attempt.get("answer"), r)
            if correct:
                assert r["reason"] == "correct"
            else:
                assert r["reason"] != "correct"


def test_grade_answer_bombs_are_bounded():
    start = time.monotonic()
    bombs = [dict(CODE_O, answer="9**9**9"), dict(CODE_O, answer="[0] * 10**10")]
    bombs = with_golds("code_o", bombs)
    res = verify.grade("code_o", bombs, timeout=1.0)
    assert [r["correct"] for r in res] == [False, False] and "timeout" in res[0]["reason"]
    assert "MemoryError" in res[1]["reason"] and time.monotonic() - start < 6


def test_grade_bad_requests():
    short = {"inputs": ["1"], "outputs": ["1"], "answer": "def f(x): return x"}
    res = verify.grade("code_f", [short, None])
    assert all(r["reason"].startswith("bad request") and not r["correct"] for r in res)


# ----------------------------------------------------------------------------- complexity


def test_complexity():
    program = ("def f(xs, k):\n    # comment\n    total = 0\n    for x in xs:\n"
               "        if x > k and x % 2:\n            total += x\n\n"
               "    return [y for y in xs if y] or total\n")
    cyclomatic = 1 + 1 + 1 + 1 + 2 + 1
    assert verify.complexity(program) == {"ast_depth": 7, "cyclomatic": cyclomatic, "loc": 6,
                                          "variables": 5}
    zero = {"ast_depth": 0, "cyclomatic": 0, "loc": 0, "variables": 0}
    assert verify.complexity("def f(:") == zero
    deep = "def f(x):\n    return " + "[" * 150 + "x" + "]" * 150
    assert verify.complexity(deep)["ast_depth"] > 150


# ----------------------------------------------------------------------------- command line


def run_cli(args, lines):
    command = [sys.executable, os.path.join(ROOT, "verify.py"), *args]
    proc = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_cli_validate_and_grade():
    lines = [json.dumps({"program": PROBLEMS[1]["program"], "input": PROBLEMS[1]["input"]}),
             "{not json",
             json.dumps({"program": "def f(x): return x"}), json.dumps(["a list"]),
             json.dumps({"program": "def f(x):\n    return x + 1", "input": "1"})]
    out = run_cli(["validate", "--task", "code_o"], lines)
    assert out[0] == {"valid": True, "reason": "valid", "output": PROBLEMS[1]["output"],
                      "gold": out[0]["gold"]}
    assert verify.decode(out[0]["gold"]) == eval(PROBLEMS[1]["output"])
    assert [o["valid"] for o in out] == [True, False, False, False, True]
    assert out[4]["output"] == "2"
    assert all(o["reason"].startswith("bad request") and o["output"] is None for o in out[1:4])
    graded = with_golds("code_f", [dict(F_ATTEMPT, answer="def f(x):\n    return x * 2"),
                                   dict(F_ATTEMPT, answer="def f(x): return 0")])
    lines = [json.dumps(graded[0]), "[", json.dumps(graded[1])]
    out = run_cli(["grade", "--task", "code_f"], lines)
    assert [o["correct"] for o in out] == [True, False, False]
    assert set(out[0]) == {"correct", "reason"}
    out = run_cli(["validate", "--task", "code_f"], [json.dumps(F_ATTEMPT)])
    assert out == [{"valid": True, "reason": "valid", "outputs": F_ATTEMPT["outputs"],
                    "gold": out[0]["gold"]}]


# ----------------------------------------------------------------------------- hostile code

def visible_dir():
    """A folder the test can write and the sandbox children can see (not hidden, not a private
    tmpfs)."""
    hidden = sandbox.layers()["hidden_dirs"] + ["/tmp", "/var/tmp", "/dev/shm", "/run/lock"]
    for d in ("/run", "/var/lib", "/opt", "/srv", "/mnt"):
        if not os.path.isdir(d) or not os.access(d, os.W_OK):
            continue
        if not any((d + "/").startswith(h + "/") for h in hidden):
            return d
    return None


@pytest.fixture
def victims(tmp_path):
    """World-writable victim files in tmp_path and in a folder the children can see; removed
    afterwards."""
    folders = [str(tmp_path)]
    if visible_dir():
        folders.append(tempfile.mkdtemp(dir=visible_dir()))
    files = []
    for d in folders:
        os.chmod(d, 0o777)
        files.append(os.path.join(d, "victim.txt"))
        with open(files[-1], "w") as fh:
            fh.write("intact")
        os.chmod(files[-1], 0o666)
    yield files
    for d in folders[1:]:
        subprocess.run(["rm", "-rf", d])


def sandbox_children():
    """{zygote pid: number of its live children}; a zygote forks only for a job and reaps before it
    answers."""
    zygotes = {z["pid"] for z in sandbox.zygotes()}
    count = dict.fromkeys(zygotes, 0)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
        if parent in zygotes:
            count[parent] += 1
    return count


# (name, code as a program body or script, runtime expectation: error fragment or "contained")
HOSTILE = [
    ("infinite loop", "while True:\n    pass", "timeout"),
    ("fork bomb", "import os\nwhile True:\n    os.fork()", "NoneType"),
    ("raw fork", "import ctypes\nlibc = ctypes.CDLL(None)\n"
     "assert all(libc.fork() == -1 for _ in range(50))", "ok"),
    ("threads", "import threading\nthreading.Thread(target=print).start()",
     "can't start new thread"),
    # load-dependent
    ("memory bomb", "x = []\nwhile True:\n    x.append(' ' * 10**6)", "MemoryError|timeout"),
    ("9**9**9", "x = 9**9**9", "timeout"),
    ("deep recursion", "def r(n):\n    return r(n + 1)\nr(0)", "RecursionError"),
    ("write file", "open('{victim}', 'w').write('pwned')", "contained"),
    ("write new file", "open('{new}', 'w').write('pwned')", "contained"),
    ("delete file", "import os\nos.remove('{victim}')", "contained"),
    ("unlink via ctypes", "import ctypes\nassert ctypes.CDLL(None).unlink(b'{victim}') == -1",
     "ok"),
    ("env var", "import os\nassert 'POPULORA_SECRET' not in str(dict(os.environ))\n"
     "print(sorted(os.environ))", "ok"),
    ("parent env", "import os\nprint(open('/proc/%d/environ' % os.getppid()).read())", "contained"),
    ("read outside", "print(open('{repo}/verify.py').read())", "Error"),
    ("read root-only", "print(open('/etc/shadow').read())", "Error"),
    ("socket", "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)", "NoneType"),
    ("raw socket", "import _socket\ns = _socket.socket()\ns.settimeout(1)\n"
     "s.connect(('8.8.8.8', 53))", "Error"),
    ("subprocess", "import subprocess\nsubprocess.run(['touch', '{new}'])", "NoneType"),
    ("shutil", "import importlib\nimportlib.import_module('shutil').copyfile('{victim}', '{new}')",
     "NoneType"),
    ("os.system", "import os\nos.system('touch {new}')", "NoneType"),
    ("os._exit", "import os\nos._exit(3)", "exited (code 3)"),
    ("sys.exit", "import sys\nsys.exit(4)", "SystemExit: 4"),
    ("signal handlers", "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
     "signal.pthread_sigmask(signal.SIG_BLOCK, range(1, 32))\nwhile True:\n    pass", "timeout"),
    ("kill others", "import ctypes\nassert ctypes.CDLL(None).kill(1, 9) == -1\n"
     "assert ctypes.CDLL(None).setuid(0) == -1", "ok"),
    ("patch builtins", "import builtins\nbuiltins.len = lambda x: 0\nbuiltins.print = None", "ok"),
    ("bases escape", "c = [x for x in ().__class__.__bases__[0].__subclasses__() "
     "if x.__name__ == '_wrap_close'][0]\n"
     "c.__init__.__globals__['system']('touch {new}')", "NoneType"),
    ("huge output", "while True:\n    print('x' * 10**6)", "timeout"),
    ("non-utf8 output", "import sys\nprint('\\udcff')\nsys.stdout.buffer.write(b'\\xff\\xfe')",
     "ok"),
    ("bad repr", "class A:\n    def __repr__(self):\n        while True:\n            pass\n"
     "repr(A())", "timeout"),
]


def test_hostile_code_is_contained(victims, monkeypatch):
    victim, new = victims[-1], os.path.join(os.path.dirname(victims[-1]), f"new-{uuid.uuid4().hex}")
    # restart the pool with a secret in our environment
    sandbox.shutdown()
    monkeypatch.setenv("POPULORA_SECRET", "hunter2")
    jobs = []
    for _, code, _ in HOSTILE:
        jobs.append({"code": code.format(victim=victim, new=new, repo=ROOT), "timeout": 2.0})
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    res = sandbox.run(jobs)
    elapsed = time.monotonic() - start
    for (name, code, expect), r in zip(HOSTILE, res):
        if expect == "ok":
            assert r["ok"], (name, r)
        elif expect != "contained":
            assert not r["ok"] and any(e in r["error"] for e in expect.split("|")), (name, r)
        assert len(r["stdout"]) <= zygote.STDOUT_CAP, name
        assert "hunter2" not in r["stdout"] + r["error"], name
        # the child that ran it is gone
        with pytest.raises(ProcessLookupError):
            os.kill(r["pid"], 0)
    assert elapsed < 2.0 * len(HOSTILE) / len(sandbox.zygotes()) + 10
    # KiB: parent memory bounded
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 200_000
    assert all(open(v).read() == "intact" for v in victims) and not os.path.exists(new)
    # no child survives its call
    assert set(sandbox_children().values()) == {0}
    # the pool still works, builtins unpatched
    after = sandbox.run([{"code": "print(len([1, 2]))"}] * 8)
    assert [r["stdout"] for r in after] == ["2\n"] * 8


def test_a_job_cannot_take_the_next_jobs_cwd(monkeypatch):
    """Children's cwds are made by the zygote in a folder of its own: a child cannot pre-create the
    next job's cwd name (which once crashed the zygote, failing whatever job came next)."""
    plant = ("import os\nmade = 0\nfor k in range(1, 300):\n"
             "    for name in ('../%d' % k, '../job%d' % k):\n"
             "        try:\n            os.mkdir(name)\n            made += 1\n"
             "        except OSError:\n            pass\n"
             "print(made)")
    # one zygote per family: the next job runs on the same one
    monkeypatch.setattr(sandbox, "WORKERS_PER_FAMILY", 1)
    sandbox.shutdown()
    try:
        after = [{"code": "print('ran')", "family": 0}] * 3
        res = sandbox.run([{"code": plant, "family": 0}] + after)
    finally:
        # the next test gets the default pool back
        sandbox.shutdown()
    assert res[0]["ok"], res[0]
    # as root the children run as another uid: they cannot write in the zygote's jobs folder
    if os.geteuid() == 0:
        assert res[0]["stdout"] == "0\n", res[0]
    assert [(r["ok"], r["stdout"]) for r in res[1:]] == [(True, "ran\n")] * 3, res[1:]


def test_hostile_programs_are_invalid():
    programs = []
    # as the body of a proposal: rejected by the screen or fails at run time
    for _, code, _ in HOSTILE:
        lines = code.format(victim="/x", new="/y", repo=ROOT).splitlines()
        body = "\n".join("    " + line for line in lines)
        programs.append({"program": f"def f(n):\n{body}\n    return 1", "input": "1"})
    res = verify.validate("code_o", programs, timeout=1.0)
    reasons = [(h[0], r["reason"]) for h, r in zip(HOSTILE, res)]
    assert [r["valid"] for r in res] == [False] * len(HOSTILE), reasons


def test_execute_stdin_big_code_memory_and_timeouts():
    prog = "import sys\ndata = sys.stdin.read().split()\nprint(sum(map(int, data)))\n"
    # ~400 KB of code
    big = "x = [\n" + "    1,\n" * 60_000 + "]\nassert sum(x) == 60000\nprint('big')\n"
    jobs = [{"code": prog, "stdin": " ".join(map(str, range(100_000)))},
            {"code": "print(input())\nprint(input())", "stdin": "a\nb\n"},
            {"code": big},
            {"code": "assert 1 == 2, 'nope'"},
            # address space only: fast, no RAM used
            {"code": "import mmap\nm = mmap.mmap(-1, 1200 * 2**20)"},
            {"code": "import mmap\nm = mmap.mmap(-1, 1200 * 2**20)\nprint('fits')",
             "memory_mb": 2048},
            {"code": "import time\ntime.sleep(30)", "timeout": 0.5},
            {"code": 5}]
    start = time.monotonic()
    res = verify.execute(jobs)
    assert all(0.0 <= r.pop("cpu_s") < 5 for r in res)
    assert res[0] == {"ok": True, "stdout": f"{sum(range(100_000))}\n", "error": ""}
    assert res[1]["stdout"] == "a\nb\n" and res[2]["stdout"] == "big\n"
    assert res[3] == {"ok": False, "stdout": "", "error": "AssertionError: nope"}
    assert "Cannot allocate memory" in res[4]["error"]
    cap = address_space_cap()
    if cap is not None and cap < 2048 << 20:
        # a host's own lower hard limit holds: kept, never asked to be raised
        assert "Cannot allocate memory" in res[5]["error"], res[5]
    else:
        assert res[5] == {"ok": True, "stdout": "fits\n", "error": ""}
    assert res[6]["error"] == "timeout" and res[7]["error"].startswith("bad request")
    assert time.monotonic() - start < 15


def test_unknown_task_and_compile_errors():
    with pytest.raises(ValueError):
        verify.validate("code_x", [])
    with pytest.raises(ValueError):
        verify.student_prompt("code_e", PROBLEMS[0])
    jobs = [{"code": "def f(:\n    pass"}, {"code": "x = '\0'"}, {"code": "print('x' '\\0')"}]
    res = verify.execute(jobs)
    assert not res[0]["ok"] and res[0]["error"].startswith("SyntaxError")
    # NUL in source vs in output
    assert "null bytes" in res[1]["error"] and res[2]["stdout"] == "x\x00\n"


def test_batches_run_in_parallel_within_their_time_limits():
    loops = []
    for k in range(1, 9):
        loops.append({"program": f"def f(x):\n    while x:\n        x += {k}", "input": "1"})
    res = verify.validate("code_o", loops, timeout=1.0)
    assert all(r["reason"] == "error: timeout" for r in res)
    # 16 runs of 1 s of CPU each (a CPU-time limit), as many at once as zygotes and cores allow:
    # their wall-clock spans together are about that many times the batch's own (1 if one after
    # the other), on a loaded host too (a bound in seconds failed a CI run on a busy one)
    jobs = [{"code": f"x = 1\nwhile x:\n    x += {k}", "timeout": 1.0} for k in range(1, 17)]
    start = time.monotonic()
    runs = sandbox.run(jobs)
    elapsed = time.monotonic() - start
    assert all(run["error"] == "timeout" for run in runs), runs
    width = min(len(sandbox.zygotes()), os.cpu_count())
    assert sum(run["wall_s"] for run in runs) > min(width, 2) * 0.7 * elapsed


# ----------------------------------------------------------------------------- the pool


def test_timeout_replaces_the_child_and_next_call_works():
    start = time.monotonic()
    r = sandbox.run([{"code": "while True:\n    pass", "timeout": 0.5}])[0]
    assert r["error"] == "timeout" and time.monotonic() - start < 0.5 + 2.0
    with pytest.raises(ProcessLookupError):
        os.kill(r["pid"], 0)
    again = sandbox.run([{"code": "print('alive')", "timeout": 0.5}] * 4)
    assert [x["stdout"] for x in again] == ["alive\n"] * 4
    assert r["pid"] not in {x["pid"] for x in again}


def test_dead_zygote_is_replaced():
    sandbox.layers()
    victim = sandbox.zygotes()[0]["pid"]
    os.killpg(victim, signal.SIGKILL)
    time.sleep(0.2)
    res = sandbox.run([{"code": "print(1)", "family": 0}] * 4)
    assert all(r["ok"] for r in res)
    assert victim not in [pid for pid, _ in sandbox.layers()["workers"]]


def test_zygote_dying_mid_job_is_replaced():
    import threading
    sandbox.layers()
    zygotes = []

    def kill(family=None):
        # the zygotes running at that moment (the run starts those of its kind)
        for z in sandbox.zygotes():
            if family is None or z["family"] == family:
                zygotes.append(z["pid"])
                os.killpg(z["pid"], signal.SIGKILL)
    threading.Timer(0.5, kill).start()
    start = time.monotonic()
    res = sandbox.run([{"code": "import time\ntime.sleep(20)", "timeout": 30}] * 2)
    assert [r["error"] for r in res] == ["worker died"] * 2 and time.monotonic() - start < 10
    assert sandbox.run([{"code": "print(7)"}])[0]["stdout"] == "7\n"
    assert not set(zygotes) & {pid for pid, _ in sandbox.layers()["workers"]}
    # a job queued behind a dying zygote runs elsewhere: every family-0 zygote runs a sleeper
    # (the pool hands out jobs from the end of the list) with a print queued behind it, or runs
    # the print at once when there are more zygotes than sleepers
    sandbox.shutdown()
    sandbox.run([{"code": "print(1)"}])
    threading.Timer(2.0, kill, (0,)).start()
    sleepers = sum(z["family"] == 0 and z["kind"] == "code" for z in sandbox.zygotes())
    res = sandbox.run([{"code": "print(7)", "family": 0}] * sleepers +
                      [{"code": "import time\ntime.sleep(20)", "timeout": 30, "family": 0}] * sleepers)
    assert [(r["error"], r["stdout"]) for r in res] == ([("", "7\n")] * sleepers +
                                                        [("worker died", "")] * sleepers), res


def test_families_have_different_hash_seeds_and_layers():
    lay = sandbox.layers()
    seeds = [seed for _, seed in lay["workers"]]
    assert len(set(seeds)) == len(seeds) >= 2
    res = sandbox.run([{"code": "print(hash('populora'))", "family": fam} for fam in (0, 1)])
    assert res[0]["stdout"] != res[1]["stdout"]
    net = sandbox.run([{"code": "import _socket\ns = _socket.socket()\ns.settimeout(1)\n"
                                "s.connect(('127.0.0.1', 1))"}])[0]
    if lay["network_namespace"]:   # no interface is up, not even loopback
        refused = ("Network is unreachable", "Cannot assign", "Operation not permitted")
        assert any(text in net["error"] for text in refused), net
    if os.geteuid() == 0 and sys.platform == "linux":
        assert lay["uid_drop"] and lay["no_fork"]


# ------------------------------------------------------------------------- AZR seeds (real data)


def test_azr_seed_tally():
    rows = [json.loads(line) for line in open(shared_path("azr_seeds", "7b_coder_seed_io.jsonl"))]
    proposals = [{"program": r["snippet"], "input": r["input"]} for r in rows]
    results = verify.validate("code_o", proposals)
    tally, odd = verify.seed_tally(rows, results)
    print("AZR seed tally:", json.dumps(tally))
    assert sum(tally.values()) == 256 and tally["truncated"] == 7 and tally["reproduced"] >= 240
    assert tally["unexplained"] == 0, odd


def test_results_carry_the_zygotes_own_measures():
    """cpu_s (the kernel's count, from wait4) and wall_s are the zygote's, not the child's word."""
    sleep, spin = sandbox.run([{"code": "import time\ntime.sleep(0.3)"},
                               {"code": "import time\nend = time.process_time() + 0.3\n"
                                        "while time.process_time() < end:\n    pass"}])
    assert 0.3 <= sleep["wall_s"] < 3 and sleep["cpu_s"] < 0.2, sleep
    assert 0.3 <= spin["cpu_s"] < 3 and spin["wall_s"] >= spin["cpu_s"] - 0.05, spin


# model text whose parsing or compiling warns (3.11: invalid decimal literal, invalid escape
# sequence, "is" with a literal, a tuple called)
NOISY = ("def f(x):\n    y = 1if x else 2\n    g = lambda: (1, 2)(3)\n"
         "    return (x == 1, '\\d', y)\n")


def test_model_text_never_warns_on_the_console():
    """Issue 20: the parent parses and compiles model text (validate, grade, complexity, the seed
    tally's literals): no warning may reach the console, where it reads like an error of ours."""
    import warnings
    proposal = {"program": NOISY, "input": "1"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = verify.validate("code_o", [proposal])[0]
        attempt = dict(proposal, output=result["output"], gold=result["gold"], answer="(0if 1 else 2)")
        verify.grade("code_o", [attempt])
        verify.complexity(NOISY)
        # the rename to f parses (and tokenizes) it again
        verify.prepare_program(NOISY.replace("def f(", "def h("))
    assert result["valid"], result
    assert [str(w.message) for w in caught] == []
    command = [sys.executable, os.path.join(ROOT, "verify.py"), "validate", "--task", "code_o"]
    out = subprocess.run(command, input=json.dumps(proposal) + "\n", capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout)["valid"], out
    assert out.stderr == ""
