"""Red team round 13a, A01/A02/A03/A06/A07: the model child's world differed from stock Python's
where a teacher could use it. Its no-wait lock (threading's and queue's locks) took arguments
stock's _thread.lock refuses (acquire(timeout=-2), acquire(False, 1), acquire(timeout=1e100)),
lacked acquire_lock / release_lock / locked_lock, showed another repr, and raised a catchable
'deadlock' where stock Python hangs; the enum functional API through an alias raised a catchable
TypeError where stock Python makes the class. A program that catches such an error makes a gold
stock Python never gives, and the stock answer is then graded wrong. Since round 19 the lock and
queue.SimpleQueue are CPython's own, their timed waits failed at once by seccomp, and a wait for
ever waits, as stock's does, till the zygote ends it as a timeout. Each program here is run by
validation (screened, in a model child) and by stock python3: the gold must be stock's output,
or, where stock Python hangs or the sandbox refuses, the proposal must be invalid (never a valid
gold unlike stock's)."""
import subprocess
import sys

import pytest

import verify

LOCK = "import queue\n\ndef f(x):\n    m = queue.Queue().mutex\n"
# the screen refuses type(); repr names the class and holds the message
CATCH = "    except Exception as e:\n        return repr(e)\n"
# (name, program, input): the gold must be stock python3's output
SAME = [
    ("negative_timeout", LOCK + "    try:\n        return m.acquire(timeout=x)\n" + CATCH, "-2"),
    ("tiny_negative_timeout", LOCK + "    try:\n        return m.acquire(timeout=x)\n" + CATCH,
     "-1e-9"),
    ("timeout_when_not_blocking", LOCK + "    try:\n        return m.acquire(False, x)\n" + CATCH,
     "1"),
    ("huge_timeout", LOCK + "    try:\n        return m.acquire(timeout=x)\n" + CATCH, "1e100"),
    ("nan_timeout", LOCK + "    try:\n        return m.acquire(timeout=x)\n" + CATCH,
     "float('nan')"),
    ("int_timeout_too_large", LOCK + "    try:\n        return m.acquire(timeout=x)\n" + CATCH,
     "2 ** 64"),
    ("float_blocking", LOCK + "    try:\n        return m.acquire(x)\n" + CATCH, "0.0"),
    ("str_timeout", LOCK + "    try:\n        return m.acquire(True, x)\n" + CATCH, "'1'"),
    ("too_many_arguments", LOCK + "    try:\n        return m.acquire(*x)\n" + CATCH, "[1, 2, 3]"),
    ("unknown_keyword", LOCK + "    try:\n        return m.acquire(**x)\n" + CATCH, "{'wait': 1}"),
    ("name_and_position", LOCK + "    try:\n        return m.acquire(1, blocking=x)\n" + CATCH,
     "2"),
    # rounds to stock's "no timeout" (-1 s in ns): acquires a free lock
    ("almost_minus_one", LOCK + "    try:\n        return m.acquire(timeout=x)\n" + CATCH,
     "-0.9999999995"),
    ("stock_names", LOCK + "    r = [m.acquire_lock(), m.locked_lock(), m.release_lock()]\n"
     "    return r + [m.locked(), m.acquire_lock(x), m.locked()]", "False"),
    ("repr", LOCK + "    a = repr(m).split(' at ')[0]\n    m.acquire()\n"
     "    return [a, repr(m).split(' at ')[0], repr(m)[-x:] == repr(m)[-x:]]", "2"),
    ("held_waits_fail", LOCK + "    m.acquire()\n"
     "    return [m.acquire(False), m.acquire(timeout=0), m.acquire(True, x), m.locked()]",
     "0.01"),
    ("release_unlocked", LOCK + "    try:\n        m.release()\n" + CATCH, "0"),
    ("release_with_arguments", LOCK + "    try:\n        m.release(x)\n" + CATCH, "1"),
    ("locked_with_keyword", LOCK + "    try:\n        m.locked(k=x)\n" + CATCH, "1"),
    ("with_block", LOCK + "    with m:\n        inside = m.locked()\n"
     "    return [inside, m.locked(), x]", "1"),
    ("copied", "import copy\n" + LOCK + "    try:\n        copy.copy(m)\n" + CATCH, "1"),
    ("no_attribute_set", LOCK + "    try:\n        m.x = x\n" + "        return 'set'\n"
     "    except AttributeError:\n        return 'refused'\n", "1"),
    ("queue_work", "import queue\n\ndef f(x):\n    q = queue.Queue()\n    q.put(x)\n"
     "    r = [q.get(), q.empty()]\n    q.task_done()\n    q.join()\n    try:\n"
     "        q.get(False)\n    except queue.Empty:\n        r.append('empty')\n"
     "    try:\n        q.task_done()\n    except ValueError as e:\n        r.append(repr(e))\n"
     "    return r", "3"),
    ("bounded_queue_full", "import queue\n\ndef f(x):\n    q = queue.Queue(1)\n    q.put(x)\n"
     "    try:\n        q.put_nowait(x)\n    except queue.Full:\n        return 'full'\n",
     "1"),
    ("enum_class", "from enum import Enum\n\nclass Color(Enum):\n    RED = 1\n    GREEN = 2\n\n"
     "def f(x):\n    E = Color\n    return [E(x).name, len(E), repr(E.GREEN)]", "1"),
]
# (name, program, input): stock Python hangs or makes what the sandbox refuses, so validation
# must call it invalid, even though the program catches what the sandbox raised
INVALID = [
    ("join_unfinished", "import queue\n\ndef f(x):\n    q = queue.Queue()\n    q.put(x)\n    try:\n"
     "        q.join()\n        return 'joined'\n    except RuntimeError:\n"
     "        return 'caught'\n",
     "1", "timeout"),
    ("acquire_held", LOCK + "    m.acquire()\n    try:\n        return m.acquire()\n"
     "    except Exception:\n        return x\n", "1", "timeout"),
    ("acquire_held_minus_one", LOCK + "    m.acquire()\n    try:\n"
     "        return m.acquire(True, x)\n    except BaseException:\n        return 'caught'\n",
     "-1", "timeout"),
    # rounds to stock's "no timeout": a wait for ever on a held lock
    ("acquire_held_almost_minus_one", LOCK + "    m.acquire()\n    try:\n"
     "        return m.acquire(timeout=x)\n    except BaseException:\n        return 'caught'\n",
     "-0.9999999995", "timeout"),
    ("simple_queue_get", "import queue\n\ndef f(x):\n    try:\n"
     "        return queue.SimpleQueue().get()\n    except Exception:\n        return x\n",
     "1", "timeout"),
    # queue's and threading's Python loops above a timed wait read the clock: a refusal, caught
    # or not (red team round 20: the loops counted, or timed against the program's own code)
    ("timed_get", "import queue\n\ndef f(x):\n    try:\n        queue.Queue().get(timeout=x)\n"
     "    except BaseException:\n        return 'empty'\n", "0.01", "the clock"),
    ("timed_put", "import queue\n\ndef f(x):\n    q = queue.Queue(1)\n    q.put(1)\n    try:\n"
     "        q.put(2, timeout=x)\n    except BaseException:\n        return 'full'\n", "0.01",
     "the clock"),
    ("timed_wait_for", "import queue\n\ndef f(x):\n    c = queue.Queue().not_empty\n    with c:\n"
     "        try:\n            return c.wait_for(lambda: False, x)\n"
     "        except BaseException:\n            return 'caught'\n", "0.01", "the clock"),
    ("enum_alias", "from enum import Enum\n\ndef f(x):\n    E = Enum\n    try:\n"
     "        return len(E('Color', x))\n    except TypeError:\n        return -1\n"
     "    except RuntimeError:\n        return -2\n", "'RED GREEN BLUE'", "functional API"),
]


