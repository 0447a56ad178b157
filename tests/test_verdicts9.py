"""Red team round 15: what the sandbox says is not what Python says, and a code_f input is read in
the world a student knows. Each test failed on the code before the fix (the commit that added them
says how)."""
import json
import subprocess
import sys

import pytest

import verify
from conftest import ROOT

# code_i: a teacher program that runs into one of the sandbox's own limits on every path but its
# teacher's input (9173): a refusal (caught or not), the child's memory, its time. Stock Python
# answers True for any n > 0 (given the memory and the time); the sandbox cannot say what Python
# would, so those attempts decide nothing (A08: these right answers were graded wrong), and the
# teacher's own input is still right (round 17, A05: a voided attempt voids no other). Not a
# RecursionError: the sandbox's depth is at least stock's, so stock fails there too.
OFF_PATH = {
    "refused, caught": "import copy\nclass P: pass\n{head}\n        try: copy.deepcopy(P())\n"
                       "        except Exception: pass\n    return n > 0",
    "refused": "import copy\nclass P: pass\n{head}\n        copy.deepcopy(P())\n    return n > 0",
    "memory": "{head}\n        b = bytearray(2 ** 31)\n    return n > 0",
    "time": "{head}\n        while True: pass\n    return n > 0",
}
HEAD = "def f(n):\n    if n != 9173:"


@pytest.mark.parametrize("kind", sorted(OFF_PATH))
def test_a_code_i_answer_the_sandbox_cannot_run_is_void(kind):
    program = OFF_PATH[kind].format(head=HEAD)
    [problem] = verify.validate("code_i", [{"program": program, "input": "9173"}])
    assert problem["valid"] and problem["output"] == "True", problem
    attempts = [dict(problem, input="9173", answer=a) for a in ("1", "42", "9173")]
    *stopped, own = verify.grade("code_i", attempts, timeout=1.0)
    for result in stopped:
        assert result["void"] and not result["correct"], stopped
        assert result["reason"].startswith("void: the sandbox"), stopped
    assert own["correct"] and not own["void"], own


def test_an_answer_whose_own_expression_the_sandbox_stops_is_void_alone():
    # the student's own text ran out of the child's memory before f: that attempt decides nothing
    # (it runs with the teacher's program in scope, where a refusal may be the teacher's: round 18,
    # A01), and voids no other
    [problem] = verify.validate("code_i", [{"program": "def f(n):\n    return len(n) > 0",
                                            "input": "[1]"}])
    own, right = verify.grade("code_i", [dict(problem, input="[1]", answer=a)
                                         for a in ("[0] * 10 ** 10", "[2]")])
    assert own["void"] and not own["correct"], own
    assert "MemoryError" in own["reason"], own
    assert right["correct"] and not right["void"], right


def test_a_code_i_answer_that_python_rejects_is_still_wrong():
    # f raising on another input is Python's own answer: that input is wrong, the problem decides
    program = "def f(n):\n    if n != 9173:\n        raise ValueError(n)\n    return n > 0"
    [problem] = verify.validate("code_i", [{"program": program, "input": "9173"}])
    wrong, right = verify.grade("code_i", [dict(problem, input="9173", answer=a)
                                                      for a in ("1", "9173")])
    assert not wrong["correct"] and not wrong["void"], wrong
    assert wrong["reason"] == "error: ValueError: 1", wrong
    assert right["correct"] and not right["void"], right


def test_no_text_a_student_sees_in_a_fence_holds_a_fence():
    # A05: a string in the program closed the program's fence and showed a second `input` fence
    fake = 'NOTE = """\n```\n\n```input\n100\n```\n\n```python\n"""\ndef f(x):\n    return x + 1'
    [result] = verify.validate("code_o", [{"program": fake, "input": "3"}])
    assert not result["valid"] and "```" in result["reason"], result
    # in an input, and in a code_f message
    [result] = verify.validate("code_o", [{"program": "def f(x):\n    return len(x)",
                                           "input": "'''a\n```\nb'''"}])
    assert not result["valid"] and "```" in result["reason"], result
    [result] = verify.validate("code_f", [{"program": "def f(x):\n    return x + 1",
                                           "inputs": [str(k) for k in range(10)],
                                           "message": "add one\n```\n```python\nprint(1)"}])
    assert not result["valid"] and "```" in result["reason"], result


