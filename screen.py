"""Layer 1 of the sandbox (design §3): the static screen, and the texts that run. Split from
verify.py (the task family's prompts, validity and grading) because it is a concern of its own: what
model-written text may say before a child runs it, and exactly which text that is.

A validity rule and a speed bump, never the only wall: what it misses meets the runtime layers
(sandbox.py: an audit hook in every validation and grading child, seccomp, Landlock, namespaces).
Its rules, on the parse tree of the exact text that will run:
  - imports: an allowlist of pure standard-library modules (zygote.ALLOWED_MODULES, which the
    zygotes preload), measured on AZR's seeds (collections, re, math, fractions, itertools, heapq,
    queue) and widened to the computing modules model programs reach for (typing, functools,
    operator, string, bisect, statistics, decimal, copy, enum, json, ...); no relative import;
  - a module's attributes (`m.x`, `from m import x`): public, and not a door out of the allowlist
    (LEAKS: an attribute that is a module outside it, such as enum.bltns, typing.sys, json.codecs,
    an object defined outside it, such as queue.time, or a metaclass, such as abc.ABCMeta), nor
    one that evaluates text (typing.get_type_hints, typing.ForwardRef);
  - names, attributes, match-class keywords and the fields of a constant str.format template: no
    introspection (INTROSPECTION: code, frame, generator, coroutine and traceback internals, a
    function's globals, closure and annotations, the class hierarchy, the builtins); none of
    BANNED_NAMES (eval, vars, dir, getattr & co., type, id, hash, ...) unless it is the
    program's own where it is read (bound in that function or one around it: never the builtin);
  - a module (imported, or reached as an attribute: re.enum, json.decoder) only used as
    `module.x`; no assignment or deletion through an imported name or a call (no patching of the
    classes grading compares with);
  - no string made at run time ever becomes an attribute name: dunder names only from DUNDERS
    (ordinary methods: no __match_args__, __getattr__, __setattr__, __instancecheck__, ...); class
    patterns with positional sub-patterns only for builtins that match the subject itself and that
    the program never binds (a capture pattern `case int:` binds int); functools.wraps only as a
    def's one-argument decorator, never aliased; no functools.update_wrapper or cached_property,
    abc's register, enum functional API; str.format and format_map only on a constant string.
    Other string constants are data ('mro' in a string is a word, not an attribute).
The text that runs is the text screened, and means what it means to python3 running it from a UTF-8
file: no coding declaration but utf-8's; the entry function is renamed to f on the token stream
(tokenize's own lines, names compared as Python reads them, in NFKC), and the result is parsed and
screened again; the code_f student's program
with the teacher's imports, an input's pack expression, a code_o answer and an imports line are
each screened as the one text a child compiles.
"""
import ast
import builtins
import codecs
import contextlib
import functools
import io
import itertools
import json
import re
import string
import symtable
import tokenize
import types
import unicodedata
import warnings
from importlib import import_module

from encoding import MAX_UNITS, encode
from zygote import ALLOWED_MODULES

MAX_PROGRAM = 50_000     # chars of a program; longer ones are invalid
MAX_INPUT = 20_000       # chars of an input or a code_o answer
MAX_DEPTH = 100          # levels of a program's syntax tree (AZR's seeds: at most 32)
# AZR's list, the design's additions, then ours: what teacher prompts list as banned (the screen
# itself admits only ALLOWED_MODULES; the prompt keeps its words, a warm-started model was trained
# on them)
BANNED_SHOWN = set(("logging random multiprocessing pebble subprocess threading datetime time "
                    "hashlib hmac bcrypt calendar os sys socket shutil ctypes importlib signal "
                    "asyncio pathlib io builtins gc inspect secrets uuid tempfile glob pickle "
                    "marshal resource posix _io _socket _thread _signal _posixsubprocess _ctypes "
                    "fcntl pty mmap code codeop runpy timeit cProfile profile pdb bdb trace "
                    "pkgutil zipimport __main__ sandbox verify").split())
# names a program may not use unless they are its own: bound in the function (def, lambda,
# comprehension) that uses them or in one around it, where Python never falls back to the builtin.
# [ours] getattr & co. (an attribute is written as obj.name; AZR's seeds never call them), type
# (`type(x)` is type itself for a class, and three arguments build a class from a dict whose keys
# are made at run time), id and hash (an address: its low bits differ between the children of one
# zygote, so a teacher could choose its students' failure rate; hash of an object without __hash__
# is its address too). AZR's seeds use none of type, id and hash. copyright, credits, license and
# help: site.py adds them to builtins, and the sandbox's interpreters start without site (`except
# NameError` made a gold stock Python does not give: red team round 12, A04).
BANNED_NAMES = set(("open exec eval compile __import__ input globals locals breakpoint exit quit "
                    "vars dir __build_class__ getattr setattr delattr hasattr type id "
                    "hash copyright credits license help").split())
ATTR_CALLS = {"getattr", "setattr", "delattr", "hasattr"}
# attribute names refused on anything: readers of attributes by name, file openers, sys.modules,
# enum's class makers (_convert_ reads a module named by text, global_enum writes one's globals),
# functools.cached_property (reads and writes an object's __dict__ under a name given at run
# time: its attrname, set by __set_name__ or by assignment), typing.get_origin (of typing.Type it
# is type itself), operator.is_/is_not (identity: see IDENTITY_SLOTS), array's buffer_info (an
# address, whose low bits are the same in every zygote and differ from stock Python's)
BANNED_ATTRS = {"modules", "open", "attrgetter", "methodcaller", "Formatter", "get_field",
                "vformat", "get_type_hints", "ForwardRef", "_evaluate", "_eval_type",
                "getline", "getlines", "FileIO", "update_wrapper", "register",
                "no_type_check", "EnumMeta", "EnumType", "_create_", "_convert_",
                "global_enum", "cached_property", "get_origin", "is_", "is_not",
                "buffer_info"} | BANNED_SHOWN
