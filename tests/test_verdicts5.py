"""Issue 22, red team round 7: a syntax tree as deep as the text is long (an attribute chain)
crashing validate and grade, an import in the program rebinding a name that the shown output or a
code_f student's program reads, and two parent stalls (a fence opening of blanks, a chain of enum
classes). Each test failed on the code before its fix (the commit that added it says how)."""
import subprocess
import sys
import time

import pytest

import sandbox
import screen
import verify

HONEST = {"program": "def f(x):\n    return x + 1", "input": "1"}


def validated(task, proposal):
    result = verify.validate(task, [proposal])[0]
    assert result["valid"], result
    return dict(proposal, **{k: v for k, v in result.items() if k not in ("valid", "reason")})


# ------------------------------------ class 5: no model text crashes a batch (a tree too deep)

def test_a_program_nested_too_deep_is_one_invalid_proposal_not_a_lost_batch():
    """`x.real.real...` parses into a tree as deep as the chain is long; the screen's passes
    recursed through it (RecursionError out of verify.validate: no proposal of the batch got an
    answer)."""
    deep = {"program": "def f(x):\n    return x" + ".real" * 1500, "input": "1"}
    results = verify.validate("code_o", [deep, HONEST])
    assert not results[0]["valid"] and "nested deeper" in results[0]["reason"], results[0]["reason"]
    assert results[1]["valid"] and results[1]["output"] == "2", results[1]


def test_an_answer_nested_too_deep_is_one_invalid_answer():
    problem = validated("code_o", HONEST)
    graded = verify.grade("code_o", [dict(problem, answer="(1)" + ".real" * 1500),
                                     dict(problem, answer="(1).real + 1")])
    assert not graded[0]["correct"] and "nested deeper" in graded[0]["reason"], graded[0]
    assert graded[1]["correct"], graded[1]


def test_programs_as_deep_as_the_limit_allows_still_run():
    # a chain of 60 additions: ~62 levels, twice the deepest of AZR's seeds
    problem = validated("code_o", {"program": "def f(x):\n    return x" + " + 1" * 60,
                                   "input": "1"})
    assert problem["output"] == "61", problem


# ----------------------- class 1: the imports line cannot change what an answer's names mean

# a builtin's name, or a name that shown outputs use, bound by an import the program never even
# runs: the imports line (every import of the program) is in scope where a code_o answer is read
# back and before a code_f student's program
REBINDS = {
    "frozenset_in_a_helper": ("def h():\n    from collections import Counter as frozenset\n"
                              "    return 0\n\ndef f(x):\n    return frozenset({x, x + 1})"),
    "ellipsis": "from math import pi as Ellipsis\n\ndef f(x):\n    return [x, ...]",
    "sum_for_code_f": ("def helper():\n    from math import prod as sum\n    return 0\n\n"
                       "def f(xs):\n    return sum(xs) * 2"),
    "a_module_as_a_builtin": "import math as set\n\ndef f(x):\n    return {x}",
    "counter_from_elsewhere": "from itertools import chain as Counter\n\ndef f(x):\n    return x",
}


@pytest.mark.parametrize("name", sorted(REBINDS))
def test_an_import_binding_a_name_that_answers_read_is_refused(name):
    """Red team round 7 F01-F03: the true output as shown (`frozenset({3, 4})`, `[3, Ellipsis]`)
    read back as a Counter or pi, and a right code_f answer (`2 * sum(xs)`) run as a product,
    all graded wrong and not void: a teacher chose its students' failure rate."""
    program = REBINDS[name]
    task = "code_f" if "code_f" in name else "code_o"
    proposal = {"program": program, "input": "3"}
    if task == "code_f":
        proposal = {"program": program, "inputs": [repr(list(range(k + 1))) for k in range(10)],
                    "message": "twice the total"}
    result = verify.validate(task, [proposal])[0]
    assert not result["valid"] and "an import binds" in result["reason"], result


def test_imports_under_their_own_names_still_run():
    program = ("from collections import Counter\nimport collections.abc\n"
               "from fractions import Fraction as Q\n\ndef f(x):\n    return Counter([x, x])")
    problem = validated("code_o", {"program": program, "input": "3"})
    graded = verify.grade("code_o", [dict(problem, answer=problem["output"])])
    assert problem["output"] == "Counter({3: 2})" and graded[0]["correct"], (problem, graded)


def test_a_code_f_answer_using_a_builtin_means_the_builtin():
    program = ("def f(xs):\n    total = 0\n    for x in xs:\n        total += x\n"
               "    return 2 * total")
    inputs = [repr(list(range(k + 1))) for k in range(10)]
    problem = validated("code_f", {"program": program, "inputs": inputs,
                                   "message": "twice the total"})
    graded = verify.grade("code_f", [dict(problem, answer="def f(xs):\n    return 2 * sum(xs)")])
    assert graded[0]["correct"], graded