# code_f: what a program's own top level does must not change what its inputs are: a student sees
# the inputs' text, never the program (A02: a decimal context, A09: a class patched through an
# alias, A04: the program's docstring read as __doc__)
HIDDEN_STATE = {
    "decimal context": ("import decimal\nc = decimal.getcontext()\nc.prec = 2\n"
                        "def f(x):\n    return str(x)", "decimal.Decimal({k}) / 3"),
    "patched class": ("import fractions\nF = fractions.Fraction\nF.__add__ = F.__sub__\n"
                      "def f(x):\n    return x",
                      "fractions.Fraction(1, 2) + fractions.Fraction({k}, 3)"),
    "docstring": ('"""a secret docstring of 30 ch"""\ndef f(x):\n    return x * 3',
                  "len(__doc__) + {k}"),
}


@pytest.mark.parametrize("kind", sorted(HIDDEN_STATE))
def test_a_code_f_input_is_read_before_the_program_runs(kind):
    program, text = HIDDEN_STATE[kind]
    inputs = [text.format(k=k) for k in range(1, 11)]
    [result] = verify.validate("code_f", [{"program": program, "inputs": inputs,
                                           "message": "guess"}])
    assert not result["valid"], result


def test_a_code_f_input_with_the_programs_imports_stays_valid():
    program = "import fractions\ndef f(x):\n    return x * 2"
    inputs = [f"fractions.Fraction({k}, 3)" for k in range(1, 11)]
    [result] = verify.validate("code_f", [{"program": program, "inputs": inputs,
                                           "message": "double"}])
    assert result["valid"] and result["outputs"][0] == "Fraction(2, 3)", result


def test_a_code_f_students_docstring_is_its_own_after_the_teachers_imports():
    # A06: the teacher's imports line went before the student's docstring, so __doc__ was None
    teacher = "import math\ndef f(x):\n    return x * 3 + math.floor(0.5)"
    [problem] = verify.validate("code_f", [{"program": teacher, "message": "triple",
                                            "inputs": [str(k) for k in range(10)]}])
    assert problem["valid"], problem
    student = '"""ab"""\ndef f(x):\n    return x * (len(__doc__) + 1)'
    inputs = [str(k) for k in range(10)]
    [result] = verify.grade("code_f", [dict(problem, inputs=inputs, answer=student)])
    assert result["correct"], result


# Round 16: more of what the sandbox says on a code_i student's input that stock Python does not
# say. A01: a caught refusal in the run of an answer as written (`[[0]] * 2`: one list twice);
# A04: an int subclass, equal to the gold in Python, which the encoding cannot carry.
def test_a_refusal_in_an_answer_run_as_written_is_void():
    program = ("import copy\nclass Box: pass\ndef f(rows):\n    rows[0].append(1)\n"
               "    if len(rows[1]) == 2:\n        try: copy.deepcopy(Box())\n"
               "        except Exception: pass\n    return len(rows)")
    [problem] = verify.validate("code_i", [{"program": program, "input": "[[0], [0]]"}])
    assert problem["valid"], problem
    [result] = verify.grade("code_i", [dict(problem, input="[[0], [0]]", answer="[[0]] * 2")])
    assert result["void"] and result["reason"].startswith("void: the sandbox"), result


def test_a_value_the_encoding_cannot_carry_on_a_students_input_is_void():
    program = "class Num(int):\n    pass\ndef f(x):\n    r = x % 10\n    if x < 10:\n" \
              "        return r\n    return Num(r)"
    [problem] = verify.validate("code_i", [{"program": program, "input": "7"}])
    assert problem["valid"], problem
    results = verify.grade("code_i", [dict(problem, input="7", answer=a) for a in ("17", "27")])
    for result in results:
        assert result["void"] and "not a plain value" in result["reason"], results


