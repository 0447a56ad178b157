"""Red team round 12a, A03/A10: the standard library asks sys._getframe for its caller's module
name (collections.namedtuple, typing's TypeVar, ParamSpec, TypeVarTuple, NewType, TypedDict,
NamedTuple, and typing's protocol checks), and the model child refused it, so those fell back to
another name ('collections', 'typing', None) or let a check through that stock Python refuses: a
gold unlike stock Python's output, whose right answer was graded wrong. Each program here is run
by validation (screened, in a model child) and by stock python3, and the two must agree; the tests
with the screen off check that what the library now gets is a module name, never a frame."""
import os
import subprocess
import sys

import pytest

import screen
import verify

# (what a program's f returns, its input): each asks the library for its caller's module name
NAMED = [
    ("collections.namedtuple('P', 'a b').__module__ + str(x)", "7"),
    ("str(collections.namedtuple('Point', 'x y'))[:x]", "30"),
    ("typing.TypedDict('T', {'a': int}).__module__ * x", "2"),
    ("str(typing.TypeVar('T').__module__) * x", "1"),
    ("repr(typing.NewType('UserId', int)) * x", "1"),
    ("str(typing.ParamSpec('P').__module__) * x", "1"),
    ("str(typing.TypeVarTuple('Ts').__module__) * x", "1"),
    ("typing.NamedTuple('N', [('a', int)]).__module__ * x", "1"),
    ("[str(t.__module__) for t in map(typing.TypeVar, ['A', 'B'])][:x]", "2"),
]
HEAD = "import collections, collections.abc, typing\n\n"
# a protocol not marked runtime_checkable: isinstance on it raises in stock Python (typing asks
# who called: the program), but a check abc makes on the program's behalf is let through (typing
# asks who called: abc), so isinstance(1, Sized) works although P subclasses Sized
PROTOCOL = ("class P(collections.abc.Sized, typing.Protocol):\n"
            "    def m(self):\n        return 0\n\n")


def stock(program, call):
    """repr of `call` after `program` in stock python3, or "ERR <exception type>"."""
    code = program + "\nprint(repr(" + call + "))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if out.returncode:
        return "ERR " + out.stderr.strip().splitlines()[-1].split(":")[0]
    return out.stdout.strip()


def sandboxed(program, inp):
    """The gold a code_o validation shows for f(inp), or "ERR <exception type>" when f raised."""
    result = verify.validate("code_o", [{"program": program, "input": inp}])[0]
    if result["valid"]:
        return result["output"]
    # "error: TypeError: ..." (a refusal of the audit hook has its own reason)
    return "ERR " + result["reason"].removeprefix("error: ").split(":")[0]


@pytest.mark.parametrize("n", range(len(NAMED)))
def test_classes_the_library_makes_are_named_as_in_stock_python(n):
    body, inp = NAMED[n]
    program = HEAD + "def f(x):\n    return " + body + "\n"
    truth = stock(program, f"f({inp})")
    assert "__main__" in truth, truth
    assert sandboxed(program, inp) == truth


def test_protocol_checks_are_refused_and_let_through_as_in_stock_python():
    refused = HEAD + PROTOCOL + "def f(x):\n    return isinstance(x, P)\n"
    through = HEAD + PROTOCOL + ("def f(x):\n    return [isinstance(x, collections.abc.Sized), "
                                 "isinstance([x], collections.abc.Sized)]\n")
    assert stock(refused, "f(1)") == "ERR TypeError"
    assert sandboxed(refused, "1") == "ERR TypeError"
    assert stock(through, "f(1)") == "[False, True]"
    assert sandboxed(through, "1") == "[False, True]"


def test_the_screen_keeps_programs_from_the_caller_lookup():
    for program in ("import sys\ndef f(x):\n    return sys._getframe(0)",
                    "import typing\ndef f(x):\n    return typing.sys._getframe(0)"):
        with pytest.raises(screen.Invalid):
            screen.prepare_program(program)


@pytest.fixture
def no_screen(monkeypatch):
    """The static screen off: programs run as they are (any bypass of it assumed found)."""
    monkeypatch.setattr(screen, "check", screen.nodes)