# [ours] object's own slots read as attributes: object.__eq__/__ne__ compare identity, __hash__
# and __repr__ show an address (`C.__eq__(a, b)` for any class without its own). Python merges
# equal constants of one code object, `1000, 1000` as an input, and grading rebuilds arguments
# from plain data, so identity made golds the input as written does not give (red team round 12,
# A02; `is` itself: _check_identity). A class still defines them; `==`, hash() of its own, repr()
# call them.
IDENTITY_SLOTS = {"__eq__", "__ne__", "__hash__", "__repr__"}
# [ours] names a program may use only as a def's decorator called with one argument
# (`@functools.wraps(g)`), never bind, alias or pass as a value: wraps(fn) returns a partial of
# update_wrapper, whose call keywords replace its own, so any other use of it (`wraps(fn)(w,
# updated=(name,))`, `.func`) reads and writes attributes named at run time
DECORATOR_ONLY = {"wraps"}
# [ours] the dunder names a program may use at all (define, assign, read, pass as a keyword): the
# ordinary methods of the object, number and container protocols. The hooks that turn text made at
# run time into attribute names or change how attributes, classes and isinstance work are refused
# (__match_args__, __getattr__, __setattr__, __instancecheck__, __init_subclass__, __set_name__,
# __reduce__, __class_getitem__, __slots__, ...).
_ORDINARY = ("init new repr str format bytes hash bool eq ne lt le gt ge len length_hint "
             "getitem setitem delitem missing contains iter next reversed call enter exit "
             "post_init neg pos abs invert complex int float index round trunc floor ceil "
             "copy deepcopy get set delete name qualname doc module").split()
_OPERATORS = "add sub mul matmul truediv floordiv mod divmod pow lshift rshift and xor or".split()
DUNDERS = ({f"__{name}__" for name in _ORDINARY}
           | {f"__{side}{op}__" for op in _OPERATORS for side in ("", "r", "i")})
# [ours] the only classes a class pattern may give positional sub-patterns: builtins that match the
# subject itself (`case int(n)`); any other class reads the attributes its __match_args__ names
SELF_MATCHING = set(("int str float bool bytes list tuple dict set frozenset "
                     "bytearray").split())
# [ours] the enum module's classes, whose call with a name and members (the functional API) makes
# class attributes named by text made at run time
ENUM_CLASSES = {"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ReprEnum"}
# [ours] classes whose repr is their bare name: in scope for answers (and outputs must be shown
# with them) whenever the program imports their module in any form
REPR_NAMES = {"collections": "from collections import Counter, OrderedDict, deque, defaultdict",
              "fractions": "from fractions import Fraction",
              "decimal": "from decimal import Decimal"}
# the names those lines bind -> (module, name)
_REPR_SOURCES = {name.strip(): (module, name.strip()) for module, line in REPR_NAMES.items()
                 for name in line.split(" import ")[1].split(",")}
# what an import may not bind (the imports line is in scope where answers run)
_BUILTIN_NAMES = set(dir(builtins)) | {"__builtins__"}
# what `is` may compare with (_check_identity), each by identity (1 == True)
SINGLETONS = (None, True, False, ...)
# Load, And, Add, ...: markers the screen reads through their parent (and not depth, complexity)
MARKERS = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)


class Invalid(Exception):
    """A proposal or attempt rejected before it runs; the message is the reason."""


def _introspection():
    """The attribute names of this interpreter's code, frame, generator, coroutine, async
    generator and traceback objects that plain objects lack (co_*, f_*, gi_*, tb_*, ...), and the
    doors to a function's globals and closure, the class hierarchy and the builtins."""
    def generator():
        yield

    async def coroutine():
        pass

    async def async_generator():
        yield

    try:
        raise ValueError
    except ValueError as e:
        trace = e.__traceback__
    made = [generator.__code__, generator(), coroutine(), async_generator(), trace,
            trace.tb_frame]
    names = set()
    for obj in made:
        for name in dir(obj):
            if re.match(r"(co|f|gi|cr|ag|tb)_|_co_|_varname", name):
                names.add(name)
    made[2].close()
    doors = ("__builtins__ __subclasses__ __bases__ __base__ __mro__ mro __globals__ __code__ "
             "__closure__ cell_contents __func__ __self__ __getattribute__ __setattr__ "
             "__delattr__ __dict__ __class__ __loader__ __spec__ __traceback__ __annotations__ "
             "__reduce__ __reduce_ex__ __import__ __build_class__")
    return names | set(doors.split())


INTROSPECTION = _introspection()
_INTROSPECTION_RE = re.compile("|".join(sorted(map(re.escape, INTROSPECTION), key=len,
                                               reverse=True)))


def _leaks():
    """({allowed module: its public attributes that lead out of the allowlist}, {allowed module:
    {its public attribute: the allowed module that attribute is}}). Doors out: submodules and
    modules it imported that are not allowed (enum.bltns is the builtins module, typing.sys,
    json.codecs), objects defined in a module that is not (queue.time is time.monotonic; a
    builtin function re-exported), the library's mutable state, which a method call changes
    with no assignment the screen sees (copy.dispatch_table is copyreg's table of reducers, whose
    state dicts copy.copy turns into setattr calls by name; keyword.kwlist), and metaclasses
    (abc.ABCMeta, typing.NamedTupleMeta: like type, called with three arguments they build a class
    from a dict whose keys are made at run time). The allowed modules reached as attributes
    (re.enum, json.decoder, collections.abc) are screened as those modules, and never used as
    values. Computed from this interpreter's own modules, so a Python that adds a door has it
    closed."""
    allowed_tops = {name.split(".")[0] for name in ALLOWED_MODULES}
    leaks, submodules = {}, {}
    for name in ALLOWED_MODULES:
        module = import_module(name)
        leaks[name], submodules[name] = set(), {}
        for attr, value in vars(module).items():
            if attr.startswith("_"):
                continue
            if isinstance(value, (dict, list, set, bytearray)):
                leaks[name].add(attr)
                continue
            if isinstance(value, type) and issubclass(value, type) or _makes_a_metaclass(value):
                leaks[name].add(attr)
                continue
            if isinstance(value, types.ModuleType):
                if value.__name__ in ALLOWED_MODULES:
                    submodules[name][attr] = value.__name__
                else:
                    leaks[name].add(attr)
                continue
            origin = getattr(value, "__module__", None)
            if not isinstance(origin, str):
                continue
            top = origin.split(".")[0].lstrip("_")
            if origin == "builtins" and isinstance(value, type):
                continue
            if top not in allowed_tops:
                leaks[name].add(attr)
    return leaks, submodules


def _makes_a_metaclass(value):
    """Is `value` (not a class) one that stands for a metaclass: a generic alias whose origin is
    one, or one that puts one among a class's bases (`class M(typing.Type): ...` is a subclass
    of type, through typing.Type's __mro_entries__; red team round 5 H04)?"""
    if isinstance(value, type):
        return False
    origin = getattr(value, "__origin__", None)
    if isinstance(origin, type) and issubclass(origin, type):
        return True
    try:
        bases = value.__mro_entries__((value,))
    except Exception:
        return False
    return any(isinstance(b, type) and issubclass(b, type) for b in bases)


LEAKS, SUBMODULES = _leaks()