def test_a_program_whose_answer_on_a_students_input_depends_on_the_world_is_void():
    # A05: f is deterministic on its teacher's input and reads a set's hash order on any other
    program = ("def f(word):\n    n = len(word)\n    if word == 'zqx':\n        return n\n"
               "    order = sorted(set('abcdefghijklmnop'), key=lambda w: 0)\n"
               "    return n + order.index('a')")
    [problem] = verify.validate("code_i", [{"program": program, "input": "'zqx'"}])
    assert problem["valid"], problem
    answers = [repr(a + b + c) for a in "abcd" for b in "efgh" for c in "ijkl"]
    results = verify.grade("code_i", [dict(problem, input="'zqx'", answer=a) for a in answers])
    # 64 answers, each seen in two worlds: void where their hash seeds order 16 letters so that
    # 'a' is elsewhere (most pairs of zygotes; a pair that agrees grades by its order: the limit)
    void = [r for r in results if r["void"]]
    assert len(void) >= 16, [r["reason"] for r in results]
    assert void[0]["reason"] == "void: the program answers it differently in two worlds", void[0]


# Round 17: A01, values the encoding cannot carry in its budget that equal a small gold in Python;
# A02, a small value whose keys share one hash, which this process's decoding refuses
TOO_BIG = {
    "Decimal zeros": ("from decimal import Decimal\ndef f(x):\n    if x == 7:\n"
                      "        return Decimal('1')\n    return Decimal('1.' + '0' * 5000)",
                      "7", "14"),
    "Counter zeros": ("from collections import Counter\ndef f(x):\n    c = Counter()\n"
                      "    if x != 7:\n        for k in range(3000):\n            c[k] += 0\n"
                      "    return c", "7", "14"),
    "one hash": ("from collections import Counter\ndef f(xs):\n    c = Counter(xs)\n"
                 "    if len(xs) != 1:\n        for k in range(9):\n"
                 "            c[k * 2305843009213693951 + 5] += 0\n    return c", "[1]", "[1, 1]"),
}


@pytest.mark.parametrize("kind", sorted(TOO_BIG))
def test_a_value_equal_to_the_gold_that_the_sandbox_cannot_carry_is_void(kind):
    program, given, other = TOO_BIG[kind]
    [problem] = verify.validate("code_i", [{"program": program, "input": given}])
    assert problem["valid"], problem
    other_result, own = verify.grade("code_i", [dict(problem, input=given, answer=a)
                                                for a in (other, given)])
    assert other_result["void"] and not other_result["correct"], other_result
    assert own["correct"] and not own["void"], own


def test_a_students_wrong_answer_voids_no_other_attempt():
    # A05: a wrong literal whose set order depends on the hash seed made the two families disagree
    [problem] = verify.validate("code_i", [{"program": "def f(xs):\n    s = set(xs)\n"
                                                       "    return s.pop()", "input": "[3, 1, 2]"}])
    assert problem["valid"] and problem["output"] == "1", problem
    strings = repr(list("qrstuvwx"))
    results = verify.grade("code_i", [dict(problem, input="[3, 1, 2]", answer=a)
                                      for a in ("[1, 5]", strings, "[1, 5]")])
    assert results[0]["correct"] and results[2]["correct"], results
    assert not results[1]["correct"], results


# Round 18: A05, an answer that runs f searches for the input instead of finding it (and A01, an
# answer's expression met a refusal in the teacher's code through a class's method: no answer
# reaches the teacher's code now); A06, random numbers through statistics, seeded alike in every
# child of a zygote
def test_a_code_i_answer_may_read_only_builtins_and_imported_modules():
    # round 19, A01: a denylist of the program's functions let a search through a class's method,
    # a staticmethod or an alias through: an allowlist now, as for code_f inputs
    program = ("import math\ndef g(x):\n    return f(x)\nh = lambda x: f(x)\nk = g\n"
               "class S:\n    def go(self, x):\n        return f(x)\n"
               "    @staticmethod\n    def run(x):\n        return f(x)\n"
               "def f(x):\n    return x * x")
    [problem] = verify.validate("code_i", [{"program": program, "input": "19"}])
    assert problem["valid"] and problem["output"] == "361", problem
    searches = ["next(x for x in range(10 ** 5) if f(x) == 361)", "[f][0](19) - 342",
                "next(x for x in range(99) if g(x) == 361)", "h(19) - 342", "k(19) - 342",
                "next(x for x in range(99) if S().go(x) == 361)", "S.run(19) - 342"]
    results = verify.grade("code_i", [dict(problem, input="19", answer=a) for a in
                                      searches + ["19", "math.isqrt(361)", "(lambda f: f)(19)"]])
    for result in results[:len(searches)]:
        assert not result["correct"] and "the program's own" in result["reason"], results
    # a lambda's own parameter named f is not the program's f (round 35, A03: it was refused)
    assert all(result["correct"] for result in results[-3:]), results
    # and a code_i proposal whose own input runs f, which no answer could repeat (code_o: valid)
    proposal = {"program": program, "input": "f(3) + 10"}
    [code_i] = verify.validate("code_i", [proposal])
    assert not code_i["valid"] and "the program's own f" in code_i["reason"], code_i
    assert verify.validate("code_o", [proposal])[0]["valid"]