def test_a_program_that_reaches_the_lookup_gets_a_name_not_a_frame(no_screen):
    """typing.sys._getframe (the screen refuses the name) gives f_globals with the caller's module
    name alone: no other frame attribute, no frame beyond the stack. The function itself is a
    builtin of the sys module, as stock's (audithook.c): its names, docstring, owner, argument
    errors and missing attributes are stock's, and nothing on it leads to the Python lookup behind
    it or to the module that installed it."""
    lookup = "import typing\ndef f(x):\n    return "
    names = sandboxed(lookup + "typing.sys._getframe(x).f_globals", "0")
    assert names == "{'__name__': '__main__'}"
    for attribute in ("f_back", "f_locals", "f_code", "f_lineno"):
        assert sandboxed(lookup + f"typing.sys._getframe(x).{attribute}", "1") == \
            "ERR AttributeError"
    assert sandboxed(lookup + "typing.sys._getframe(x)", "10 ** 6") == "ERR ValueError"
    g = "typing.sys._getframe"
    for call, inp in [(f"repr({g})", "0"), (f"{g}.__self__ is typing.sys", "0"),
                      (f"[{g}.__name__, {g}.__qualname__, {g}.__module__, {g}.__doc__]", "0"),
                      (f"{g}.__text_signature__", "0"), (f"{g}.__defaults__", "0"),
                      (f"{g}.__wrapped__", "0"), (f"{g}.__func__", "0"),
                      (f"{g}(x)", "10 ** 20"), (f"{g}(x)", "1.0"), (f"{g}(x)", "'0'"),
                      (f"{g}(0, x)", "1"), (f"{g}(depth=x)", "0")]:
        program = lookup + call
        truth = stock(program, f"f({inp})")
        assert sandboxed(program, inp) == truth, (call, inp, truth)


def test_the_stand_ins_read_as_stock_and_refuse(no_screen):
    """What a program may read of the zygote's stand-ins, even one past the screen (queue's clock,
    the enum functional API), is stock's; a call of one is refused, caught or not (round 24)."""
    head = "import abc, enum, functools, queue, statistics\ndef f(x):\n    return "
    for stand_in in ("queue.time", "queue.threading._time", "abc.get_cache_token",
                     "functools.get_cache_token",
                     "enum.Enum._create_", "enum.EnumMeta._convert_",
                     "statistics.NormalDist.samples"):
        program = head + (f"[repr({stand_in}).split(' at ')[0], {stand_in}.__name__, "
                          f"{stand_in}.__qualname__, {stand_in}.__module__, {stand_in}.__doc__, x]")
        assert sandboxed(program, "0") == stock(program, "f(0)"), stand_in
    for call in ("queue.time()", "abc.get_cache_token()", "functools.get_cache_token()",
                 "statistics.NormalDist().samples(2)",
                 "enum.Enum('E', 'A')"):
        program = head.replace("return ", "try:\n        return ") + call + \
            "\n    except Exception:\n        return x"
        result = verify.validate("code_o", [{"program": program, "input": "0"}])[0]
        assert not result["valid"] and "not allowed in the sandbox" in result["reason"], result


def test_the_audit_hook_is_installed_once():
    """audithook.install checks its arguments, gives a builtin of the sys module with stock's
    docstring, and refuses a second hook: nothing that reaches it later can replace the zygote's."""
    import isolation
    path = isolation.build_audit_hook()
    with pytest.raises(TypeError):
        isolation.load_audit_hook(path).install(print, print, "sys")
    script = ("import isolation, sys\nm = isolation.load_audit_hook(sys.argv[1])\n"
              "g = m.install(lambda e, a: None, lambda d: None, sys)\n"
              "print(repr(g), g.__self__ is sys, g.__doc__ == sys._getframe.__doc__)\n"
              "try:\n    m.install(lambda e, a: None, lambda d: None, sys)\n"
              "except RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(isolation.__file__)), timeout=60)
    assert out.stdout.splitlines() == ["<built-in function _getframe> True True",
                                       "the audit hook is installed already"], out.stderr


def test_building_the_audit_hook_says_what_is_missing(tmp_path, monkeypatch):
    """build_audit_hook: built once into a private folder of this user's, reused after; a missing
    compiler, and a folder another user could write in, are errors that say so."""
    import tempfile

    import isolation
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = isolation.build_audit_hook()
    assert path.startswith(str(tmp_path)) and os.path.exists(path)
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    built = os.stat(path).st_mtime_ns
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert isolation.build_audit_hook() == path and os.stat(path).st_mtime_ns == built
    os.unlink(path)
    with pytest.raises(RuntimeError, match="needs a C compiler"):
        isolation.build_audit_hook()
    monkeypatch.setenv("CC", "cc -include /nonexistent/header.h")
    with pytest.raises(RuntimeError, match="compiling audithook.c failed"):
        isolation.build_audit_hook()
    assert os.listdir(os.path.dirname(path)) == []
    os.chmod(os.path.dirname(path), 0o777)
    with pytest.raises(RuntimeError, match="not a private folder"):
        isolation.build_audit_hook()