def quiet(parse, *args, **kwargs):
    """parse(*args, **kwargs) (ast.parse, compile, tokenize ... of model text) with the warnings
    it raises dropped: `1if x`, `"\\d"`, `x is 1` warn at parse or compile time, and model text
    must never print on the console, where it reads like an error of ours. Inside silenced() (a
    whole batch), without a context of its own."""
    if _silent[0]:
        return parse(*args, **kwargs)
    with silenced():
        return parse(*args, **kwargs)


# how many silenced() blocks are open (warnings.catch_warnings costs ~10 us: one per batch)
_silent = [0]


@contextlib.contextmanager
def silenced():
    """Warnings ignored inside (model text parsed and compiled in a batch)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _silent[0] += 1
        try:
            yield
        finally:
            _silent[0] -= 1


def parse(text, mode="exec"):
    """Model text -> its AST (no warnings printed). Raises Invalid."""
    try:
        return quiet(ast.parse, text, mode=mode)
    except SyntaxError as e:
        raise Invalid(f"syntax error: {e.msg} (line {e.lineno})")
    except (ValueError, RecursionError, MemoryError) as e:
        raise Invalid(f"does not parse: {type(e).__name__}")


def nodes(tree):
    """All nodes of a tree but the MARKERS, iteratively (model text can nest past the recursion
    limit: `x.a.a.a...` parses into a chain as deep as it is long); raise Invalid deeper than
    MAX_DEPTH, so nothing that walks a screened tree (the screen's own passes, compile, unparse)
    can recurse out of the stack. ~2x faster than ast.walk."""
    out, stack, depths, node_type = [], [tree], [1], ast.AST
    while stack:
        node, depth = stack.pop(), depths.pop()
        if depth > MAX_DEPTH:
            raise Invalid(f"nested deeper than {MAX_DEPTH} levels")
        out.append(node)
        size = len(stack)
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                stack += [v for v in value if isinstance(v, node_type)]
            elif isinstance(value, node_type) and not isinstance(value, MARKERS):
                stack.append(value)
        depths += [depth + 1] * (len(stack) - size)
    return out


def check(tree):
    """Layer 1 on a parsed text: raise Invalid for what the module docstring lists; -> its nodes.
    (Tests switch it off by setting screen.check = screen.nodes.)"""
    found = nodes(tree)
    imported, bound, modules, direct, decorators, enums = _bindings(found)
    # a module's name that a function binds too (a parameter `string`) is no module there
    if bound.intersection(modules):
        direct = direct | _own_reads(tree, bound.intersection(modules))
    _check_uses(found, imported, bound, modules, direct, decorators, enums)
    return found


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_NESTED = (*_SCOPES, ast.ClassDef, *_COMPREHENSIONS)


def _own_reads(tree, names):
    """ids of the Name nodes of `names` that Python reads from a function's own binding (its
    parameter, assignment, loop target, ...; or one of a function around it), never the module an
    import bound to the same name: a code_f student's `def f(string)` under the teacher's `import
    string` (red team round 12, A01). Errs only towards "the module": a name a function binds by an
    import or declares global, or that a class body binds or declares at all (the class's reads
    of it fall back to the module's names), shields nothing; defaults, decorators and annotations
    of a def, and a comprehension's first iterable, are read in the scope around it, as Python
    does. tests/test_verdicts7.py checks it against the compiler's own LOAD_* choice."""
    own = set()

    def visit(node, shields, outer):
        # shields: the names read from a function's own binding here; outer: those of the
        # nearest function around (a def in a class body skips the class's scope)
        kind = type(node)
        if kind is ast.Name:
            if node.id in shields:
                own.add(id(node))
            return
        if kind in _NESTED:
            for child in _around(node):
                visit(child, shields, outer)
        if kind in _SCOPES:
            body = node.body if kind is not ast.Lambda else [node.body]
            inner = _function_shields(node.args, body, names, outer)
            for child in body:
                visit(child, inner, inner)
            return
        if kind is ast.ClassDef:
            # a name the class body binds or declares is read from its dict, then the module's
            bound, declared, imports = _scope_facts(node.body)
            for child in node.body:
                visit(child, outer - bound - declared - imports, outer)
            return
        if kind in _COMPREHENSIONS:
            first, *rest = node.generators
            targets = set()
            for generator in node.generators:
                targets |= {n.id for n in ast.walk(generator.target) if type(n) is ast.Name}
            # a comprehension is a function: in a class body it skips the class's names too
            inner = outer | (targets & names)
            for child in [first.target, *first.ifs, *rest]:
                visit(child, inner, inner)
            for child in (node.key, node.value) if kind is ast.DictComp else (node.elt,):
                visit(child, inner, inner)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, shields, outer)

    visit(tree, frozenset(), frozenset())
    return own


def _around(node):
    """The parts of a nested scope's node that Python evaluates in the scope around it: a def's
    decorators, defaults and annotations, a lambda's defaults, a class's bases, keywords and
    decorators, a comprehension's first iterable."""
    kind = type(node)
    if kind in _COMPREHENSIONS:
        return [node.generators[0].iter]
    if kind is ast.ClassDef:
        return [*node.bases, *node.keywords, *node.decorator_list]
    arguments = node.args
    around = [*arguments.defaults, *[d for d in arguments.kw_defaults if d]]
    if kind is not ast.Lambda:
        around += [*node.decorator_list, node.returns]
        around += [a.annotation for a in _arguments(arguments)]
    return [child for child in around if child is not None]


def _arguments(arguments):
    return [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
            *[a for a in (arguments.vararg, arguments.kwarg) if a]]


def _function_shields(arguments, body, names, outer):
    """The names of `names` a function's reads take from its own bindings or the shielded ones of
    the function around it (`outer`), less those it declares global or nonlocal (`nonlocal` reads
    the binding around, shielded only if `outer` says so) or binds by an import."""
    bound, declared, imports = _scope_facts(body)
    mine = ({a.arg for a in _arguments(arguments)} | bound) - declared
    return frozenset(((mine & names) | outer) - declared - imports)


def _scope_facts(body):
    """A scope's own statements -> (names they bind other than by import, names declared global or
    nonlocal, names bound by an import); nested scopes' bindings are theirs, a def's or a class's
    name is bound where it stands."""
    bound, declared, imports = set(), set(), set()
    for node in _own_nodes(body):
        kind = type(node)
        if kind is ast.Name and type(node.ctx) is not ast.Load:
            bound.add(node.id)
        elif kind in (*_SCOPES[:2], ast.ClassDef):
            bound.add(node.name)
        elif kind in (ast.MatchAs, ast.MatchStar, ast.ExceptHandler, ast.MatchMapping):
            bound.update(_binds(node))
        elif kind in (ast.Global, ast.Nonlocal):
            declared.update(node.names)
        elif kind in (ast.Import, ast.ImportFrom):
            imports.update(_binds(alias)[0] for alias in node.names)
    return bound - {None}, declared, imports