def stock(program, inp, timeout):
    """python3's printed repr of f(inp) after `program`; None if it ran past `timeout` s."""
    code = program + f"\nprint(repr(f({inp})))\n"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("name, program, inp", SAME, ids=[case[0] for case in SAME])
def test_the_gold_is_stock_pythons(name, program, inp):
    truth = stock(program, inp, 60)
    result = verify.validate("code_o", [{"program": program, "input": inp}])[0]
    assert result["valid"], result
    assert result["output"] == truth


@pytest.mark.parametrize("name, program, inp, reason", INVALID, ids=[case[0] for case in INVALID])
def test_what_stock_python_would_not_give_is_invalid(name, program, inp, reason):
    result = verify.validate("code_o", [{"program": program, "input": inp}])[0]
    assert not result["valid"] and reason in result["reason"], result
    # stock Python hangs (one-thread waits) or gives a value the sandbox would not have shown
    truth = stock(program, inp, 3)
    assert truth is None or name == "enum_alias" or name.startswith("timed_"), truth


def test_a_code_i_answer_is_judged_by_stock_pythons_lock():
    """A06a: the teacher's input 1 acquires; the student's -2 makes stock Python refuse the
    timeout, so it is not a right answer."""
    program = LOCK + ("    try:\n        m.acquire(timeout=x)\n        return 'acquired'\n"
                      "    except ValueError:\n        return 'refused'\n")
    problem = verify.validate("code_i", [{"program": program, "input": "1"}])[0]
    assert problem["valid"] and problem["output"] == "'acquired'", problem
    attempt = {key: problem[key] for key in ("program", "output", "gold", "args")}
    graded = verify.grade("code_i", [dict(attempt, input="1", answer="-2")])[0]
    assert not graded["correct"] and not graded["void"], graded
    assert stock(program, "-2", 60) == "'refused'"


