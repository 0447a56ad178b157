"""Red team round 35: the names a code_i answer may read are the builtins and the program's
imports, less what the program's module binds; a name bound inside a function or a class, or an
answer's own lambda parameter or comprehension target, is not the program's. Each test failed on
the code before the fix (the commit that added them says how)."""
import pytest

import screen
import verify


def _grade(program, given, answers):
    [result] = verify.validate("code_i", [{"program": program, "input": given}])
    assert result["valid"], result
    problem = dict({"program": program, "input": given},
                   **{k: v for k, v in result.items() if k not in ("valid", "reason")})
    return verify.grade("code_i", [dict(problem, answer=a) for a in answers])


# A01: the teacher binds the builtin's name in an inner scope; the answer's `list` is still the
# builtin in stock Python (the call runs in the module), so a right answer is right
@pytest.mark.parametrize("program, given, answer", [
    ("def f(list):\n    return sum(list)", "[1, 2]", "list(range(3))"),
    ("def f(x):\n    list = 5\n    return sum(x) * list", "[1, 2]", "list(range(3))"),
    ("class A:\n    list = tuple\ndef f(x):\n    return sum(x)", "[1, 2]", "list(range(3))"),
    ("def f(nums):\n    return [len for len in nums if len > 1]", "[3, 1, 2]", "[len('abc'), 1, 2]"),
])
def test_a_builtin_bound_only_inside_the_program_is_still_the_answers(program, given, answer):
    right, wrong = _grade(program, given, [answer, "[9]"])
    assert right["correct"] and not right["void"], right
    assert not wrong["correct"] and not wrong["void"], wrong


# A02: rebound at the top level, stock Python reads the program's binding, which an answer may
# not reach: void, not wrong (the other attempt of the problem keeps its verdict)
@pytest.mark.parametrize("binding", ["list = tuple", "for list in [tuple]:\n    pass",
                                     "[(list := tuple) for _ in 'a']",
                                     "def g():\n    global list\n    list = tuple\ng()"])
def test_a_builtin_the_program_rebinds_at_its_top_level_voids_the_answer(binding):
    program = binding + "\ndef f(x):\n    return sum(x) * 2"
    rebound, plain = _grade(program, "[1, 2]", ["list(range(3))", "[0, 1, 2]"])
    assert rebound["void"] and not rebound["correct"], rebound
    assert "rebinds" in rebound["reason"], rebound
    assert plain["correct"] and not plain["void"], plain


# A03: the answer's own names are not the program's f; reading f, a helper or a class is still
# a search through the program: wrong, not void
def test_an_answers_own_f_is_not_the_programs():
    program = "def g(x):\n    return x\ndef f(x):\n    return sum(x)"
    results = _grade(program, "[0, 1, 2]", ["[f for f in range(3)]", "(lambda f: [0, f, 2])(1)",
                                            "[f for f in f([3])]", "[0, 1, g(2)]",
                                            "[0, 1, (lambda f: f)(f([2]))]"])
    assert [r["correct"] for r in results] == [True, True, False, False, False], results
    for result in results[2:]:
        assert not result["void"] and "the program's own" in result["reason"], result


def test_the_names_a_program_binds_are_its_modules():
    program = ("import math\nfrom json import dumps as sorted\nK = 1\n[(W := 2) for _ in 'a']\n"
               "class A:\n    max = 3\ndef g():\n    global G\n    G = 4\ndef f(min, *, abs=1):\n"
               "    len = 5\n    return [sum for sum in min]")
    answer = "K, W, G, A, g, f, math, sorted, max, min, abs, len, sum, list"
    assert screen.own_names_read(program, [answer]) == ["A", "G", "K", "W", "f", "g"]