def _own_nodes(body):
    """The nodes of a scope's statements outside the scopes nested in them (a nested def, lambda,
    class or comprehension is yielded itself and what _around gives, not its own scope)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if type(node) in _NESTED:
            stack.extend(_around(node))
        else:
            stack.extend(ast.iter_child_nodes(node))


def _bindings(found):
    """The screen's first pass: raise Invalid for an import outside the allowlist (or of a door of
    an allowed module), or an alias of wraps; -> (names imported, every name the program binds
    anywhere, {name: module} for names bound to a module, ids of the nodes used directly: `x` in
    `x.attr`, ids of the callees of the one-argument calls that decorate a def, the names of enum
    classes: ENUM_CLASSES and the program's classes derived from one)."""
    imported, bound, modules, direct, decorators = set(), set(), {}, set(), set()
    decorating, classes, sources = set(), [], {}
    # exact types (ast.parse output), most frequent first
    for node in found:
        kind = type(node)
        if kind is ast.Name:
            if type(node.ctx) is not ast.Load:
                bound.add(node.id)
        elif kind is ast.Attribute:
            # a module's name as `module.x` (not an alias of it)
            direct.add(id(node.value))
        elif kind is ast.Call:
            # wraps only as `@wraps(g)` (a def is found before its decorators)
            plain = len(node.args) == 1 and not node.keywords
            if plain and type(node.args[0]) is not ast.Starred and id(node.func) in decorating:
                decorators.add(id(node.func))
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            bound.add(node.name)
            if kind is ast.ClassDef:
                classes.append(node)
                continue
            for decorator in node.decorator_list:
                if type(decorator) is ast.Call:
                    decorating.add(id(decorator.func))
        elif kind is ast.Import:
            for alias in node.names:
                _allowed_module(alias.name)
                name = alias.asname or alias.name.split(".")[0]
                _one_source(sources, name, alias.name if alias.asname else name)
                imported.add(name)
                modules[name] = alias.name
                if not alias.asname:
                    modules[name] = alias.name.split(".")[0]
        elif kind is ast.ImportFrom:
            if node.level or not node.module:
                raise Invalid("relative import")
            _allowed_module(node.module)
            for alias in node.names:
                _allowed_attribute(node.module, alias.name)
                if alias.name in DECORATOR_ONLY and alias.asname not in (None, alias.name):
                    raise Invalid(f"{alias.name} imported under another name")
                _one_source(sources, alias.asname or alias.name, f"{node.module}.{alias.name}")
                imported.add(alias.asname or alias.name)
                if alias.name in SUBMODULES[node.module]:
                    modules[alias.asname or alias.name] = SUBMODULES[node.module][alias.name]
        elif kind in BINDERS:
            bound.update(_binds(node))
    # derived at any depth (a class may name a base defined further down, in a function): a walk
    # from each enum name to the classes that name it as a base (one pass per class, however long
    # a chain of classes derived from each other: no pass per link)
    derived = {}
    for node in classes:
        for base in node.bases:
            derived.setdefault(_called(base), []).append(node.name)
    enums, todo = set(ENUM_CLASSES), list(ENUM_CLASSES)
    while todo:
        for name in derived.pop(todo.pop(), ()):
            if name not in enums:
                enums.add(name)
                todo.append(name)
    return imported, bound, modules, direct, decorators, enums


# the nodes but Name and the defs that bind a name (_binds)
BINDERS = {ast.arg, ast.alias, ast.Global, ast.Nonlocal, ast.MatchAs, ast.MatchStar,
           ast.ExceptHandler, ast.MatchMapping}


def _binds(node):
    """The names a node other than a Name or a def binds: an argument, an import (`import a.b`
    binds a), a global or nonlocal declaration, a capture pattern (`case int:`, `case [*int]`,
    `case {**int}`, `case X() as int`), an exception handler's `as`."""
    kind = type(node)
    if kind is ast.arg:
        return [node.arg]
    if kind is ast.alias:
        return [node.asname or node.name.split(".")[0]]
    if kind in (ast.Global, ast.Nonlocal):
        return node.names
    if kind in (ast.MatchAs, ast.MatchStar, ast.ExceptHandler):
        return [node.name]
    if kind is ast.MatchMapping:
        return [node.rest]
    return []


def _allowed_module(name):
    if name not in ALLOWED_MODULES:
        raise Invalid(f"import of {name}: not an allowed module (allowed: pure standard-library "
                      "modules such as collections, math, re, itertools, functools, typing)")


def _allowed_attribute(module, attr):
    """Raise Invalid unless `attr` of the allowed `module` is public and no door out."""
    if attr == "*":
        raise Invalid(f"from {module} import *")
    if attr.startswith("_") or attr in LEAKS[module] or attr in BANNED_ATTRS:
        raise Invalid(f"banned attribute: {module}.{attr}")


def _exists(module, attr):
    """Raise Invalid unless the allowed `module` has `attr` (or it is an allowed submodule): an
    import in the module's scope is in the imports line, which runs before every code_f student's
    program and code_o answer, also when the teacher's run never reached it (`if 0:`), where
    `from math import no_such_name` failed them all (red team round 11, A03: in a helper, which
    stays out of the line)."""
    if not hasattr(import_module(module), attr) and f"{module}.{attr}" not in ALLOWED_MODULES:
        raise Invalid(f"from {module} import {attr}: {module} has no {attr}")


def _one_source(sources, name, source):
    """Raise Invalid when `name` was imported before as something else: the screen reads a name
    as one module (or attribute) for the whole program, where Python binds whichever import ran
    last in each scope (red team round 13, A10: `import json as x` then `import enum as x`, and
    `x.bltns.getattr`, screened as json's attribute, was builtins' getattr)."""
    if sources.setdefault(name, source) != source:
        raise Invalid(f"{name} imported as two things ({sources[name]}, {source})")


def _module_of(node, modules, known):
    """The allowed module an expression is (`collections`, `collections.abc`, `re.enum`), or None.
    known: {id(node): its answer} for the nodes asked about already (a chain of attributes is asked
    about at every link: n links cost n^2 / 2 steps without it, red team round 13, A01)."""
    if id(node) in known:
        return known[id(node)]
    module = None
    if type(node) is ast.Name:
        module = modules.get(node.id)
    elif type(node) is ast.Attribute:
        outer = _module_of(node.value, modules, known)
        if outer is not None:
            module = SUBMODULES[outer].get(node.attr)
    known[id(node)] = module
    return module


def _check_uses(found, imported, bound, modules, direct, decorators, enums):
    """The screen's second pass, over what _bindings found: raise Invalid for a banned name,
    attribute or string, a dunder name outside DUNDERS, a module used other than as `module.x`,
    wraps other than as a def's one-argument decorator, a class pattern reading attributes by
    __match_args__, str.format of text made at run time, the enum functional API, and
    monkey-patching."""
    own, known = set(), {}
    for node in found:
        kind = type(node)
        if kind is ast.Name:
            if node.id in INTROSPECTION:
                raise Invalid(f"banned name: {node.id}")
            if node.id in BANNED_NAMES and node.id not in bound:
                raise Invalid(_banned_name(node.id))
            if node.id in BANNED_NAMES and type(node.ctx) is ast.Load:
                own.add(node.id)
            _dunder(node.id)
            if node.id in DECORATOR_ONLY and id(node) not in decorators:
                raise Invalid(f"{node.id} only as a def's decorator (@functools.wraps(g))")
            if node.id in modules and type(node.ctx) is ast.Load and id(node) not in direct:
                raise Invalid(f"the module {node.id} used as a value")
        elif kind is ast.Attribute:
            if node.attr in INTROSPECTION or node.attr in BANNED_ATTRS:
                raise Invalid(f"banned attribute: {node.attr}")
            if node.attr in IDENTITY_SLOTS:
                raise Invalid(f"reading .{node.attr}: object's own shows identity, not a value")
            _dunder(node.attr)
            if node.attr in DECORATOR_ONLY and id(node) not in decorators:
                raise Invalid(f"{node.attr} only as a def's decorator (@functools.wraps(g))")
            # a format template names attributes ("{0.x}"): only a constant one, whose fields are
            # screened here (other string constants are data: 'mro' in a string is a word)
            constant = type(node.value) is ast.Constant and type(node.value.value) is str
            if node.attr in ("format", "format_map"):
                if not constant:
                    raise Invalid(f"{node.attr} only on a constant string")
                _format_fields(node.value.value)
            module = _module_of(node.value, modules, known)
            if module is not None:
                _allowed_attribute(module, node.attr)
                if node.attr in SUBMODULES[module] and id(node) not in direct:
                    raise Invalid(f"the module {module}.{node.attr} used as a value")
        elif kind is ast.Call:
            _check_class_maker(node, enums)
        elif kind in (ast.Assign, ast.Delete, ast.AugAssign, ast.AnnAssign):
            _check_targets(node, imported)
        elif kind is ast.MatchClass:
            _check_class_pattern(node, bound)
        elif kind is ast.Compare:
            _check_identity(node)
        else:
            for name in _names(node):
                _dunder(name)
    if own:
        _own_names_only(found[0], own)


def _check_identity(node):
    """`is` / `is not` only against None, True, False or ...: identity is no value's, it is where
    the value came from (Python merges equal constants of one code object, `1000, 1000` as an
    input; grading rebuilds arguments from plain data), so `a is b` could make a gold that no run
    of the shown input as written gives (red team round 10, A01/A04). AZR's seeds use `is` with
    None alone."""
    sides = [node.left, *node.comparators]
    for n, op in enumerate(node.ops):
        if type(op) not in (ast.Is, ast.IsNot):
            continue
        pair = sides[n:n + 2]
        constants = [x.value for x in pair if type(x) is ast.Constant]
        if not any(c is s for c in constants for s in SINGLETONS):
            raise Invalid("`is` other than against None, True, False or ...: identity is not a "
                          "value")


def _banned_name(name):
    """The reason a BANNED_NAMES name is refused."""
    if name in ATTR_CALLS:
        return (f"banned name: {name} (an attribute needs a constant, allowed attribute name, "
                "written as obj.name)")
    return f"banned name: {name}"


def _own_names_only(tree, names):
    """Raise Invalid if a name of `names` (BANNED_NAMES the program binds somewhere) is read where
    Python may fall back to the builtin: at module level, in a class body that binds it, or in a
    function that neither binds it nor sits in one that does (symtable: the compiler's own
    scopes, so `def g(eval): ...` elsewhere does not make `eval` in f the program's)."""
    mode = "exec"
    if type(tree) is ast.Expression:
        mode = "eval"
    try:
        tables = [symtable.symtable(ast.unparse(tree), "<program>", mode)]
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise Invalid(f"does not compile: {type(e).__name__}") from None
    while tables:
        table = tables.pop()
        tables += table.get_children()
        kind = table.get_type()
        for symbol in _symbols(table):
            if symbol.get_name() not in names or not symbol.is_referenced():
                continue
            mine = False
            if kind == "function":
                mine = symbol.is_free() or (symbol.is_local() and not symbol.is_global())
            elif kind == "class":
                mine = symbol.is_free() and not symbol.is_local()
            if not mine:
                raise Invalid(_banned_name(symbol.get_name()) + ", used where it is not the "
                              "program's own")


def _format_fields(template):
    """Raise Invalid if a str.format template's fields (or the fields nested in their specs) name
    an introspection attribute, a banned one or any dunder ("{0.__globals__}",
    "{0:{1.gi_frame}}")."""
    try:
        parts = [text for _, field, spec, _ in string.Formatter().parse(template)
                 for text in (field, spec) if text]
    except ValueError:
        raise Invalid("a format template that does not parse") from None
    for text in parts:
        for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
            if name in INTROSPECTION or name in BANNED_ATTRS or name.startswith("__"):
                raise Invalid(f"banned name in a format field: {name}")


def _names(node):
    """The identifiers a node other than a Name or Attribute binds or passes (a def's or a class's
    name, a keyword's, an imported attribute's, and what _binds gives)."""
    kind = type(node)
    if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
        return [node.name]
    if kind is ast.keyword:
        return [node.arg]
    if kind is ast.alias:
        return [node.name, node.asname]
    if kind in BINDERS:
        return _binds(node)
    return []


def _dunder(name):
    """Raise Invalid for a dunder name outside DUNDERS."""
    if name and name.startswith("__") and name.endswith("__") and name not in DUNDERS:
        raise Invalid(f"banned dunder name: {name}")


def _check_class_pattern(node, bound):
    """`case C(a, b)` reads the attributes C.__match_args__ names, which a program can make at run
    time: positional sub-patterns only for the builtins in SELF_MATCHING (one, matching the subject
    itself). Keyword sub-patterns name their attributes in the text and are screened as such."""
    for name in node.kwd_attrs:
        if name in INTROSPECTION or name in BANNED_ATTRS:
            raise Invalid(f"banned attribute: {name}")
        _dunder(name)
    if not node.patterns:
        return
    cls = node.cls
    builtin = type(cls) is ast.Name and cls.id in SELF_MATCHING and cls.id not in bound
    if not builtin or len(node.patterns) > 1:
        raise Invalid("a class pattern with positional sub-patterns (only int(x), str(x), ... "
                      "match the subject itself; use keyword sub-patterns)")


def _called(func):
    """The name a callee or base is spelt with (`f`, `m.f`), or None."""
    if type(func) is ast.Name:
        return func.id
    if type(func) is ast.Attribute:
        return func.attr
    return None


def _check_class_maker(node, enums):
    """No class built from names made at run time by the enum functional API (`Enum("E", names)`,
    `E("X", names)` for an E derived from an enum class; the zygote refuses it for the spellings
    the screen cannot see: an alias, `E.__call__`, functools.partial(E)). (type and the
    metaclasses, whose three-argument call is the other way, are refused as names.)"""
    spread = any(type(a) is ast.Starred for a in node.args) or any(
        k.arg is None for k in node.keywords)
    name = _called(node.func)
    if name in enums and (len(node.args) > 1 or node.keywords or spread):
        raise Invalid(f"{name} called with members (the functional API)")


def _root(node):
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node


def _check_targets(node, imported):
    """No assignment or deletion through an imported name or a call (`math.pi = 3`, `f().x = 1`):
    no monkey-patching of library classes that grading compares with."""
    if type(node) in (ast.Assign, ast.Delete):
        targets = node.targets
    else:
        targets = [node.target]
    for target in targets:
        elements = [target]
        if isinstance(target, (ast.Tuple, ast.List)):
            elements = target.elts
        for element in elements:
            root = _root(element)
            if element is not root and (not isinstance(root, ast.Name) or root.id in imported):
                raise Invalid("modifies an imported module (or assigns through a call)")


def screened(text, mode="exec"):
    """Parse `text` and screen it: the exact text a child will run. -> the tree (its code object,
    compiled from that tree, is kept for compiled()). Raises Invalid."""
    tree = parse(text, mode)
    check(tree)
    _keep(text, mode, tree)
    return tree


# code objects of the texts screened lately, compiled from the tree that was screened (one parse
# per text; bounded: a text no longer here is parsed and screened again), and their characters
_CODES, _CODES_CHARS = {}, [0]
# [ours] the bounds of that cache: texts, and characters (a code object costs the parent ~7 bytes
# per character of its text: 8 M characters ~ 55 MB, where 8,192 programs of 50 KB were ~2.7 GB)
CODES_TEXTS = 8192
CODES_CHARS = 8_000_000


def _keep(text, mode, tree):
    if (text, mode) in _CODES:
        return
    if len(_CODES) >= CODES_TEXTS or _CODES_CHARS[0] + len(text) > CODES_CHARS:
        _CODES.clear()
        _CODES_CHARS[0] = 0
    _CODES_CHARS[0] += len(text)
    names = {"exec": "<program>", "eval": "<call>"}
    try:
        # optimize=0: as stock python3 runs a script, whatever this process's -O (round 27, A12:
        # under -O a program's asserts were stripped)
        code = quiet(compile, tree, names[mode], mode, dont_inherit=True, optimize=0)
    # a tree can parse and still not compile (`y = *a`: the compiler's own checks)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as e:
        raise Invalid(f"does not compile: {getattr(e, 'msg', None) or type(e).__name__}") from None
    _CODES[text, mode] = text if _holds_a_frozenset(code) else code


def compiled(text, mode="exec"):
    """What a child runs for `text` (screened now if it was not lately): the code object compiled
    from its screened tree, or the text itself where that code holds a frozenset, which the child
    then compiles (zygote._compiled): marshal makes a frozenset again in its sorted order, so
    `{8, 16, 0}` iterated as [0, 8, 16] in every child and [8, 16, 0] under stock python3 (red
    team round 27, A11: 50 of 50 right code_i answers wrong). Raises Invalid."""
    if (text, mode) not in _CODES:
        screened(text, mode)
    return _CODES[text, mode]


def _holds_a_frozenset(code):
    """Does a code object hold a frozenset constant anywhere (in a tuple, a nested code object)?"""
    todo = list(code.co_consts)
    while todo:
        const = todo.pop()
        if type(const) is frozenset:
            return True
        if type(const) is tuple:
            todo += const
        elif type(const) is types.CodeType:
            todo += const.co_consts
    return False


# ------------------------------------------------------------------------------ programs and inputs

def prepare_program(program):
    """-> (program with its entry function renamed to f, text of all its import statements). Raises
    Invalid."""
    program, imports, _ = prepare(program)
    return program, imports


def own_names_read(program, inputs):
    """The names the `inputs` (texts) read that a student cannot know: any but a builtin's or a
    name the program imports in its module, and those too when the program binds them there in
    any other way (an allowlist: `h(3)` of a helper never shown, red team round 13 A09, and `K`
    set by a walrus in a comprehension or by `global K` in a helper, round 14 A01). An input runs
    in the program's module, or one of its own: a name the program binds inside a function or a
    class is not the input's (round 35, A01: a parameter `list` made the answer `list(range(3))`
    the program's own). A name an input binds itself (`[(h := 3), h]`) is its own, unless the
    program's module binds it too (round 37, C1). A code_f student sees the inputs, never the
    program."""
    read, own = set(), set()
    for text in inputs:
        reads, binds = _names_read(text)
        read |= reads
        own |= binds
    if not read:
        return []
    allowed, _, bound = _module_names(program)
    return sorted(name for name in read - allowed if name in bound or name not in own)


def rebound_names(program):
    """The builtins' names and the program's imports that its module also binds otherwise
    (`list = tuple`, `math: int`): where an input reads one, stock Python reads the program's."""
    return _module_names(program)[1]


@functools.lru_cache(maxsize=64)
def _module_names(program):
    """-> (the names an input may read: the builtins' and the program's imports in its module, less
    those its module binds otherwise; the names of the two it does bind so; every name its module
    binds), once per program (red team round 36, C1: every answer of a batch worked them out
    again)."""
    try:
        tables = [symtable.symtable(program, "<program>", "exec")]
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise Invalid(f"does not compile: {type(e).__name__}") from None
    # a function or a class body that declares them global binds them there too, an import there
    # too (round 37, B1: `global json; import json` in a helper, as a rebinding); a comprehension's
    # walrus binds in the scope around it
    bound = {s.get_name() for s in _symbols(tables[0]) if s.is_assigned()}
    names = _BUILTIN_NAMES | _scope_facts(parse(program).body)[2]
    tables = tables[0].get_children()
    while tables:
        table = tables.pop()
        tables += table.get_children()
        for symbol in _symbols(table):
            if symbol.is_global() and (symbol.is_assigned() or symbol.is_imported()):
                bound.add(symbol.get_name())
                if symbol.is_imported():
                    names.add(symbol.get_name())
    return frozenset(names - bound), frozenset(names & bound), frozenset(bound)


def _symbols(table):
    """A symtable scope's symbols, made from its own flags: get_symbols() looks through every
    child scope for each name (for is_namespace, which nothing here asks), so a program of many
    names and many lambdas cost seconds (red team round 36, C1: 0.65 s a 47 KB proposal)."""
    module = table.get_type() == "module"
    return [symtable.Symbol(name, flags, module_scope=module)
            for name, flags in table._table.symbols.items()]


def _names_read(text):
    """-> (the names an input's text reads from the namespace it runs in, f included, not a
    lambda's parameters nor a comprehension's targets (round 35, A03: `[f for f in range(3)]`);
    the names it binds there itself, by a walrus). symtable: the compiler's own scopes."""
    call = next(name for n in itertools.count() if (name := f"_call{n}") not in text)
    try:
        tables = [symtable.symtable(f"{call}(\n{text}\n)", "<input>", "eval")]
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise Invalid(f"does not parse: {type(e).__name__}") from None
    read, binds = set(), set()
    while tables:
        table = tables.pop()
        tables += table.get_children()
        top = table.get_type() == "module"
        for symbol in _symbols(table):
            if top or symbol.is_global():
                if symbol.is_referenced():
                    read.add(symbol.get_name())
                if symbol.is_assigned():
                    binds.add(symbol.get_name())
    return read - {call}, binds


def imports_for(imports, program):
    """-> (a teacher's imports line less every import of a name `program` (a code_f student's)
    binds anywhere, the names left out): the line runs before the student's program, and a name
    the teacher imports as a module but never uses (`import math as g, math as memo`) made the
    student's own helper g or table memo "a module used as a value" (red team round 13, A05), a
    local `count[c] = 1` under a teacher's unused `from itertools import count` "modifies an
    imported module" (round 41, B1: a teacher lever, kept by round 40's import for a name the
    student binds only inside a function). Where the student reads such a name without binding
    it, the teacher's import stays; where it reads one left out, verify.grade voids the attempt
    (round 40, R1; round 41, B3)."""
    if not imports:
        return imports, set()
    mine = _bindings(nodes(parse(program)))[1]
    lines, left = [], set()
    for node in parse(imports).body:
        left.update(_binds(alias)[0] for alias in node.names if _binds(alias)[0] in mine)
        node.names = [alias for alias in node.names if _binds(alias)[0] not in mine]
        if node.names:
            lines.append(ast.unparse(node))
    return "\n".join(lines), left


def prepare(program, room=0):
    """prepare_program -> (program, imports, the top-level modules it imports). The program
    returned is the one screened: renamed first, then parsed and screened as it will run; its
    imports line is screened too (a code_o answer runs with it). room: chars the verifier put
    before it (a code_f student's program after the teacher's imports and its own docstring: red
    team round 40, R2, a right program of 17,079 chars was "longer than 50000")."""
    if not isinstance(program, str) or not program.strip():
        raise Invalid("empty program")
    if len(program) > MAX_PROGRAM + room:
        raise Invalid(f"program longer than {MAX_PROGRAM} chars")
    _check_coding(program)
    tree = parse(program)
    entry = _entry(tree)
    if entry.name != "f":
        name = entry.name
        program = _rename_to_f(program, name)
        # the renamed text must read as the program with only the entry's name changed (red team
        # round 30, A01/A08: a keyword `dict(g=x)`, a method of that name in a class or a name in
        # an f-string were renamed too, or not: a code_o output not stock's, right programs wrong)
        expected = ast.dump(_entry_read_as_f(tree, name))
        tree = parse(program)
        entry = _entry(tree)
        if entry.name != "f" or ast.dump(tree) != expected:
            raise Invalid(f"the entry function could not be renamed to f (its name {name} is "
                          "also used as something else than that function: name it f)")
    if isinstance(entry, ast.AsyncFunctionDef):
        raise Invalid("the entry function is async")
    import_nodes = []
    for node in check(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            import_nodes.append(node)
    _keep(program, "exec", tree)
    imports, modules = _imports_text(import_nodes, {id(node) for node in _own_nodes(tree.body)})
    if imports:
        screened(imports)
    return program, imports, modules


# PEP 263's declaration, as python3 looks for it on a file's first two lines
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)


def _check_coding(program):
    """Raise Invalid for a coding declaration other than utf-8's: a program is the text of a UTF-8
    file, which python3 would decode in the declared codec ('é' two latin-1 chars), where a str
    compiled here ignores it (red team round 29, A01/A05: 36 of 36 right code_i answers graded
    wrong, a code_o output not stock's)."""
    for line in re.split("\r\n|\r|\n", program, maxsplit=2)[:2]:
        found = _CODING.match(line)
        if not found:
            continue
        name = found.group(1)
        try:
            utf8 = codecs.lookup(name).name == "utf-8"
        except LookupError:
            utf8 = False
        # python3's own spelling rule: utf-8-anything is utf-8
        if not (utf8 or name[:12].lower().replace("_", "-").startswith("utf-8-")):
            raise Invalid(f"a coding declaration other than utf-8 ({name})")


def _entry_read_as_f(tree, name):
    """The tree (changed in place) with the entry function's name `name` read as f: its def at the
    top level and every Name node of it."""
    for node in nodes(tree):
        if type(node) is ast.Name and node.id == name:
            node.id = "f"
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            node.name = "f"
    return tree


def _entry(tree):
    """The entry function: the top-level def named f, else the only top-level def. Raises
    Invalid."""
    defs = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs.append(node)
    for node in defs:
        if node.name == "f":
            return node
    if not defs:
        raise Invalid("no top-level function")
    if len(defs) > 1:
        raise Invalid("several top-level functions and none is named f")
    return defs[0]


def _imports_text(import_nodes, top):
    """A program's Import/ImportFrom nodes -> (the import statements of its module's scope (ids in
    `top`: the top level and the blocks there, `try:` or `if`, never a function's or a class's:
    a code_o answer reads `fractions` a top-level `try: import fractions` bound, red team round 36,
    B2), one a line without repeats, then REPR_NAMES's
    line for each module imported in any form that has one; the top-level modules it imports).
    Raises Invalid for an import that binds a builtin's name, or a name of REPR_NAMES to anything
    but itself: the imports line runs before a code_o answer and a code_f student's program, where
    `from math import prod as sum` (even in a helper never called) would change what the shown
    output or the student's code means."""
    lines, modules = [], set()
    for node in import_nodes:
        if id(node) in top:
            lines.append(ast.unparse(node))
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    _exists(node.module, alias.name)
        for alias in node.names:
            name = _binds(alias)[0]
            if name in _BUILTIN_NAMES:
                raise Invalid(f"an import binds {name}, a builtin's name")
            # before a code_f student's program: its recursive f would read as the module
            if name == "f":
                raise Invalid("an import binds f, the entry's name")
            if isinstance(node, ast.ImportFrom):
                modules.add(node.module.split(".")[0])
                source = (node.module, alias.name)
            else:
                modules.add(alias.name.split(".")[0])
                source = (alias.name, None)
            if _REPR_SOURCES.get(name, source) != source:
                module, attr = _REPR_SOURCES[name]
                raise Invalid(f"an import binds {name} to something other than {module}.{attr}")
    for module in sorted(modules):
        if module in REPR_NAMES:
            lines.append(REPR_NAMES[module])
    return "\n".join(dict.fromkeys(lines)), modules


def _rename_to_f(program, name):
    """Rename the entry function `name` to f on the token stream, so comments and layout stay:
    every NAME token that Python reads as `name` (in NFKC: fib with the ligature fi is fib, red
    team round 29, A02) and that does not follow a dot, at the spans tokenize gives, on the lines
    tokenize read (split at "\\n" only: str.splitlines also splits at \\x0c, \\x1c, \\u2028, ...,
    which a comment may hold). Raises Invalid when `f` is used already."""
    lines, spots, previous = io.StringIO(program).readlines(), [], None
    try:
        tokens = quiet(list, tokenize.generate_tokens(io.StringIO(program).readline))
    except (tokenize.TokenError, SyntaxError, ValueError) as e:
        raise Invalid(f"does not tokenize: {type(e).__name__}") from None
    for token in tokens:
        after_dot = previous is not None and previous.string == "."
        read = token.string
        if token.type == tokenize.NAME and not read.isascii():
            read = unicodedata.normalize("NFKC", read)
        if token.type == tokenize.NAME and read in (name, "f") and not after_dot:
            if read == "f":
                raise Invalid("the name f is already used for something else")
            spots.append((token.start, token.end[1]))
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token
    for (row, col), end in reversed(spots):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + "f" + line[end:]
    return "".join(lines)


# what a child evaluates an input that is not a literal with, in place of f: (args, kwargs)
PACK = "(lambda *args, **kwargs: (args, kwargs))"


def arguments(inputs):
    """Input text (an argument list, may span lines) -> (encoding, None): the plain-data encoding of
    (args, kwargs) when every argument is a literal (read here by ast.literal_eval: nothing runs);
    else (None, source): the screened text of an expression a child evaluates (with the program, f
    included, in scope, as AZR allows `f(3) + f(33)`) to (args, kwargs). Either way f itself is
    later called on decoded plain data, in validation and grading alike. Raises Invalid."""
    _short_text(inputs, "input")
    source = f"f(\n{inputs}\n)"
    # parsed, not screened: a literal never runs, and what runs otherwise is the pack text
    tree = parse(source, "eval")
    call = tree.body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "f"):
        raise Invalid("input is not an argument list")
    # the compiler's check, which the parser leaves to it (`x=1, x=3` read as x=3: red team round
    # 27, A05; stock Python raises SyntaxError)
    names = [keyword.arg for keyword in call.keywords if keyword.arg is not None]
    if len(names) != len(set(names)):
        raise Invalid("input repeats a keyword argument")
    try:
        args = []
        for node in call.args:
            args.append(_literal_node(node))
        kwargs = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                raise ValueError("**kwargs")
            kwargs[keyword.arg] = _literal_node(keyword.value)
    except ValueError:
        pack = PACK + source[1:]
        screened(pack, "eval")
        return None, pack
    return plain((tuple(args), kwargs), "input"), None


