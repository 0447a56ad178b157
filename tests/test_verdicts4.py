"""Issue 22, red team round 4, the static screen: names a program rebinds unseen (a capture pattern
rebinding int), type, id and hash, modules reached as attribute values (re.enum), getattr with a
constant name, functools.cached_property and the metaclasses, and a banned name that a binding
elsewhere let through. Each test failed on the code before its fix (the commit that added it says
how it was checked)."""
import pytest

import screen
import verify


def refused(program):
    """The screen's reason for refusing `program`, or None when it passes."""
    try:
        screen.prepare_program(program)
    except screen.Invalid as e:
        return str(e)
    return None


# ------------------------------------------- every form of binding makes a name the program's own

# each binds int somewhere, so `case int(v)` below is not the builtin's self-match: a class made
# with a __match_args__ of its choosing could sit under the name
BINDS_INT = {
    "capture": "    match x:\n        case int:\n            pass",
    "star": "    match x:\n        case [*int]:\n            pass",
    "mapping_rest": "    match x:\n        case {**int}:\n            pass",
    "as_pattern": "    match x:\n        case str() as int:\n            pass",
    "except_as": "    try:\n        pass\n    except ValueError as int:\n        pass",
    "import_as": "    import json as int",
    "from_import_as": "    from json import loads as int",
    "for_target": "    for int in []:\n        pass",
    "with_target": "    with x as int:\n        pass",
    "walrus": "    (int := 3)",
    "comprehension": "    [0 for int in []]",
    "global": "    global int",
    "nonlocal": "    def h():\n        nonlocal int\n    int = 1",
    "delete": "    del int",
    "lambda_argument": "    (lambda int: 0)",
}


@pytest.mark.parametrize("form", list(BINDS_INT))
def test_a_name_bound_in_any_form_is_not_the_builtin(form):
    program = (f"def g(x):\n{BINDS_INT[form]}\n"
               "def f(x):\n    match x:\n        case int(v):\n            return v")
    assert "class pattern with positional" in (refused(program) or ""), form


def test_the_builtins_own_class_pattern_still_passes():
    program = "def f(x):\n    match x:\n        case int(v):\n            return v"
    assert refused(program) is None


# ------------------------------- type, id, hash and getattr & co. are refused unless the program's

@pytest.mark.parametrize("text", ["type(x)", "type(x).__name__", "id(x) % 8", "hash(x)",
                                  "getattr(str, 'format')", "hasattr(x, 'append')"])
def test_type_id_hash_and_getattr_are_banned_names(text):
    assert "banned name" in (refused(f"def f(x):\n    return {text}") or ""), text


def test_a_constant_getattr_no_longer_reads_a_run_time_template():
    """The red team's G04: getattr(str, 'format') is the unbound str.format, called on a template
    made at run time (which reads attributes by run-time names)."""
    program = ("import statistics\ndef f(x):\n    fmt = getattr(str, 'format')\n"
               "    return fmt('{0.__glo' + 'bals__}', statistics.mean)")
    assert "banned name: getattr" in (refused(program) or "")


# a BANNED_NAMES name bound in one place and read where Python falls back to the builtin
NOT_ITS_OWN = {
    # a parameter of another function
    "other_function": "def g(vars):\n    pass\ndef f(x):\n    return vars(x)",
    # a module-level binding (a global may be unset when f runs: the builtin then)
    "module_level": "id = 3\ndef f(x):\n    return id(x)",
    # a class body that binds it reads it through the class's namespace, then the builtins
    "class_body": ("def f(hash):\n    class C:\n        if hash:\n            hash = 0\n"
                   "        y = hash(1)\n    return hash"),
    # a default is evaluated outside the function
    "default": "def f(x, id=id):\n    return id",
    # an except's name (a binding, now that every form counts), deleted after its block
    "except_as": ("def f(x):\n    return eval('x')\ndef g(x):\n    try:\n        pass\n"
                  "    except ValueError as eval:\n        pass"),
}


