"""Red team round 29: what a program's text means to stock python3 (a coding declaration, an
identifier Python normalises), a code_f student's program on its inputs as written, a code_o
answer that closes its own bracket, and a corrupt stored record. Each test failed on the code
before the fix (the commit that added them says how)."""
import os
import random
import subprocess
import sys

import pytest

import verify


def stock(program, calls, tmp_path):
    """The reprs python3 prints for `calls` (expression texts) after `program`, run as a script
    from a UTF-8 file, as a user runs it."""
    lines = [program, ""] + [f"print(repr({call}))" for call in calls]
    path = tmp_path / "prog.py"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    return out.stdout.splitlines() if out.returncode == 0 else out.stderr

def _code_f(teacher, inputs):
    proposal = {"program": teacher, "inputs": inputs, "message": "guess"}
    [result] = verify.validate("code_f", [proposal])
    assert result["valid"], result
    return dict(proposal, **result)


# A01/A05: a coding declaration makes python3 read the file's bytes in that codec ('é' is two
# latin-1 chars), where a str compiled by the sandbox ignores it: 36 of 36 right code_i answers
# graded wrong, code_o's shown output not stock's. Only utf-8 (what the file is) is a program.
COOKIES = {
    "emacs": "# -*- coding: latin-1 -*-\n",
    "after a shebang": "#!/usr/bin/env python3\n# coding: latin-1\n",
    "vim": "# vim: set fileencoding=cp1252 :\n",
    "unknown codec": "# coding: no-such-codec\n",
    "utf-16": "# coding=utf-16\n",
}


@pytest.mark.parametrize("kind", sorted(COOKIES))
def test_a_coding_declaration_other_than_utf8_is_no_program(kind, tmp_path):
    program = COOKIES[kind] + "def f(x):\n    return len('é') + x\n"
    [result] = verify.validate("code_o", [{"program": program, "input": "10"}])
    assert not result["valid"] and "coding declaration" in result["reason"], result
    # a code_f student's program likewise: graded invalid, never on another reading of its text
    problem = _code_f("def f(x):\n    return x + 1", [str(k) for k in range(10)])
    [graded] = verify.grade("code_f", [dict(problem, answer=program.replace("len('é')", "1"))])
    assert not graded["correct"] and "coding declaration" in graded["reason"], graded


def test_a_utf8_coding_declaration_is_a_program(tmp_path):
    program = "# -*- coding: utf-8 -*-\ndef f(x):\n    return len('é') + x\n"
    [result] = verify.validate("code_o", [{"program": program, "input": "10"}])
    assert result["valid"] and result["output"] == "11", result
    assert stock(program, ["f(10)"], tmp_path) == ["11"]


# A02: Python reads identifiers in NFKC, so `ﬁb` (a ligature) is the name fib; the rename to f
# compared raw tokens and left it: 8 of 8 right code_f programs NameError, a teacher's invalid
def test_the_entry_is_renamed_under_every_spelling_python_reads_as_its_name(tmp_path):
    teacher = "def f(n):\n    return n if n < 2 else f(n - 1) + f(n - 2)\n"
    problem = _code_f(teacher, [str(k) for k in range(3, 13)])
    student = "def fib(n):\n    return n if n < 2 else \ufb01b(n - 1) + \ufb01b(n - 2)\n"
    assert stock(student, [f"fib({k})" for k in range(8, 13)], tmp_path) == problem["outputs"][5:]
    [graded] = verify.grade("code_f", [dict(problem, answer=student)])
    assert graded["correct"], graded
    [result] = verify.validate("code_o", [{"program": "def \ufb01b(n):\n    return n + 1\n",
                                           "input": "3"}])
    assert result["valid"] and result["output"] == "4", result
    # `ｆ` (fullwidth) is f to Python: a name f used already
    [result] = verify.validate("code_o", [{"program": "def g(n):\n    return \uff46\n",
                                           "input": "3"}])
    assert not result["valid"] and "name f is already used" in result["reason"], result


# A03: a code_o answer was read inside `(\n{answer}\n)`, so `1), (2` (a SyntaxError to Python)
# read as (1, 2) and was graded correct, 8 of 8
@pytest.mark.parametrize("answer", ["1), (2", "0) or (1, 2", "()) + ((1,\n 2)"])
def test_a_code_o_answer_that_closes_a_bracket_it_did_not_open_is_no_answer(answer):
    proposal = {"program": "def f(x):\n    return (x, x + 1)\n", "input": "1"}
    [result] = verify.validate("code_o", [proposal])
    assert result["valid"] and result["output"] == "(1, 2)", result
    problem = dict(proposal, **result)
    wrong, right = verify.grade("code_o", [dict(problem, answer=a) for a in (answer, "(1,\n 2)")])
    assert not wrong["correct"] and "invalid answer" in wrong["reason"], wrong
    assert right["correct"], right