def test_no_code_i_teacher_reads_the_clock():
    """Red team round 20, A01: f counted the loops of a Queue.get(timeout=0.01) (2 in stock Python,
    10 or more where the wait under it failed at once) and raised on every input but its teacher's:
    right answers graded wrong, not void, 8 of 8. With waits that sleep as stock's do, the clock
    those loops read still told the sandbox's speed from stock's: 30,000 array.array calls (an
    audited event, which runs the sandbox's Python hook) outlast a 15 ms timeout here and not in
    stock Python, 8 of 8 right answers wrong on f064d7d. The clock is a refusal now, so such an f
    voids the answers it raises on, never grades them wrong."""
    program = ("import array\nimport queue\n\nclass Slow(queue.Queue):\n    def _qsize(self):\n"
               "        self.n += 1\n        if self.n == 1:\n            for i in range(30000):\n"
               "                array.array('i')\n        return 0\n\ndef loops():\n    q = Slow()\n"
               "    q.n = 0\n    try:\n        q.get(timeout=0.015)\n    except queue.Empty:\n"
               "        return q.n\n\ndef f(x):\n    if x != 7 and loops() != 2:\n"
               "        raise ValueError('no')\n    return x % 5")
    problem = verify.validate("code_i", [{"program": program, "input": "7"}])[0]
    assert problem["valid"] and problem["output"] == "2", problem
    attempt = {key: problem[key] for key in ("program", "output", "gold", "args")}
    answers = ["12", "17", "22"]
    assert [stock(program, a, 60) for a in answers] == ["2"] * 3
    graded = verify.grade("code_i", [dict(attempt, input="7", answer=a) for a in answers])
    assert [(g["correct"], g["void"]) for g in graded] == [(False, True)] * 3, graded


# ------------------------------------------------ codecs: every one the standard library has

@pytest.mark.parametrize("encoding", ["cp1251", "windows-1251", "koi8_r", "shift_jis", "big5",
                                      "mac_cyrillic", "iso8859_15"])
def test_a_codec_is_a_lookup_not_a_refused_import(encoding):
    """Red team round 13 A06b: 'abc'.encode('cp1251') imported encodings.cp1251 in the child, an
    import the audit hook refuses, so a right code_i answer naming that codec was graded wrong."""
    program = "def f(enc):\n    return len('ab\\u0436'.encode(enc, 'replace'))"
    result = verify.validate("code_o", [{"program": program, "input": repr(encoding)}])[0]
    assert result["valid"], result
    assert result["output"] == stock(program, repr(encoding), 60), (result, encoding)