def test_random_numbers_through_statistics_are_refused():
    program = ("import statistics\ndef f(x):\n    if x == 8:\n"
               "        return int(statistics.NormalDist(0, 1).samples(1)[0] >= 0.5)\n"
               "    return 1")
    [problem] = verify.validate("code_i", [{"program": program, "input": "1"}])
    assert problem["valid"], problem
    coin, right = verify.grade("code_i", [dict(problem, input="1", answer=a) for a in ("8", "1")])
    assert coin["void"] and "random numbers" in coin["reason"], coin
    assert right["correct"], right
    # on the teacher's own input: not valid
    [result] = verify.validate("code_i", [{"program": program, "input": "8"}])
    assert not result["valid"] and "random numbers" in result["reason"], result


def test_the_processs_count_of_class_registrations_is_refused():
    # round 19, A02: abc.get_cache_token() was 30 in every zygote, 23-25 in stock python3
    # round 25, A01/A03/A04: and under functools' name for it (`from abc import`), in a program
    # and in a code_o input: 30, where stock counts 23-25
    proposals = [{"program": f"import {m}\ndef f(x):\n    return x + {m}.get_cache_token()",
                  "input": "0"} for m in ("abc", "functools")]
    proposals.append({"program": "import functools\ndef f(x):\n    return x * 2",
                      "input": "functools.get_cache_token()"})
    for result in verify.validate("code_o", proposals):
        assert not result["valid"] and "get_cache_token" in result["reason"], result


# round 21, A01/A02: how many objects a program makes before the collector frees a cycle of its
# own (a paused generator's finally runs then) was 628 in every child, 481 and 655 under two stock
# builds of 3.11: a gold no student derives, and a tell of the sandbox (24 of 24 right code_i
# answers wrong). The collector's phase is random per child now, so such a count is no gold.
COUNT = ("def f(x):\n    log = []\n    def g():\n        try:\n            yield 1\n        finally:\n"
         "            log.append(1)\n    it = g()\n    next(it)\n    box = [it, None]\n"
         "    box[1] = box\n    del it, box\n    n = 0\n    junk = []\n"
         "    while not log and n < 5000:\n        junk.append([])\n        n += 1\n    return n + x")


def test_the_collectors_phase_is_no_gold():
    results = verify.validate("code_o", [{"program": COUNT, "input": "0"}] * 4)
    # two runs of one problem agree by chance 1 time in 700
    assert sum(r["valid"] for r in results) <= 1, results
    assert all(r["valid"] or "non-deterministic" in r["reason"] for r in results), results


def test_a_printed_lone_surrogate_is_refused():
    # round 21, A04: the capped stdout printed '\ud800' (backslashreplace), where stock Python's
    # raises UnicodeEncodeError: 48 of 48 right code_i answers wrong through an f that raised
    # when the print worked. Stock stdouts raise or write a byte, by locale: a refusal here.
    program = ("def f(x):\n    try:\n        print('\\ud800')\n        here = 1\n"
               "    except UnicodeEncodeError:\n        here = 0\n    return x + here")
    [result] = verify.validate("code_o", [{"program": program, "input": "0"}])
    assert not result["valid"] and "lone surrogate" in result["reason"], result
    # what prints is still printed
    printer = "def f(x):\n    print('caf\\u00e9', x)\n    return x"
    [result] = verify.validate("code_o", [{"program": printer, "input": "3"}])
    assert result["valid"] and result["output"] == "3", result