# A06-A08: a code_f student's program ran only on its inputs as plain data. What plain data cannot
# carry (one row under three names, a set's own order, an input's side effect) then graded right
# programs (by stock Python) wrong and wrong ones correct, 8 of 8 each. Now it also runs on the
# inputs as written, as the teacher's did in validation: correct only if both give the golds,
# void if only the run as written does (as a code_i answer: round 26, A09).
GRIDS = ["[[0] * 2] * 2", "[[1] * 3] * 3", "[[2] * 3] * 3", "[[3] * 4] * 4", "[[1] * 5] * 5",
         "[[4] * 2] * 2", "[[2] * 5] * 5", "[[5] * 3] * 3", "[[3] * 6] * 6", "[[6] * 4] * 4"]



def test_a_code_f_program_is_graded_on_its_inputs_as_python_passes_them(tmp_path):
    problem = _code_f("def f(g):\n    return len(g) + g[0][0] * len(g)\n", GRIDS)
    right = "def f(g):\n    g[0][0] += 1\n    return sum(row[0] for row in g)\n"
    wrong = ("def f(g):\n    for row in g:\n        row[0] += 1\n"
             "    return sum(row[0] for row in g)\n")
    hidden = [f"f({x})" for x in GRIDS[5:]]
    assert stock(right, hidden, tmp_path) == problem["outputs"][5:]
    assert stock(wrong, hidden, tmp_path) != problem["outputs"][5:]
    graded_right, graded_wrong = verify.grade("code_f", [dict(problem, answer=a)
                                                         for a in (right, wrong)])
    assert not graded_wrong["correct"] and not graded_wrong["void"], graded_wrong
    assert "as written" in graded_wrong["reason"], graded_wrong
    # right by stock, wrong on the plain data: not wrong, and not provably right
    assert graded_right["void"] and not graded_right["correct"], graded_right


def test_a_code_f_program_that_reads_a_sets_order_is_graded_on_pythons_order(tmp_path):
    # sets whose order as Python builds the literal starts at their minimum (the teacher's min)
    rng, inputs = random.Random(7), []
    while len(inputs) < 10:
        text = "{" + ", ".join(map(str, rng.sample(range(-40, 100), rng.randint(3, 6)))) + "}"
        s = eval(text)
        if next(iter(s)) == min(s) and min(s) not in [min(eval(x)) for x in inputs]:
            inputs.append(text)
    problem = _code_f("def f(s):\n    return min(s)\n", inputs)
    student = "def f(s):\n    return next(iter(s))\n"
    assert stock(student, [f"f({x})" for x in inputs[5:]], tmp_path) == problem["outputs"][5:]
    results = verify.grade("code_f", [dict(problem, answer=student)] * 4)
    assert not any(r["correct"] for r in results), results
    assert all(r["void"] or r["correct"] for r in results), results


def test_a_code_f_program_sees_its_inputs_side_effects_as_in_python(tmp_path):
    inputs = [f"decimal.setcontext(decimal.Context(prec=3)) or {a}, {b}"
              for a, b in [(123456, 1), (100001, 7), (99999, 3), (54321, 2), (77777, 11),
                           (100000, 7), (123456, 3), (98765, 4), (55555, 9), (31415, 2)]]
    problem = _code_f("import decimal\ndef f(a, b):\n    return a // b\n", inputs)
    student = ("import decimal\ndef f(a, b):\n"
               "    return int(decimal.Decimal(a) / decimal.Decimal(b))\n")
    calls = [f"f({x})" for x in inputs[5:]]
    assert stock(student, calls, tmp_path) != problem["outputs"][5:]
    [graded] = verify.grade("code_f", [dict(problem, answer=student)])
    assert not graded["correct"] and not graded["void"], graded


def test_a_code_f_program_right_both_ways_is_correct():
    problem = _code_f("def f(g):\n    return len(g) + g[0][0] * len(g)\n", GRIDS)
    student = "def f(g):\n    return len(g) * (1 + g[-1][0])\n"
    [graded] = verify.grade("code_f", [dict(problem, answer=student)])
    assert graded["correct"] and not graded["void"], graded