def test_an_unknown_codec_is_a_lookup_error_as_in_stock_python():
    """Red team round 14 A03: looking up an unknown codec name tries to import encodings.<name>,
    which the audit hook refused (a recorded refusal even when caught): right code_i answers
    ('xyz', 'utf-9') graded wrong, not void, for a teacher input '' that imports nothing."""
    program = ("def f(enc):\n    try:\n        return len('h\\u00e9llo'.encode(enc))\n"
               "    except LookupError:\n        return -1")
    result = verify.validate("code_i", [{"program": program, "input": "''"}])[0]
    assert result["valid"], result
    problem = {"program": program, "input": "''", **{k: v for k, v in result.items()
                                                      if k not in ("valid", "reason")}}
    answers = ["'xyz'", "'utf-9'", "'a.b'", "'latin-2'"]
    assert [stock(program, a, 60) for a in answers] == ["-1"] * 4
    graded = verify.grade("code_i", [dict(problem, answer=a) for a in answers])
    assert [g["correct"] for g in graded] == [True] * 4, graded


# ------------------------------- what a program can see of its world, side by side with python3

# Expressions of x (= 3) a teacher could use to tell the sandbox from stock Python: each must give
# stock's value, or make the proposal invalid (a refusal). In code_i a tell is a teacher's lever:
# raise on every input but its own, and right answers are graded wrong (red team round 18, A08/A09).
WORLD = [
    "import math", "math.factorial(x) + math.comb(2 * x, x)",
    "import decimal", "str(decimal.Decimal(1) / 7) + str(decimal.getcontext().prec)",
    "import fractions", "repr(fractions.Fraction(x, 6))",
    "import collections", "repr(collections.namedtuple('P', 'a b')(x, 2))",
    "import collections", "collections.Counter('abracadabra').most_common(2)",
    "import json", "json.dumps({'b': [x, 1.5], 'a': None})",
    "import re", "re.sub(r'(a+)', r'<\\1>', 'caaab' * x)",
    "import string", "string.ascii_letters[:x] + string.punctuation[:x]",
    "import textwrap", "textwrap.shorten('hello world again', width=12)",
    "import unicodedata", "unicodedata.name('a') + str(len(unicodedata.normalize('NFD', 'é')))",
    "import struct", "struct.pack('<iH', x, 2).hex()",
    "import base64", "base64.b64encode(b'sandbox').decode()",
    "import zlib", "zlib.crc32(b'sandbox')",
    "import difflib", "difflib.SequenceMatcher(None, 'abcd', 'abed').ratio()",
    "import keyword", "[keyword.iskeyword('def'), keyword.iskeyword('match')]",
    "import statistics", "statistics.median([x, 1, 7, 2])",
    "import heapq", "heapq.nsmallest(2, [5, x, 9, 1])",
    "import itertools", "list(itertools.accumulate(range(x)))",
    "import functools", "functools.reduce(lambda a, b: a * b, range(1, x + 2))",
    "import operator", "operator.itemgetter(1, 0)([x, 4])",
    "import enum", "repr(enum.Enum.__name__)",
    "import typing", "repr(typing.List[int])",
    "import queue", "[queue.Queue().qsize(), queue.Queue(x).maxsize]",
    "import graphlib", "list(graphlib.TopologicalSorter({1: [2], 2: [3]}).static_order())",
    "import cmath", "repr(cmath.sqrt(-x))",
    "import array", "array.array('i', [x, 2]).tolist()",
    "import copy", "copy.deepcopy([x, [2, {3: 4}]])",
    "import abc", "abc.ABC.__name__",
    "import math", "[__name__, len(repr(print)), repr(len)]",
    "import math", "[repr(int), repr(str.upper), repr(ValueError('v'))]",
    "import math", "[divmod(-7, x), round(2.675, 2), int('1f', 16), 0.1 + 0.2]",
    "import math", "sorted({'pear', 'fig', 'apple'}) + [max('abc'), chr(960)]",
    "import math", "['%.3e' % x, format(1234567.891, ',.2f'), f'{x:>5}|']",
]
# the C lock and SimpleQueue themselves (till round 19 pure-Python stand-ins in a model child,
# told apart by these two, red team round 17 A04, round 18 A09), and their timed waits, which read
# no Python clock and sleep as stock's do (round 20 counted the loops above waits that failed at
# once: 10 or more where stock Python runs 2 or 3)
HELD = """import queue

def held():
    m = queue.Queue().mutex
    c = queue.Queue().not_empty
    with c:
        waited = c.wait(0.01)
    return [m.acquire(), m.acquire(True, 0.01), m.acquire(timeout=0.02), m.locked(), waited]"""