def test_the_collectors_older_generations_are_no_gold():
    # round 22, A01/A04: a cycle kept through 30 x 700 objects (so in the oldest generation), how
    # many more until a full collection frees it was the same in every child (n // 7000 == 11;
    # 9 or 10 in stock python3, whose site.py start-up ran 2 more collections of the middle
    # generation): 72 of 72 right code_i answers wrong. The older generations' phase is random
    # per child too now.
    program = ("def f(x):\n    log = []\n    def g():\n        try:\n            yield 1\n"
               "        finally:\n            log.append(1)\n    it = g()\n    next(it)\n"
               "    box = [it, None]\n    box[1] = box\n    del it\n    for _ in range(21000):\n"
               "        a = [None]\n        a[0] = a\n    del box\n    n = 0\n"
               "    while not log and n < 200000:\n        a = [None]\n        a[0] = a\n"
               "        n += 1\n    return n // 7000 + x")
    results = verify.validate("code_o", [{"program": program, "input": "0"}] * 6)
    outputs = {r["output"] for r in results}
    assert not all(r["valid"] for r in results) or len(outputs) > 1, results


def test_a_code_i_answer_this_process_cannot_read_is_void():
    # round 24, A08: a right answer of 9 ints that share a hash (k * (2**61 - 1)), past decode's
    # limit on keys of one hash, was graded wrong ("malformed encoding" in the child, "not an
    # argument list" for one evaluated first), where stock Python calls f on it: void now, as a
    # value this process cannot read is (the student's own attempt only); plain answers as before
    [problem] = verify.validate("code_i", [{"program": "def f(s):\n    return len(s)",
                                            "input": "{1, 2, 3, 4, 5, 6, 7, 8, 9}"}])
    assert problem["valid"], problem
    m = (1 << 61) - 1
    answers = ["{" + ", ".join(str(k * m) for k in range(9)) + "}",
               f"set(range(0, 9 * {m}, {m}))", "{9, 8, 7, 6, 5, 4, 3, 2, 1}", "{1, 2}",
               "{" + ", ".join(str(k * m) for k in range(8)) + "}"]
    results = verify.grade("code_i", [dict(problem, input="{1, 2, 3, 4, 5, 6, 7, 8, 9}",
                                           answer=a) for a in answers])
    assert [(r["correct"], r["void"]) for r in results] == [
        (False, True), (False, True), (True, False), (False, False), (False, False)], results


def _graded(program, teacher_input, answers):
    [problem] = verify.validate("code_i", [{"program": program, "input": teacher_input}])
    assert problem["valid"], problem
    return verify.grade("code_i", [dict(problem, input=teacher_input, answer=a) for a in answers])


def test_a_right_code_i_answer_past_the_argument_budget_is_void():
    # round 26, A04: right answers (len % 7 == 3) larger than the arguments' budget were graded
    # wrong ("input too large"), where stock Python calls f on them: void, as a literal and as an
    # expression; small answers as before
    answers = ["list(range(70003))", "'a' * 300002", "[" + "0, " * 20002 + "]", "'xyz'", "'ab'"]
    results = _graded("def f(s):\n    return len(s) % 7", "'abc'", answers)
    assert [(r["correct"], r["void"]) for r in results] == [
        (False, True), (False, True), (False, True), (True, False), (False, False)], results


def test_a_right_code_i_answer_built_from_a_set_is_never_wrong():
    # round 26, A05: an input whose value depends on the hash seed (a set's order) while f's does
    # not was graded wrong when the two families disagreed on it ("non-deterministic"): void now
    answers = ["list(set('abcde'))", "[*{'e', 'd', 'c', 'b', 'a'}]"] * 3
    results = _graded("def f(xs):\n    return sorted(xs)", "['b', 'a', 'c', 'd', 'e']", answers)
    assert all(r["correct"] or r["void"] for r in results), results