def answer_value(answer):
    """A code_o answer (an expression) -> (encoding, None) for a literal (read here, nothing runs),
    else (None, its screened source, evaluated by a child with the program's imports). Raises
    Invalid."""
    _short_text(answer, "answer")
    _check_brackets(answer)
    # the answer alone is an expression, as eval reads one: inside `(\n...\n)` alone, `1\n+ 1`,
    # `x := 2` and `2\` were values (red team round 31, A03)
    parse(answer.strip(" \t\r\n"), "eval")
    source = f"(\n{answer}\n)"
    try:
        # a literal never runs: read, not screened ('fedmro' or a key 'co_names' is an answer)
        return plain(_literal_node(parse(source, "eval").body), "answer"), None
    except ValueError:
        screened(source, "eval")
        return None, source


def _check_brackets(text):
    """Raise Invalid when `text` closes a bracket it did not open: read inside `(\\n...\\n)`,
    `1), (2` (Python's SyntaxError) was the tuple (1, 2) (red team round 29, A03). Token by token,
    up to any error of the tokenizer's (round 30, A03: past the stray `)`, an unindent raised
    before a list of them was looked at)."""
    depth = 0
    with silenced():
        try:
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                if token.type == tokenize.OP and token.string in ")]}":
                    depth -= 1
                    if depth < 0:
                        raise Invalid(f"closes a bracket it did not open (line {token.start[0]})")
                elif token.type == tokenize.OP and token.string in "([{":
                    depth += 1
        # an unclosed bracket or string at the end: the parse that follows says what is wrong
        except (tokenize.TokenError, SyntaxError, ValueError):
            pass


def _short_text(text, what):
    """Raise Invalid unless `text` is a non-blank str of at most MAX_INPUT chars."""
    if not isinstance(text, str) or not text.strip():
        raise Invalid(f"empty {what}")
    if len(text) > MAX_INPUT:
        raise Invalid(f"{what} longer than {MAX_INPUT} chars")


def _literal_node(node):
    """The value of a literal's AST node (ast.literal_eval: builds, runs nothing); ValueError for
    anything else (names, calls, operators but the unary and complex ones, *args)."""
    try:
        return quiet(ast.literal_eval, node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise ValueError(f"not a literal ({type(e).__name__})") from None


def plain(value, what):
    """A value read here -> its encoding as plain data (what a child's JSON line parses to). Raises
    Invalid when it cannot be encoded (too large, too deep)."""
    parts = []
    try:
        encode(value, parts, [MAX_UNITS])
    except (ValueError, RecursionError) as e:
        raise Invalid(f"{what}: {e}") from None
    return json.loads("".join(parts))