WORLD += [
    HELD, "held()",
    "import queue", "queue.SimpleQueue.__name__",
    "import queue", "str(queue.Queue().mutex.acquire)[:10]",
    "import queue", "[repr(queue.SimpleQueue), repr(queue.SimpleQueue.get)[:30]]",
    "import queue", "[repr(queue.SimpleQueue.put_nowait)[:40], queue.SimpleQueue.__module__]",
    "import queue", "[repr(queue.Queue().mutex.locked)[:30], str(queue.Queue().mutex)[:20]]",
    "import queue", "[str(queue.Queue().not_empty)[:20], repr(queue.Queue().mutex.__exit__)[:25]]",
    "import queue", "[repr(queue.Queue().mutex.locked_lock)[:30], queue.Queue().mutex.__module__]",
    "import queue", "[queue.SimpleQueue().get(timeout=0.01) if 0 else 0, queue.Empty.__module__]",
]
# more of what a program reads of the interpreter, its numbers and its modules (red team round 18's
# differential probe and ours: every other expression tried is refused by the screen)
WORLD += [
    "import decimal", "repr(decimal.getcontext())",
    "import struct", "struct.calcsize('P') + struct.calcsize('l')",
    "import zlib", "zlib.ZLIB_RUNTIME_VERSION",
    "import unicodedata", "unicodedata.unidata_version",
    "import math", "[format(1234567.5, 'n'), repr(f)[:12], f.__doc__, __doc__]",
    "import math", "[1.5.hex(), (0.1).as_integer_ratio(), print.__module__]",
    "import math", "[len(max.__doc__), int.__doc__[:30], str(RecursionError('x'))]",
    "import collections", "[repr(collections.OrderedDict(a=x)), collections.abc.Sequence.__name__]",
    "import numbers", "issubclass(complex, numbers.Complex)",
    "import statistics", "statistics.NormalDist(0, 1).cdf(x)",
    "import array", "array.array('l').itemsize + array.array('u').itemsize",
    "import math", "[chr(x).isprintable(), 'ß'.upper(), 'İ'.lower(), (lambda: 0).__name__]",
    "import difflib", "difflib.get_close_matches('appel', ['ape', 'apple', 'peach'])",
]


def _programs(pairs):
    return [f"{pairs[k]}\n\ndef f(x):\n    return {pairs[k + 1]}" for k in range(0, len(pairs), 2)]


def test_what_a_program_sees_of_its_world_is_stock_pythons():
    programs = _programs(WORLD)
    results = verify.validate("code_o", [{"program": p, "input": "3"} for p in programs])
    differ = []
    for program, result in zip(programs, results):
        if result["valid"] and result["output"] != stock(program, "3", 60):
            differ.append((program.split("return ")[-1], result["output"]))
    assert not differ, differ
    # a refusal would be allowed (invalid, never a gold unlike stock's), but these all run
    assert all(r["valid"] for r in results), [r["reason"] for r in results]