@pytest.mark.parametrize("name", list(NOT_ITS_OWN))
def test_a_banned_name_is_the_programs_only_where_it_is_bound(name):
    assert "banned name" in (refused(NOT_ITS_OWN[name]) or ""), name


def test_the_programs_own_variables_called_id_or_input_still_run():
    program = ("def f(input):\n    id = input * 2\n    type = [id for hash in range(2)]\n"
               "    def g():\n        return id + len(type)\n    return g()")
    assert verify.validate("code_o", [{"program": program, "input": "3"}])[0]["output"] == "8"


# ------------------------------------------------------ a module is only ever used as `module.x`

MODULE_VALUES = {
    "attribute": "import re\ndef f(x):\n    e = re.enum\n    return x",
    "from_import": "from re import enum\ndef f(x):\n    return [enum]",
    "deep": "import json\ndef f(x):\n    return [json.decoder.re]",
    # a parameter of the same name elsewhere once made the module name "the program's"
    "name_bound_elsewhere": ("import statistics\ndef g(statistics):\n    pass\n"
                             "def f(x):\n    s = statistics\n    return x"),
}


def test_a_module_is_never_a_value():
    reasons = {name: refused(program) for name, program in MODULE_VALUES.items()}
    assert all("used as a value" in (reason or "") for reason in reasons.values()), reasons


def test_a_module_reached_as_an_attribute_is_screened_as_that_module():
    assert "banned attribute" in (refused("import re\ndef f(x):\n    return re.enum.sys") or "")


def test_dotted_modules_still_run():
    program = ("import collections.abc, json.decoder, re\nfrom json import decoder\n"
               "def f(x):\n    return [isinstance(x, collections.abc.Iterable), "
               "json.decoder.JSONDecodeError == decoder.JSONDecodeError, "
               "re.enum.Enum.__name__]")
    result = verify.validate("code_o", [{"program": program, "input": "[1]"}])[0]
    assert result["output"] == "[True, True, 'Enum']", result


# ---------------------------- cached_property and metaclasses: attribute names made at run time

@pytest.mark.parametrize("text", ["functools.cached_property(len)", "abc.ABCMeta('K', (), {})",
                                  "typing.NamedTupleMeta", "typing.get_origin(typing.Type)"])
def test_run_time_named_class_makers_are_refused(text):
    program = f"import abc, functools, typing\ndef f(x):\n    return {text}"
    assert "banned attribute" in (refused(program) or ""), text


@pytest.mark.parametrize("text", ["import typing\nclass M(typing.Type):\n    pass",
                                  "from typing import Type as T\nclass M(T[int]):\n    pass"])
def test_a_metaclass_made_through_a_generic_alias_is_refused(text):
    """Red team round 5 H04: typing.Type is no class, but as a base its __mro_entries__ gives type,
    so the class is a metaclass that builds classes from run-time names (screen._makes_a_metaclass)."""
    assert "typing.Type" in (refused(text + "\ndef f(x):\n    return x") or ""), text


def test_an_answer_reaching_a_module_through_cached_property_is_not_correct():
    """The red team's G02 without type: a code_o answer is an expression screened as it runs; a
    metaclass called with three arguments names a cached_property at run time, which then reads
    a module's __dict__ by that name. Before: graded correct."""
    output = "<module 'sys' (built-in)>"
    proposal = {"program": "import abc, functools, re\ndef f(x):\n    return x",
                "input": repr(output)}
    problem = dict(proposal, **verify.validate("code_o", [proposal])[0])
    assert problem["valid"], problem
    answer = ("repr((lambda n: abc.ABCMeta('X', (), {n: (cp := functools.cached_property(len))})"
              " and cp.__get__(re.enum))('sys'))")
    verdict = verify.grade("code_o", [dict(problem, answer=answer)])[0]
    assert not verdict["correct"] and "invalid answer" in verdict["reason"], verdict
