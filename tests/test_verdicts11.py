"""Red team round 31: a str's surrogates across the wall's JSON, and a code_f problem's inputs as
written, each a world of its own. Each test failed on the code before the fix (the commit that
added them says how)."""
import pytest

import encoding
import sandbox
import verify


def _validated(task, proposal):
    [result] = verify.validate(task, [proposal])
    assert result["valid"], result
    return dict(proposal, **{k: v for k, v in result.items() if k not in ("valid", "reason")})


def _round_trip(value):
    """A value through the wall: encoded as a child sends it, JSON-read as the parent reads it."""
    parts = []
    encoding.encode(value, parts, [encoding.MAX_UNITS])
    return encoding.decode(__import__("json").loads("".join(parts)))


# A14: JSON's escapes write the two code points '\ud83d\ude00' and the one '\U0001f600' alike,
# and json.loads reads both as the one: a shown output of 1 where python3 prints 2, a right code_i
# answer graded wrong, a dict's two keys read as one
@pytest.mark.parametrize("value", ["\ud83d\ude00", "a\ud83d", "\ude00\ud83d!", "\U0001f600",
                                   {"\ud83d\ude00": 1, "\U0001f600": 2},
                                   frozenset({"\ud83d\ude00", "\U0001f600"})])
def test_a_str_crosses_the_wall_as_the_same_code_points(value):
    back = _round_trip(value)
    assert back == value and type(back) is type(value)
    if isinstance(value, str):
        assert [ord(c) for c in back] == [ord(c) for c in value]


def test_a_surrogate_pair_written_as_two_escapes_is_two_characters():
    problem = _validated("code_o", {"program": "def f(s):\n    return len(s)",
                                    "input": "'\\ud83d\\ude00'"})
    assert problem["output"] == "2", problem
    right, wrong = verify.grade("code_o", [dict(problem, answer="2"), dict(problem, answer="1")])
    assert (right["correct"], wrong["correct"]) == (True, False), (right, wrong)
    problem = _validated("code_i", {"program": "def f(s):\n    return len(s)", "input": "'ab'"})
    graded = verify.grade("code_i", [dict(problem, answer="'\\ud83d\\ude00'"),
                                     dict(problem, answer="'\\U0001F600'")])
    assert [g["correct"] for g in graded] == [True, False], graded


def test_an_output_of_two_surrogates_is_shown_and_graded_as_two():
    problem = _validated("code_o", {"program": "def f(x):\n    return chr(0xd83d) + chr(0xde00)",
                                    "input": "0"})
    assert problem["output"] == "'\\ud83d\\ude00'", problem
    graded = verify.grade("code_o", [dict(problem, answer="'\\ud83d\\ude00'"),
                                     dict(problem, answer="'\\U0001F600'")])
    assert [g["correct"] for g in graded] == [True, False], graded


def _code_f(teacher, inputs):
    return _validated("code_f", {"program": teacher, "inputs": inputs, "message": "guess"})