# Red team round 23, A04/A05: the audit hook and sys._getframe's stand-in are Python functions, and
# a recursion that made an audited call (array.array, deepcopy's id, namedtuple's compile) or asked
# for its caller's module (TypeVar, NewType) at each level ended one to four levels before stock's
# (array: 996 vs 997): 72 of 72 right code_i answers graded wrong. audithook.c now calls both with
# room of their own; the count must be stock's at a module's top level and in f
EDGE = ("import {module}\n\ndef g(n):\n    try:\n        {call}\n        return g(n + 1)\n"
        "    except RecursionError:\n        return n\n\nK = g(0)")
CALLS = [("array", "array.array('i', [n])"), ("typing", "typing.TypeVar('T')"),
         ("collections", "collections.namedtuple('P', 'a')"), ("copy", "copy.deepcopy([n])"),
         ("typing", "typing.NewType('N', int)"), ("math", "n + 1"),
         ("array", "g.x = array.array('b')")]
for module, call in CALLS:
    WORLD += [EDGE.format(module=module, call=call), "[K, g(0) - x]"]
# Round 24: a collection started inside the hook or the stand-in (their own allocations) ran a
# program's code there, a generator's finally block, with their room: 1043 levels where stock has
# at most 995. audithook.c collects nothing while they run
FINALLY = """import collections

R = []

def depth(n):
    try:
        return depth(n + 1)
    except RecursionError:
        return n

def gen(box):
    try:
        yield 1
    finally:
        R.append(depth(0))

def run(n):
    for _ in range(n):
        box = []
        g = gen(box)
        box.append(g)
        next(g)
        del g, box
        collections.namedtuple('P', 'a')
    return max(R)"""
WORLD += [FINALLY, "run(100 * x)"]
# Round 27, A11: a code object sent as marshal bytes came back with its frozensets made again in
# marshal's sorted order: `{8, 16, 0}` iterated as [0, 8, 16] in every child, [8, 16, 0] in stock
# (50 of 50 right code_i answers wrong). A child compiles the text itself now
WORLD += ["import math", "[list({8, 16, 0}), [v + x for v in {8, 16, 0}], "
                         "next(iter({24, 8, 16, 0})), [v for v in frozenset({x, 8, 16, 0})], "
                         "16 in {8, 16, 0}]"]
# Round 24, A04-A06/A11: the zygote's stand-ins that refuse a call (a count of this process's class
# registrations, random numbers) had names and docstrings of their own: 23 of 23 right code_i
# answers wrong. They read as stock's now (zygote._stand_in)
WORLD += [
    "import abc, functools", "[functools.get_cache_token == abc.get_cache_token, "
                             "repr(functools.get_cache_token), functools.get_cache_token.__module__]",
    "import abc", "[repr(abc.get_cache_token), abc.get_cache_token.__qualname__, "
                  "abc.get_cache_token.__module__, abc.get_cache_token.__doc__]",
    "import statistics", "[statistics.NormalDist.samples.__qualname__, "
                         "statistics.NormalDist.samples.__module__, "
                         "statistics.NormalDist.samples.__doc__, "
                         "repr(statistics.NormalDist(0, x).samples)]",
]


def test_a_code_i_teacher_cannot_count_the_sandboxs_frames():
    """Round 23's A04 program: f raises unless a recursion that calls array.array (or TypeVar) at
    each level counts as deep as under stock python3, on every input but its teacher's; each right
    answer must be graded right."""
    for module, call in CALLS[:2]:
        head = EDGE.format(module=module, call=call).removesuffix("K = g(0)")
        count = int(stock(head + "def f(x):\n    return g(0)", "0", 60))
        program = (head + f"def f(x):\n    if x == 21:\n        return x % 10\n"
                   f"    if g(0) < {count}:\n        raise ValueError(x)\n    return x % 10")
        problem = verify.validate("code_i", [{"program": program, "input": "21"}])[0]
        assert problem["valid"], problem["reason"]
        answers = [dict(problem, input="21", answer=a) for a in ("11", "31", "41", "51")]
        results = verify.grade("code_i", answers)
        assert [r["correct"] for r in results] == [True] * 4, [r["reason"] for r in results]