# A10: one attempt whose stored argument lists were corrupt (a damaged archive record, not model
# text) raised ValueError out of grade and lost the whole batch, 4 of 4
@pytest.mark.parametrize("task", ["code_i", "code_o"])
def test_a_corrupt_stored_record_fails_alone(task):
    base = {"program": "def f(x):\n    return x", "input": "3", "output": "3",
            "gold": ["int", "3"]}
    corrupt = [[["tuple", "bad"]], [["tuple", [["tuple", [["int", "zz"]]], ["dict", []]]]]]
    results = verify.grade(task, [dict(base, answer="3", args=args) for args in corrupt]
                           + [dict(base, answer="3")] * 2)
    for bad in results[:2]:
        assert not bad["correct"] and bad["reason"].startswith("bad request"), bad
    assert all(r["correct"] for r in results[2:]), results


def test_an_answer_past_a_stray_bracket_and_an_unindent_is_no_answer():
    # round 30, A03: the tokenizer raised at the unindent after `1)`, and the stray `)` was never
    # looked at: graded correct, 5 of 8
    proposal = {"program": "def f(x):\n    return (1, (2, 3, 4))\n", "input": "0"}
    [result] = verify.validate("code_o", [proposal])
    [graded] = verify.grade("code_o", [dict(proposal, **result, answer="1), (2,\n    3,\n  4")])
    assert not graded["correct"] and "bracket" in graded["reason"], graded


# Round 30, A04-A13: the inputs as written were evaluated in the student's globals, after its
# program ran and after f ran on the inputs before: a student's parameter `s` hid the teacher's
# `import string as s` (8 of 8 right programs wrong), an input read the student's docstring as
# `__doc__` (the teacher chose by student), and the decimal context f set changed later inputs.
# Now they are evaluated with the teacher's imports alone, in order, before any program runs.
AS_WRITTEN_WORLD = {
    "an import the student's parameter hides": (
        "import string as s\ndef f(t):\n    return len(t) * 3 + 1\n",
        ["s.digits[:{k}]"], "def f(s):\n    return len(s) * 3 + 1\n"),
    "a name the student binds locally": (
        "import copy\ndef f(a):\n    return sorted(a)\n", ["copy.copy([{k}, 3, 1])"],
        "def f(a):\n    copy = list(a)\n    copy.sort()\n    return copy\n"),
    "the student's docstring": (
        "def f(d, k):\n    return k * 2 if d is None else -1\n", ["__doc__, {k}"],
        '"""Double k."""\ndef f(d, k):\n    return k * 2 if d is None else -1\n'),
    "a decimal context f sets": (
        "import decimal\ndef f(d):\n    return str(d)[:12]\n",
        ["decimal.Decimal(1) / decimal.Decimal({k} + 3)"],
        "import decimal\ndef f(d):\n    decimal.setcontext(decimal.Context(prec=6))\n"
        "    return str(d)[:12]\n"),
}


@pytest.mark.parametrize("kind", sorted(AS_WRITTEN_WORLD))
def test_a_code_f_input_as_written_sees_the_teachers_imports_alone(kind):
    teacher, [text], student = AS_WRITTEN_WORLD[kind]
    problem = _code_f(teacher, [text.format(k=k) for k in range(1, 11)])
    results = verify.grade("code_f", [dict(problem, answer=student)] * 2)
    assert all(r["correct"] for r in results), results


# Round 30, A01/A08: the rename of the entry to f changed every token of its name, a keyword
# `dict(g=x)` and a method's name included, and none inside an f-string: a code_o output that is
# not stock's (['a', 'f', 3] for ['a', 'g', 3]), right code_f programs wrong. A program whose
# renamed text does not read as the program with only the entry's name changed is invalid.
@pytest.mark.parametrize("program", [
    "def g(x):\n    return sorted(dict(g=x, a=1)) + [x]\n",
    "class S:\n    def g(self, x):\n        return x\ndef g(x):\n    return S().g(x)\n",
    "def g(x, k=0):\n    if k:\n        return x\n    return int(f\"{g(x, 1)}\")\n",
])
def test_an_entry_whose_name_is_used_otherwise_is_not_renamed_wrongly(program):
    [result] = verify.validate("code_o", [{"program": program, "input": "3"}])
    assert not result["valid"] and "renamed" in result["reason"], result


def test_an_entry_renamed_with_its_calls_and_a_same_named_attribute_stays_valid():
    program = "import string\ndef g(x):\n    return g(x - 1) + 1 if x else len(string.digits)\n"
    [result] = verify.validate("code_o", [{"program": program, "input": "3"}])
    assert result["valid"] and result["output"] == "13", result