def test_a_code_i_answer_right_only_as_written_is_void_not_wrong():
    # round 26, A09: `[[]] * 2` gives the gold as stock Python passes it (one list under two
    # names) and not as plain data: it was graded wrong; void now. As before: right both ways is
    # correct, and an answer wrong as written is wrong
    results = _graded("def f(x):\n    x[0].append(1)\n    return len(x[1])", "[[], [0]]",
                      ["[[]] * 2", "[[], [0]]", "[[], []]", "[[0]] * 2"])
    assert [(r["correct"], r["void"]) for r in results] == [
        (False, True), (True, False), (False, False), (False, False)], results


def test_a_line_break_python_and_a_reader_split_differently_is_invalid():
    # round 26, A10: a lone \r is a line break to Python, shown inside its line in a prompt:
    # `k = 1  # k is 1\r    k = -3` ran the second assignment behind what reads as a comment
    hidden = [{"program": "def f(x):\n    k = 1  # k is 1\r    k = -3\n    return k * x",
               "input": "5"},
              {"program": "def f(x, y=0):\n    return x + y", "input": "5 #\r, 7"},
              {"program": "def f(x):\n    # note\u2028    return x\n    return -x", "input": "5"},
              {"program": "def f(x):\n    return x\x0c", "input": "5"}]
    for result in verify.validate("code_o", hidden):
        assert not result["valid"] and "line break" in result["reason"], result
    [fine] = verify.validate("code_o", [{"program": "def f(x):\r\n    return x * 2\r\n",
                                         "input": "5"}])
    assert fine["valid"] and fine["output"] == "10", fine


def test_a_code_i_answer_f_fails_on_as_plain_data_but_not_as_written_is_void():
    # round 27, A10: `[[0] * 3] * 3` (one row under three names) gives the gold as stock Python
    # passes it, and f raised on its plain data (three rows): graded wrong, void now
    results = _graded("def f(g):\n    g[0][0] = 1\n    return [row.index(1) for row in g]",
                      "[[1, 0, 0], [1, 0], [1]]",
                      ["[[0] * 3] * 3", "[[0, 0, 0]] * 3", "[[1], [1]]", "[[0], [0]]"])
    assert [(r["correct"], r["void"]) for r in results] == [
        (False, True), (False, True), (False, False), (False, False)], results


def test_a_right_code_i_answer_past_the_depth_or_int_limits_is_void():
    # round 27, A07/A08: a right answer 101 levels deep as a text, or one int literal past the
    # encoding's bits, was graded wrong; void now, as past the budget (round 26, A04)
    big = 1 << 20000
    big += (3 - big) % 7
    results = _graded("def f(x):\n    return x % 7", "3",
                      ["+".join(["1"] * 101), hex(big), "10", "4"])
    assert [(r["correct"], r["void"]) for r in results] == [
        (False, True), (False, True), (True, False), (False, False)], results


def test_a_repeated_keyword_is_python_s_syntax_error():
    # round 27, A05: `x=1, x=3` was read as x=3 (a code_i answer graded correct, an input valid)
    # where stock Python raises SyntaxError: keyword argument repeated
    [result] = verify.validate("code_o", [{"program": "def f(x):\n    return x * 2",
                                           "input": "x=1, x=3"}])
    assert not result["valid"] and "repeats a keyword" in result["reason"], result
    results = _graded("def f(x):\n    return x * 2", "x=3", ["x=1, x=3", "x=3"])
    assert [(r["correct"], r["void"]) for r in results] == [(False, False), (True, False)], results


def test_the_parents_optimisation_level_is_not_the_programs(tmp_path):
    # round 27, A12: code compiled in a parent run with -O had its asserts stripped: the gold of
    # `assert x > 5` on 1 was 'big' where stock says 'small'. Children compile the text themselves
    program = ("def f(x):\n    try:\n        assert x > 5\n        return 'big'\n"
               "    except AssertionError:\n        return 'small'")
    script = ("import json, sys, verify\n"
              "print(json.dumps(verify.validate('code_o', [json.loads(sys.argv[1])])[0]))")
    out = subprocess.run([sys.executable, "-O", "-c", script,
                          json.dumps({"program": program, "input": "1"})],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["valid"] and result["output"] == "'small'", (result, out.stderr[-2000:])