# ------------------------------------------------------- class 5: the parent is never stalled

@pytest.mark.parametrize("blanks", [" ", " \t"])
def test_a_fence_opening_of_blanks_is_parsed_in_linear_time(blanks):
    """``` followed by 64 K blanks and no newline: the opening's `[ \\t]*[\\w-]*[ \\t]*` tried
    every split of the run (6-9 s of the parent's CPU a parse, 17-25 s mixed with tabs)."""
    response = "</think> <answer>```" + blanks * (65536 // len(blanks)) + "x</answer>"
    start = time.process_time()
    verify.parse_student("code_f", response)
    verify.parse_teacher("code_f", response)
    verify.parse_teacher("code_o", response)
    assert time.process_time() - start < 1.0


def test_fences_with_blanks_around_their_tag_still_parse():
    response = ("</think> <answer>```python  \ndef f(x):\n    return x\n```\n"
                "``` \tinput\t \n1\n```</answer>")
    assert verify.parse_teacher("code_o", response) == {"program": "def f(x):\n    return x",
                                                         "input": "1"}


def test_a_chain_of_derived_enum_classes_is_closed_in_one_pass(monkeypatch):
    """Red team round 7 S02: class b(a), class c(b), ... on an enum base; the closure took one pass
    over all classes per link (3,256 classes in a 50,000-char program: 5-8 s of parent CPU).
    Counted here as base lookups, which were quadratic in the chain's length."""
    names = [f"c{k}" for k in range(400)]
    lines, base = ["import enum"], "enum.Enum"
    for name in names:
        lines.append(f"class {name}({base}):\n    pass")
        base = name
    program = "\n".join(lines) + "\ndef f(x):\n    return x"
    calls = [0]
    called = screen._called

    def counting(node):
        calls[0] += 1
        return called(node)

    monkeypatch.setattr(screen, "_called", counting)
    screen.prepare_program(program)
    assert calls[0] < 3 * len(names), calls[0]


# ------------------------------ round 8: one run's values share one budget; no stdout carried

def test_a_code_f_proposal_of_huge_inputs_costs_the_parent_little():
    """Red team round 8 S02: ten inputs of 200 characters, each a list of 50,000 items (just under
    a value's cap): four result lines of ~6.5 MB parsed whole and twenty argument lists decoded
    before the output was found too long, ~4 s of the parent's CPU for one proposal. The values of
    one run now share one budget, and a model program's stdout takes no room in its line."""
    big = {"program": "def f(xs, k):\n    return xs[:len(xs) - k]",
           "inputs": [f"[{k}] * 50000, {k}" for k in range(10)], "message": "drops k items"}
    verify.validate("code_o", [HONEST])
    start = time.process_time()
    result = verify.validate("code_f", [big])[0]
    assert time.process_time() - start < 1.0
    assert not result["valid"] and "too large" in result["reason"], result
    small = dict(big, inputs=[f"[{k}] * 5, {k}" for k in range(10)])
    assert verify.validate("code_f", [small])[0]["valid"]


# ------------------------- round 9: what a prompt shows is the text that was verified (NFC)

@pytest.mark.parametrize("program, text", [
    ("def f(s):\n    return len(s)", "'e\u0301te\u0301'"),            # the input
    ("def f(s):\n    return s + 'e\u0301'", "'a'"),                     # the output's repr
    ("def f(s):\n    # caf\u00e9 or cafe\u0301?\n    return s", "'a'"),  # the program
])
def test_text_a_normalising_tokenizer_would_change_is_refused(program, text):
    """Red team round 9 P02: Qwen2's tokenizer normalises to NFC, so an input holding 'e' and a
    combining accent reached the student as the one character 'é': `len` counted 5 where the student
    saw 3, graded wrong and not void. Text outside NFC is refused at validation."""
    result = verify.validate("code_o", [{"program": program, "input": text}])[0]
    assert not result["valid"] and "NFC" in result["reason"], result


def test_composed_and_escaped_text_still_runs():
    composed = validated("code_o", {"program": "def f(s):\n    return len(s)",
                                    "input": "'\u00e9t\u00e9'"})
    escaped = validated("code_o", {"program": "def f(s):\n    return len(s)",
                                   "input": "'e\\u0301'"})
    assert (composed["output"], escaped["output"]) == ("3", "2"), (composed, escaped)


# ------------- round 9: an input reaches f as Python would pass it, or the problem is invalid

# (program, input) whose input, rebuilt from plain data, is not what Python passes f: two names
# for one list, a set's own order, an input's call of f that changed f's state, a mutable default
AS_WRITTEN = {
    "aliasing": ("def f(x):\n    x[0].append(1)\n    return x", "[[0]] * 2"),
    "set_order": ("def f(s):\n    return list(s)", "{3, 49, 55, 0, 57}"),
    "state_of_an_inner_call": ("calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls)",
                               "f(5)"),
    "mutable_default": ("def f(x, seen=[]):\n    seen.append(x)\n    return sum(seen)", "f(3)"),
}


@pytest.mark.parametrize("name", sorted(AS_WRITTEN))
def test_an_input_that_plain_data_cannot_carry_is_refused(name):
    """Red team round 9 A01-A03: the shown output was f's on the rebuilt value (`[[0, 1], [0]]`
    for `[[0]] * 2`), so Python's own answer (`[[0, 1], [0, 1]]`) was graded wrong, not void."""
    program, text = AS_WRITTEN[name]
    result = verify.validate("code_o", [{"program": program, "input": text}])[0]
    assert not result["valid"] and "as Python would pass it" in result["reason"], result


def test_inputs_that_plain_data_carries_still_run():
    assert validated("code_o", {"program": "def f(x):\n    return x * 2",
                                "input": "f(3) + f(33)"})["output"] == "144"
    assert validated("code_o", {"program": "def f(s):\n    return sorted(s)",
                                "input": "{3, 49, 55, 0, 57}"})["output"] == "[0, 3, 49, 55, 57]"


def test_a_code_i_answer_is_correct_only_as_python_passes_it():
    """The other way round: `[[0]] * 2` rebuilt as two lists gave f's gold, while f on it as
    written (one list under two names) does not: graded correct before."""
    problem = validated("code_i", {"program": "def f(x):\n    x[0].append(1)\n    return x[1]",
                                   "input": "[[0], [0]]"})
    graded = verify.grade("code_i", [dict(problem, answer=a)
                                     for a in ("[[0]] * 2", "[[0]] + [[0]]", "[[0], [0]]")])
    assert [g["correct"] for g in graded] == [False, True, True], graded


def test_a_problems_attempts_share_its_decoded_arguments(monkeypatch):
    """Red team round 9 S01: each attempt decoded the problem's stored argument lists and screened
    its program again (8 attempts of a 60,000-item input: ~1 s of the parent's CPU a grade).
    Counted here: the teacher's program is prepared once for 8 attempts."""
    inputs = [f"[{k}] * {600 + k}" for k in range(10)]
    problem = validated("code_f", {"program": "def f(xs):\n    return len(xs) * 2",
                                   "inputs": inputs, "message": "twice the length"})
    calls = [0]
    prepare = screen.prepare

    def counting(program, *room):
        calls[0] += program == problem["program"]
        return prepare(program, *room)

    monkeypatch.setattr(screen, "prepare", counting)
    answer = "def f(xs):\n    return 2 * len(xs)"
    graded = verify.grade("code_f", [dict(problem, answer=answer)] * 8)
    assert all(g["correct"] for g in graded) and calls[0] == 1, (calls, graded)


# ------------------------ round 10: the shown output is f's value, whatever class f patches

def test_a_patched_fraction_property_does_not_change_the_gold():
    """Red team round 10 A15: the child's encoder read a Fraction's parts through the numerator
    and denominator properties of the Python class fractions.Fraction, which a program patched
    through an alias: f returned Fraction(1, 3) and the prompt showed Fraction(7, 3)."""
    program = ("import fractions\ndef f(x):\n    F = [fractions.Fraction][0]\n"
               "    F.numerator = 7\n    return fractions.Fraction(1, x)")
    problem = validated("code_o", {"program": program, "input": "3"})
    assert problem["output"] == "Fraction(1, 3)", problem


@pytest.mark.parametrize("test", ["a is b", "a is not b", "a is 1", "(a, b) is (a, b)"])
def test_identity_other_than_with_a_singleton_is_refused(test):
    """Red team round 10 A01/A04: `1000, 1000` as an input is one constant object for Python's
    own `f(1000, 1000)` and two after plain data, so `a is b` made a gold (False) that the input
    as written does not give; a code_i answer `1000, 1000` was graded correct for a gold False."""
    result = verify.validate("code_o", [{"program": f"def f(a, b):\n    return {test}",
                                         "input": "1000, 1000"}])[0]
    assert not result["valid"] and "identity" in result["reason"], result


def test_identity_with_none_true_false_or_ellipsis_still_runs():
    program = "def f(a, b):\n    return [a is None, b is not True, None is a, a is ...]"
    assert validated("code_o", {"program": program, "input": "None, 2"})["output"] == \
        "[True, True, True, False]"


# ------------------- round 10: the world f runs in is not a gold (refusals, stack, module)

WORLD_GOLDS = {
    # a refusal of the audit hook, caught: the gold was the sandbox's error text
    "caught_refusal": ("import copy\ndef f(x):\n    try:\n        return copy.deepcopy(x)\n"
                       "    except Exception as e:\n        return str(e)", "[{1: {2}}]",
                       "the program caught it"),
}
# the stack room left: the same in every child before round 10 (a gold no reader could derive),
# then random above stock's (a tell of the sandbox: red team round 18, A08); now stock's own
STACK_ROOM = ("def depth(n=0):\n    try:\n        return depth(n + 1)\n"
              "    except RecursionError:\n        return n\n\nT = depth()\n\ndef f(x):\n"
              "    return [T, depth(), x]")


@pytest.mark.parametrize("name", sorted(WORLD_GOLDS))
def test_a_gold_made_of_the_sandboxs_world_is_refused(name):
    """Red team round 10 A12 (f caught the hook's RuntimeError and returned its text as the gold)
    and A02/A03 (f measured its stack room, equal in every child: valid, gold 991)."""
    program, text, reason = WORLD_GOLDS[name]
    result = verify.validate("code_o", [{"program": program, "input": text}])[0]
    assert not result["valid"] and reason in result["reason"], result


def test_a_program_has_the_stack_room_of_a_script_run_by_stock_python():
    """Its top level as much as a script's, f as much as when the script's top level calls it: what
    python3 itself prints (round 18, A08: f saw a room above stock's and graded right code_i
    answers wrong)."""
    stock = subprocess.run([sys.executable, "-c", STACK_ROOM + "\nprint(repr(f(1)))"],
                           capture_output=True, text=True, timeout=60).stdout.strip()
    problem = validated("code_o", {"program": STACK_ROOM, "input": "1"})
    assert problem["output"] == stock, (problem, stock)
    # and in code_i, on an input the teacher's own never was, as in validation
    right = verify.grade("code_i", [dict(problem, input="1", answer="1")])[0]
    assert right["correct"], right


def test_a_programs_doc_is_its_own():
    """Red team round 10 A11: __doc__ fell through to the builtins module's docstring."""
    problem = validated("code_o", {"program": "def f(x):\n    return [__doc__ is None, x]",
                                   "input": "1"})
    assert problem["output"] == "[True, 1]", problem


@pytest.mark.parametrize("program", ["N = len(dir())\ndef f(x):\n    return N + x",
                                     "def f(x):\n    return len(dir(x)) + x"])
def test_dir_is_a_banned_name(program):
    """Red team round 10 A11: dir() of the program's namespace counts what the harness put there
    (3 names; a script run by Python has 8): a gold of the sandbox's world. AZR's seeds never call
    dir or vars."""
    result = verify.validate("code_o", [{"program": program, "input": "1"}])[0]
    assert not result["valid"] and "banned name: dir" in result["reason"], result


# ----------------------------------------------------------------------------- round 11

def test_an_import_the_teachers_run_never_executes_is_not_prepended():
    """Red team round 11 A03: a failing import in a helper never called was copied into the
    imports line before every code_f student's program: every honest answer an ImportError, graded
    wrong and not void, the teacher paid in full."""
    program = "def helper():\n    from math import no_such_name\n\ndef f(x):\n    return x * 2 + 1"
    problem = validated("code_f", {"program": program, "inputs": [str(k) for k in range(1, 11)],
                                   "message": "twice, plus one"})
    graded = verify.grade("code_f", [dict(problem, answer="def f(x):\n    return 2 * x + 1")])
    assert graded[0]["correct"], graded


def test_a_code_f_problem_is_checked_where_its_attempts_ran(monkeypatch):
    """Red team round 11 A07/A08: code_f's self-check ran once per family, so a per-zygote bit
    (the stack room, an address) both families agreed on failed the teacher's own program, sent as
    a student's, in other zygotes (6-7 of 16, none void). The check now runs in every zygote that
    ran an attempt: counted here as the zygotes the checks were pinned to."""
    program = "def f(x):\n    return x * 3"
    problem = validated("code_f", {"program": program, "inputs": [str(k) for k in range(1, 11)],
                                   "message": "thrice"})
    pinned, run = [], sandbox.run

    def recording(jobs):
        pinned.extend(job.get("zygote", 0) for job in jobs)
        return run(jobs)

    monkeypatch.setattr(sandbox, "run", recording)
    graded = verify.grade("code_f", [dict(problem, answer=program)] * 4)
    assert all(g["correct"] for g in graded) and any(pinned), (pinned, graded)


def test_an_unnormalised_fraction_is_not_a_gold():
    """Red team round 11 A02: Fraction(3, 6, _normalize=False) == Fraction(5, 10, ...) is False in
    Python (raw parts), True here (decoded normalised): wrong code_i answers graded correct."""
    program = ("from fractions import Fraction\ndef f(n):\n"
               "    return Fraction(n, 2 * n, _normalize=False)")
    result = verify.validate("code_o", [{"program": program, "input": "3"}])[0]
    assert not result["valid"] and "unnormalised" in result["reason"], result