def _stock(program, call):
    """What python3 prints for `print(repr(<call>))` after `program`, in a fresh process."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", f"{program}\nprint(repr({call}))"],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip() if out.returncode == 0 else out.stderr


# A05/A06/A08: the inputs as written were evaluated in one child, in order, and f called on each:
# an object an input binds (`abs := [...]`) or reads (`keyword.kwlist`) was the next inputs' own,
# and a decimal context an input set held for the inputs after it. A student whose right program
# changes its argument, or computes in Decimal, was graded wrong (every gold equal to stock's)
SHARED = {
    "a list bound by :=": (
        "def f(nums):\n    return sum(nums[:-1])\n",
        [f"[{k}, {k + 1}, {k + 2}]" for k in range(5)] + ["(abs := [5, 6, 7, 8])"]
        + ["abs if isinstance(abs, list) else [5, 6, 7, 8]"] * 4,
        "def f(nums):\n    nums.pop()\n    return sum(nums)\n"),
    "a module's list": (
        "import keyword\ndef f(words):\n    return len(words) - 1\n",
        [repr(["a"] * k) for k in range(1, 6)] + ["keyword.kwlist"] * 5,
        "def f(words):\n    words.pop()\n    return len(words)\n"),
    "a decimal context": (
        "import decimal\ndef f(a, b):\n    return a * 1000000 // b\n",
        ["decimal.setcontext(decimal.Context(prec=3)) or 1, 3", "2, 7", "5, 9", "1, 11",
         "4, 13", "22, 7", "355, 113", "10, 3", "7, 6", "9, 8"],
        "import decimal\ndef f(a, b):\n    return int(decimal.Decimal(a) * 1000000 / "
        "decimal.Decimal(b))\n"),
}


@pytest.mark.parametrize("kind", sorted(SHARED))
def test_each_code_f_input_as_written_is_a_world_of_its_own(kind):
    teacher, inputs, student = SHARED[kind]
    problem = _code_f(teacher, inputs)
    # the student's program as it runs: the teacher's imports before it
    imports = "".join(line + "\n" for line in teacher.splitlines() if line.startswith("import"))
    for text, shown in list(zip(inputs, problem["outputs"]))[5:]:
        assert shown == _stock(imports + student, f"f({text})") == _stock(teacher, f"f({text})")
    graded = verify.grade("code_f", [dict(problem, answer=student)] * 2)
    assert all(g["correct"] for g in graded), graded


# A01/A04: the inputs' plain data is made in one child, in order, so `abs := int` in one input made
# `abs(-1.5)` -1 in the next, and an input's Inexact flag showed in the next: golds stock never
# gives. Such a problem is invalid now (its inputs as written, each in a child of its own, disagree)
LEAKY = {
    "a builtin rebound": ("def f(x):\n    return x\n",
                          ["(abs := int) and -3.5"] + [f"abs(-{k}.5)" for k in range(1, 10)]),
    "a decimal flag": ("import decimal\ndef f(b, k):\n    return [b, k]\n",
                       ["decimal.Decimal(1) / 3, 0"]
                       + [f"decimal.getcontext().flags[decimal.Inexact], {k}"
                          for k in range(1, 10)]),
}


@pytest.mark.parametrize("kind", sorted(LEAKY))
def test_an_input_that_changes_the_next_ones_world_gives_no_gold_stock_does_not(kind):
    teacher, inputs = LEAKY[kind]
    [result] = verify.validate("code_f", [{"program": teacher, "inputs": inputs,
                                           "message": "guess"}])
    if result["valid"]:
        assert result["outputs"] == [_stock(teacher, f"f({x})") for x in inputs], result
    else:
        assert "as Python would pass it" in result["reason"], result


# A12: an input's `:=` held 760 MB through every later call of f in the one child: a right program
# that needs a few hundred MB ran out of memory and was graded wrong. In a child of its own the
# input holds its memory through its own call alone, and a program the sandbox's limits stop there
# (stock Python has none) is void, never wrong. (Scaled down: children of 256 MiB, the input holds
# 130 MiB and the program needs 130 MiB more, together past the limit; either alone is not)
def test_memory_an_input_holds_as_written_never_grades_a_right_program_wrong(monkeypatch):
    monkeypatch.setattr(sandbox, "MEMORY_MB", 256)
    teacher = "def f(n):\n    return n * 3\n"
    inputs = [str(k) for k in range(5)] + ["(abs := [0] * 17000000) and 5"] + \
        [str(k) for k in range(6, 10)]
    problem = _code_f(teacher, inputs)
    students = ["def f(n):\n    return len([n] * 17000000) // 17000000 * n * 3\n",
                "def f(n):\n    return n * 3\n", "def f(n):\n    return n * 4\n"]
    hungry, plain, wrong = verify.grade("code_f", [dict(problem, answer=s) for s in students])
    assert hungry["correct"] or hungry["void"], hungry
    assert plain["correct"] and not wrong["correct"] and not wrong["void"], (plain, wrong)


# A03: a code_o answer is read inside `(\n...\n)`, where line breaks, a walrus or a trailing
# backslash make values of what eval refuses (a SyntaxError in stock Python and in AZR's check)
@pytest.mark.parametrize("answer", ["1\n+ 1", "x := 2", "2\\", "4 if\n0 else 2", "(1\n)\n+ 1"])
def test_a_code_o_answer_eval_cannot_read_is_no_answer(answer):
    problem = _validated("code_o", {"program": "def f(x):\n    return x * 2", "input": "1"})
    with pytest.raises(SyntaxError):
        eval(answer)
    [graded] = verify.grade("code_o", [dict(problem, answer=answer)])
    assert not graded["correct"] and "invalid answer" in graded["reason"], graded


@pytest.mark.parametrize("answer", ["2", " 2 ", "2  # two", "[\n2][0]", "(\n 2\n)"])
def test_a_code_o_answer_eval_reads_is_read_as_eval_reads_it(answer):
    problem = _validated("code_o", {"program": "def f(x):\n    return x * 2", "input": "1"})
    assert eval(answer) == 2
    [graded] = verify.grade("code_o", [dict(problem, answer=answer)])
    assert graded["correct"], graded


# Round 32, A07/A10: a set inside a dict (`{0: {3, 11}}`) was not seen as a set (the walk took a
# key-value pair for a tagged node), so the input ran on plain data alone, the set rebuilt in its
# iteration order: python3 iterates {3, 11} as [11, 3], the sandbox showed [3, 11]
SET_IN_A_DICT = ["{0: {3, 11}}", "{0: [{3, 11}]}", "{0: {1: {3, 11}}}", "{(1, 2): {3, 11}}"]


@pytest.mark.parametrize("text", SET_IN_A_DICT)
def test_a_set_anywhere_in_an_input_is_run_as_written(text):
    program = "def f(d):\n    while not isinstance(d, set):\n" \
              "        d = next(iter(d.values())) if isinstance(d, dict) else d[0]\n" \
              "    return list(d)\n"
    [result] = verify.validate("code_o", [{"program": program, "input": text}])
    if result["valid"]:
        assert result["output"] == _stock(program, f"f({text})"), result
    else:
        assert "as Python would pass it" in result["reason"], result
    assert verify._holds_a_set(__import__("screen").arguments(text)[0])


# Round 32, A04/A13: an input as written was evaluated before the student's program's top level ran;
# python3 runs the program first, then evaluates the call's arguments (an input's decimal context
# over the one the program set; an input's traps met by the program's top level)
def test_a_code_f_input_as_written_is_evaluated_after_the_programs_top_level():
    teacher = "import decimal\ndef f(n):\n    return n * 2\n"
    inputs = [f"(decimal.setcontext(decimal.Context(prec=3)), {12345 + 7 * i})[1]"
              for i in range(10)]
    problem = _code_f(teacher, inputs)
    wrong = ("import decimal\ndecimal.setcontext(decimal.Context(prec=50))\n"
             "def f(n):\n    return int(decimal.Decimal(n) * 2)\n")
    assert _stock(wrong, f"f({inputs[7]})") != problem["outputs"][7]
    trapped = ("import decimal\ndef f(n):\n    return n * 2\n", [
        f"(decimal.setcontext(decimal.Context(traps=[decimal.Inexact])), {i + 1})[1]"
        for i in range(10)])
    third = "import decimal\nTHIRD = decimal.Decimal(1) / 3\ndef f(n):\n    return n * 2\n"
    problem2 = _code_f(*trapped)
    assert _stock(third, f"f({trapped[1][7]})") == problem2["outputs"][7]
    graded = verify.grade("code_f", [dict(problem, answer=wrong), dict(problem2, answer=third)])
    assert [(g["correct"], g["void"]) for g in graded] == [(False, False), (True, False)], graded


# Round 32, A03: a str holding a surrogate cost the decoder more units than the encoder (its hex
# text counted four times over): a right code_i answer within the argument budget was void
def test_a_str_with_a_surrogate_costs_the_same_both_ways():
    value = "\U0001f600" * 3999 + "\ud800"
    parts = []
    encoding.encode(value, parts, [encoding.MAX_UNITS])
    assert _round_trip(value) == value
    problem = _validated("code_i", {"program": "def f(s):\n    return len(s) % 7", "input": "'ab'"})
    answer = "'\\U0001f600' * 39999 + '\\ud800'"
    [graded] = verify.grade("code_i", [dict(problem, answer=answer)])
    # f gives 40,000 % 7 == 2, as on 'ab'
    assert graded["correct"], graded


# Round 33, J1/J2: a code_f student's program that the sandbox stopped on the stored inputs (its
# time limit, its child's memory limit) was graded wrong ("error: timeout"), where stock Python may
# have gone on to the golds; a stop on the inputs as written was already void, as a code_i one is
@pytest.mark.parametrize("answer", [
    "def f(x):\n    n = 0\n    for i in range(6_000_000):\n        n += 1\n    return x * 2",
    "def f(x):\n    b = bytearray(1500 * 1024 * 1024)\n    return x + x + len(b) * 0"])
def test_a_code_f_program_the_sandbox_stops_is_void_not_wrong(answer):
    problem = _code_f("def f(x):\n    return x * 2", [str(i) for i in range(10)])
    wrong = "def f(x):\n    return x * 3"
    raises = "def f(x):\n    return [][x]"
    graded = verify.grade("code_f", [dict(problem, answer=a) for a in (answer, wrong, raises)],
                          timeout=1.0)
    assert [(g["correct"], g["void"]) for g in graded] == [
        (False, True), (False, False), (False, False)], graded
    assert graded[0]["reason"].startswith("void: the sandbox stopped"), graded


# Round 34, F1: a code_o answer that is an expression the sandbox stopped (its time limit, its
# child's memory, a value the encoding cannot carry) was graded wrong, where python3 gives a value
# equal to the gold; code_i and code_f void such an attempt
@pytest.mark.parametrize("program, given, answer", [
    ("def f(x):\n    return x * 100000000", "2", "len([0] * 200000000)"),
    ("def f(x):\n    return x * (x - 1) // 2", "10000000000", "sum(range(10000000000))"),
    ("import collections\ndef f(x):\n    return (x, 2)", "1",
     "collections.namedtuple('P', 'a b')(1, 2)")])
def test_a_code_o_answer_the_sandbox_stops_is_void_not_wrong(program, given, answer):
    problem = _validated("code_o", {"program": program, "input": given})
    graded = verify.grade("code_o", [dict(problem, answer=a) for a in (answer, "1 // 0", "7")],
                          timeout=1.0)
    assert [(g["correct"], g["void"]) for g in graded] == [
        (False, True), (False, False), (False, False)], graded
