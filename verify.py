"""The AZR task family (design §2): prompts (their text is in prompts.py), response parsers, proposal
validity, grading, program complexity, the AZR seed tally and a command-line interface. Every piece
of model text that runs, runs in sandbox.py's worker pool (design §3).

  python verify.py validate --task code_o < proposals.jsonl  # {"program", "input"} -> {"valid",
                                                             # "reason", "output", "gold"}
  python verify.py grade --task code_f < attempts.jsonl      # -> {"correct", "reason"}, a line each
  python verify.py layers                                    # sandbox layers here, on/off and why

Tasks (AZR ids): code_o deduction (predict the output), code_i abduction (find an input), code_f
induction (write f from 5 shown pairs and a message; graded on the 5 hidden ones). Prompts
(prompts.py) keep AZR's structure (R1 wrapper ending in "Assistant: <think>", fences, K references,
input_k/output_k fences) in our own words, without AZR's swapped difficulty bullet (docs/azr.md §9.12).
A response must match `...</think> <answer>...</answer>`; teacher code = first python/untagged
fence, input = first `input` fence, code_f keeps the last 10 `input` fences and a `message` fence
(or <message> tag); student answers = the last fence of their kind (code_i/code_o fall back to the
whole answer, as AZR).

Validity [ours where it fixes docs/azr.md §9]: parses; entry = `f`, or the only top-level def (renamed
to f on the token stream); helpers, nested defs and classes allowed; passes the static screen; an
input of 8+ chars is not pasted into the program; two runs in two separately started interpreters
(different hash seeds) succeed within the time limit and agree on the repr and encoding; the value
is plain (builtin, collections, fractions, decimal types), its repr has at most 2,000 chars and
evaluates back to an equal value with the program's imports in scope (plus
Counter/OrderedDict/deque, Fraction, Decimal when their module is imported); code_f also: >= 10
input fences, a message that is non-empty and does not contain the program, >= 2 distinct outputs.
Multi-line inputs work (calls are compiled as `f(\n<input>\n)` expressions, never pasted on one
line).

Golds and grading [ours; design §3 "verdicts are decided outside the untrusted process"]: a valid
proposal gets "gold", the canonical encoding of its value(s) (encoding.py; plain JSON data,
stored with the problem). Children never see a gold: they run the answer and send back its value's
encoding; the parent decodes both and compares with Python's == (AZR's semantics). code_o: the
answer evaluated with the program's imports but not f; code_i: the answer's arguments evaluated
(plain values only; f in scope, as AZR), then f on them in a fresh child (so nothing the answer did,
such as claim f's value, which the prompt shows, survives); code_f: the student's program on the
hidden inputs (the teacher program's imports prepended). Problems from before golds: add_golds.

Static screen (layer 1): banned imports (AZR's list + the design's, dotted components), banned names
(eval, exec, open, vars, ... unless the program binds the name), escape hatches (__globals__,
__bases__, ... plus __dict__, __class__, __setattr__, __delattr__ [ours]) as attributes, names or
inside strings, getattr & co. only with a constant non-dunder name, no assignment or deletion
through an imported name or a call (no monkey-patching of library classes that grading compares
with), getattr & co. and imported modules only used directly (no aliases), no locals(), no banned
names imported with `from` or read by `match` class patterns. A validity rule and a speed bump, not
a wall: no guarantee rests on it; `execute` (benchmark code, which imports os/sys freely) skips it.
Layers 2-7: sandbox.py docstring and `python verify.py layers`; require_isolation stops a trainer
without filesystem isolation.
"""
import argparse
import ast
import io
import json
import math
import re
import sys
import tokenize
import warnings

from collections import Counter, OrderedDict, defaultdict, deque
from decimal import Decimal

import prompts
import sandbox
# the canonical encoding of values (a child's results and the golds), decoded here to judge
from encoding import MAX_UNITS, decode, encode

TASKS = ("code_i", "code_o", "code_f")
N_INPUTS = 10            # code_f: inputs a teacher writes; the student sees the first half
MAX_REPR = 2000          # chars of an output repr (AZR truncates at 400 instead)
MAX_PROGRAM = 50_000     # chars of a program; longer ones are invalid
MIN_PASTED = 8           # an input this long or longer must not appear verbatim in the program
MAX_INPUT = 20_000       # chars of an input or a code_o answer
MAX_INPUTS = 64          # inputs of a code_f problem
# AZR's list, the design's additions, then ours (the C twins of banned modules, modules that run code
# given as a string or reach sys.modules): what teacher prompts list
BANNED_SHOWN = set(("logging random multiprocessing pebble subprocess threading datetime time "
                    "hashlib hmac bcrypt calendar os sys socket shutil ctypes importlib signal "
                    "asyncio pathlib io builtins gc inspect secrets uuid tempfile glob pickle "
                    "marshal resource posix _io _socket _thread _signal _posixsubprocess _ctypes "
                    "fcntl pty mmap code codeop runpy timeit cProfile profile pdb bdb trace "
                    "pkgutil zipimport __main__ sandbox verify").split())
# [ours] and file readers, frame walkers and the like of the stdlib, screened but not listed (a
# prompt is the same length as before)
BANNED_IMPORTS = set(("compileall dbm ensurepip fileinput ftplib grp http imaplib linecache "
                      "mailbox poplib pwd py_compile select selectors shelve site smtplib "
                      "socketserver sqlite3 sysconfig tarfile termios traceback tty urllib venv "
                      "webbrowser xmlrpc zipapp zipfile").split()) | BANNED_SHOWN
# [ours] attributes: banned modules reached through others (typing.sys.modules, codecs.open), then
# the stdlib's attribute readers, frame walkers and file readers
BANNED_ATTRS = BANNED_IMPORTS | {"modules", "_sys", "_os", "ctypeslib", "open", "attrgetter",
                                 "methodcaller", "Formatter", "get_field", "bltn_open",
                                 "walk_stack", "walk_tb", "capture_locals", "f_builtins",
                                 "getline", "getlines", "FileIO"}
BANNED_NAMES = set(("open exec eval compile __import__ input globals locals breakpoint exit quit "
                    "vars").split())
ESCAPES = set(("__builtins__ __subclasses__ __bases__ __base__ __mro__ __globals__ __code__ "
               "__closure__ __getattribute__ __loader__ __spec__ f_globals f_locals f_back "
               "f_builtins tb_frame gi_frame cr_frame ag_frame __dict__ __class__ __setattr__ "
               "__delattr__ __self__").split())
ATTR_CALLS = {"getattr", "setattr", "delattr", "hasattr"}
_ESCAPE_RE = re.compile("|".join(sorted(ESCAPES)))
# [ours] classes whose repr is their bare name: in scope for round-trip checks and answers whenever
# the program imports their module in any form (`import collections` + a Counter output, as in one
# AZR seed)
REPR_NAMES = {"collections": "from collections import Counter, OrderedDict, deque, defaultdict",
              "fractions": "from fractions import Fraction",
              "decimal": "from decimal import Decimal"}

# ------------------------------------------------------------------------------------------ prompts


def _task(task):
    # a caller's bug, not model text: fail loudly
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")
    return task


def teacher_prompt(task, references, program=None):
    """Full teacher prompt (the text is in prompts.py). code_i/code_o: `references` = archive
    problems {"program","input","output"} (K of them, may be empty); code_f: `program` = the archive
    program to write inputs for."""
    return prompts.teacher_prompt(_task(task), references, program, BANNED_SHOWN, N_INPUTS)


def student_prompt(task, problem):
    """Full student prompt (the text is in prompts.py). code_i/code_o: problem
    {"program","input","output"}; code_f: {"program","inputs","outputs","message"}, of which the
    first half of the pairs is shown (the rest is hidden for grading)."""
    return prompts.student_prompt(_task(task), problem, BANNED_SHOWN)


# a markdown fence, as the prompts write them (tinyworld.py builds its transcripts with it)
fence = prompts.fence
# the old private name, still used by tinyworld.py
_fence = prompts.fence


# ------------------------------------------------------------------------------------------ parsers

_FORMAT = re.compile(r"(?s).*?</think>\s*<answer>.*?</answer>")
_ANSWER = re.compile(r"(?s)<answer>(.*?)</answer>")
_FENCES = re.compile(r"(?s)```[ \t]*([\w-]*)[ \t]*\n(.*?)```")


def _answer(response):
    """Content of the last <answer>...</answer>, or None when the response breaks the format."""
    if not isinstance(response, str) or not _FORMAT.match(response):
        return None
    return _ANSWER.findall(response)[-1]


def _fences(text, tags):
    """The bodies of the fences in `text` whose tag (lower-cased) is one of `tags`, in order."""
    bodies = []
    for tag, body in _FENCES.findall(text):
        if tag.lower() in tags:
            bodies.append(body.strip("\n").rstrip())
    return bodies


def parse_teacher(task, response):
    """Generated continuation after the prompt -> {"program","input"} (code_i/code_o) or
    {"inputs","message"} (code_f), or None for a format error."""
    answer = _answer(response)
    if answer is None:
        return None
    if _task(task) == "code_f":
        inputs = [x.strip() for x in _fences(answer, {"input"})]
        messages = _fences(answer, {"message"})
        if not messages:
            messages = re.findall(r"(?s)<message>(.*?)</message>", answer)
        if len(inputs) < N_INPUTS or not messages or not messages[0].strip():
            return None
        return {"inputs": inputs[-N_INPUTS:], "message": messages[0].strip()}
    programs = _fences(answer, {"python", "py", ""})
    inputs = _fences(answer, {"input"})
    if not programs or not inputs or not programs[0].strip() or not inputs[0].strip():
        return None
    return {"program": programs[0], "input": inputs[0].strip()}


def parse_student(task, response):
    """Generated continuation -> the answer text (an output, an input, or a program), or None
    (format error)."""
    answer = _answer(response)
    if answer is None:
        return None
    if _task(task) == "code_f":
        programs = _fences(answer, {"python", "py", ""})
        if not programs or not programs[-1].strip():
            return None
        return programs[-1]
    if task == "code_o":
        fenced = _fences(answer, {"output"})
    else:
        fenced = _fences(answer, {"input"})
    # AZR's last resort: the whole answer is the input/output
    text = answer
    if fenced:
        text = fenced[-1]
    return text.strip() or None


# ------------------------------------------------------------------ static screen and normalisation

class Invalid(Exception):
    """A proposal or attempt rejected before it runs; the message is the reason."""


def _root(node):
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node


def _nodes(tree):
    """All nodes of a tree but the Load/Add/... markers (a third of them; the screen reads them
    through their parent), iteratively (model text can nest past the recursion limit); ~2x faster
    than ast.walk."""
    out, stack, node_type = [], [tree], ast.AST
    while stack:
        node = stack.pop()
        out.append(node)
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                stack += [v for v in value if isinstance(v, node_type)]
            elif isinstance(value, node_type) and not isinstance(value, _MARKERS):
                stack.append(value)
    return out


def _screen(tree):
    """Layer 1: raise Invalid for banned imports, names, escape hatches and monkey-patching;
    returns the nodes."""
    nodes = _nodes(tree)
    imported, bound, modules, direct = _bindings(nodes)
    _check_uses(nodes, imported, bound, modules, direct)
    return nodes


def _bindings(nodes):
    """The screen's first pass: raise Invalid for a banned import; -> (names imported, names the
    program binds, modules imported with `import`, ids of the nodes used directly: `x` in `x.attr`
    and in `x(...)`)."""
    imported, bound, modules, direct = set(), set(), set(), set()
    # exact types (ast.parse output), most frequent first
    for node in nodes:
        kind = type(node)
        if kind is ast.Name:
            if type(node.ctx) is not ast.Load:
                bound.add(node.id)
        elif kind is ast.Attribute:
            # a module's name as `module.x` (not an alias of it)
            direct.add(id(node.value))
        elif kind is ast.Call:
            # getattr & co. as `getattr(...)` (not an alias of it)
            direct.add(id(node.func))
        elif kind is ast.arg:
            bound.add(node.arg)
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            bound.add(node.name)
        elif kind in (ast.Import, ast.ImportFrom):
            if kind is ast.ImportFrom and (node.level or not node.module):
                raise Invalid("relative import")
            words = []
            if kind is ast.ImportFrom:
                words.append(node.module)
            for alias in node.names:
                words.append(alias.name)
                imported.add(alias.asname or alias.name.split(".")[0])
                if kind is ast.Import:
                    modules.add(alias.asname or alias.name.split(".")[0])
                name = alias.name
                if kind is not ast.ImportFrom:
                    continue
                if name in BANNED_ATTRS or name in ESCAPES or name in ATTR_CALLS:
                    raise Invalid(f"banned import: {name}")
            # every dotted component: `import xml.os` is as banned as `import os`
            parts = set()
            for module in words:
                parts.update(module.split("."))
            for word in parts & BANNED_IMPORTS:
                raise Invalid(f"banned import: {word}")
    return imported, bound, modules, direct


def _check_uses(nodes, imported, bound, modules, direct):
    """The screen's second pass, over what _bindings found: raise Invalid for a banned name,
    attribute or string, getattr & co. or a module used other than directly, an attribute call with
    a name that is not a constant allowed one, and monkey-patching."""
    for node in nodes:
        kind = type(node)
        if kind is ast.Name:
            if node.id in ESCAPES or (node.id in BANNED_NAMES and node.id not in bound):
                raise Invalid(f"banned name: {node.id}")
            if node.id in ATTR_CALLS and node.id not in bound and id(node) not in direct:
                raise Invalid(f"{node.id} only as a direct call")
            if node.id in modules and id(node) not in direct:
                raise Invalid(f"the module {node.id} used as a value")
        elif kind is ast.Attribute:
            if node.attr in ESCAPES or node.attr in BANNED_ATTRS:
                raise Invalid(f"banned attribute: {node.attr}")
        # `case str(__class__=c)` reads an attribute too
        elif kind is ast.MatchClass:
            for name in node.kwd_attrs:
                if name in ESCAPES or name in BANNED_ATTRS:
                    raise Invalid(f"banned attribute: {name}")
        elif kind is ast.Constant:
            if isinstance(node.value, str) and _ESCAPE_RE.search(node.value):
                found = _ESCAPE_RE.search(node.value).group()
                raise Invalid(f"banned name in a string: {found}")
        elif kind is ast.Call:
            func = node.func
            if isinstance(func, ast.Name) and func.id in ATTR_CALLS and func.id not in bound:
                _check_attribute_call(node, imported)
        elif kind in (ast.Assign, ast.Delete, ast.AugAssign, ast.AnnAssign):
            _check_targets(node, imported)


def _check_attribute_call(node, imported):
    """getattr & co. only with a constant attribute name that is neither a dunder nor banned
    (getattr(codecs, "sys")); setattr and delattr never on an imported module."""
    name = None
    if len(node.args) > 1:
        name = node.args[1]
    constant = isinstance(name, ast.Constant) and isinstance(name.value, str)
    if not constant or name.value.startswith("__") or name.value in BANNED_ATTRS:
        raise Invalid(f"{node.func.id} needs a constant, allowed attribute name")
    root = _root(node.args[0])
    if node.func.id in ("setattr", "delattr") and isinstance(root, ast.Name):
        if root.id in imported:
            raise Invalid("modifies an imported module")


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


def quiet(parse, *args, **kwargs):
    """parse(*args, **kwargs) (ast.parse, compile, tokenize ... of model text) with the warnings
    it raises dropped: `1if x`, `"\\d"`, `x is 1` warn at parse or compile time, and model text
    must never print on the console, where it reads like an error of ours."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse(*args, **kwargs)


def _parse(text, mode="exec"):
    try:
        return quiet(ast.parse, text, mode=mode)
    except SyntaxError as e:
        raise Invalid(f"syntax error: {e.msg} (line {e.lineno})")
    except (ValueError, RecursionError, MemoryError) as e:
        raise Invalid(f"does not parse: {type(e).__name__}")


def prepare_program(program):
    """-> (program with its entry function renamed to f, text of all its import statements). Raises
    Invalid."""
    program, imports, _ = _prepare(program)
    return program, imports


def _prepare(program):
    """prepare_program -> (program, imports, the top-level modules it imports)."""
    if not isinstance(program, str) or not program.strip():
        raise Invalid("empty program")
    if len(program) > MAX_PROGRAM:
        raise Invalid(f"program longer than {MAX_PROGRAM} chars")
    tree = _parse(program)
    entry = _entry(tree)
    if isinstance(entry, ast.AsyncFunctionDef):
        raise Invalid("the entry function is async")
    import_nodes = []
    for node in _screen(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            import_nodes.append(node)
    imports, modules = _imports_text(import_nodes)
    if entry.name == "f":
        return program, imports, modules
    return _rename_to_f(program, entry.name), imports, modules


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


def _imports_text(nodes):
    """A program's Import/ImportFrom nodes -> (its import statements, one a line without repeats,
    then REPR_NAMES's line for each module imported in any form that has one; the top-level modules
    it imports)."""
    lines, modules = [], set()
    for node in nodes:
        lines.append(ast.unparse(node))
        for alias in node.names:
            if isinstance(node, ast.ImportFrom):
                modules.add(node.module.split(".")[0])
            else:
                modules.add(alias.name.split(".")[0])
    for module in sorted(modules):
        if module in REPR_NAMES:
            lines.append(REPR_NAMES[module])
    return "\n".join(dict.fromkeys(lines)), modules


def _rename_to_f(program, name):
    """Rename the entry function `name` to f on the token stream, so comments and layout stay:
    every NAME token `name` that does not follow a dot. Raises Invalid when `f` is used already."""
    lines, spots, previous = program.splitlines(keepends=True), [], None
    tokens = quiet(list, tokenize.generate_tokens(io.StringIO(program).readline))
    for token in tokens:
        after_dot = previous is not None and previous.string == "."
        if token.type == tokenize.NAME and token.string in (name, "f") and not after_dot:
            if token.string == "f":
                raise Invalid("the name f is already used for something else")
            spots.append(token.start)
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token
    for row, col in reversed(spots):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + "f" + line[col + len(name):]
    return "".join(lines)


# what a child evaluates an input that is not a literal with, in place of f: (args, kwargs)
PACK = "(lambda *args, **kwargs: (args, kwargs))"


def arguments(inputs):
    """Input text (an argument list, may span lines) -> (encoding, None): the plain-data encoding of
    (args, kwargs) when every argument is a literal (read here by ast.literal_eval: nothing runs);
    else (None, source): the screened text of an expression a child evaluates (with the program, f
    included, in scope, as AZR allows `f(3) + f(33)`) to (args, kwargs). Either way f itself is
    later called on decoded plain data, in validation and grading alike. Raises Invalid."""
    if not isinstance(inputs, str) or not inputs.strip():
        raise Invalid("empty input")
    if len(inputs) > MAX_INPUT:
        raise Invalid(f"input longer than {MAX_INPUT} chars")
    source = f"f(\n{inputs}\n)"
    tree = _parse(source, "eval")
    call = tree.body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "f"):
        raise Invalid("input is not an argument list")
    _screen(tree)
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
        _screen(_parse(pack, "eval"))
        return None, pack
    return _plain((tuple(args), kwargs), "input"), None


def answer_value(answer):
    """A code_o answer (an expression) -> (encoding, None) for a literal (read here, nothing runs),
    else (None, its screened source, evaluated by a child with the program's imports). Raises
    Invalid."""
    if not isinstance(answer, str) or not answer.strip():
        raise Invalid("empty answer")
    if len(answer) > MAX_INPUT:
        raise Invalid(f"answer longer than {MAX_INPUT} chars")
    source = f"(\n{answer}\n)"
    tree = _parse(source, "eval")
    _screen(tree)
    try:
        return _plain(_literal_node(tree.body), "answer"), None
    except ValueError:
        return None, source


def _literal_node(node):
    """The value of a literal's AST node (ast.literal_eval: builds, runs nothing); ValueError for
    anything else (names, calls, operators but the unary and complex ones, *args)."""
    try:
        return quiet(ast.literal_eval, node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise ValueError(f"not a literal ({type(e).__name__})") from None


def _plain(value, what):
    """A value read here -> its encoding as plain data (what a child's JSON line parses to). Raises
    Invalid when it cannot be encoded (too large, too deep)."""
    parts = []
    try:
        encode(value, parts, [MAX_UNITS])
    except (ValueError, RecursionError) as e:
        raise Invalid(f"{what}: {e}") from None
    return json.loads("".join(parts))


# ----------------------------------------------------------------------------- validity and grading


def _request(item, keys):
    if not isinstance(item, dict):
        raise Invalid("bad request: not an object")
    for key, kind in keys.items():
        if not isinstance(item.get(key), kind):
            raise Invalid(f"bad request: missing or mistyped key {key!r}")


def _proposal(task, p):
    """One proposal -> the entry _call_f runs: the normalised program, an argument list per input
    (an encoding, or None with its pack text in "packs"), the names its output reprs may use.
    Raises Invalid."""
    if task == "code_f":
        _request(p, {"program": str, "inputs": list, "message": str})
        inputs = p["inputs"]
        if not N_INPUTS <= len(inputs) <= MAX_INPUTS or not all(isinstance(x, str) for x in inputs):
            raise Invalid(f"need {N_INPUTS} inputs (at most {MAX_INPUTS})")
        program_words = " ".join(p["program"].split())
        if not p["message"].strip() or program_words in " ".join(p["message"].split()):
            raise Invalid("message is empty or contains the program")
    else:
        _request(p, {"program": str, "input": str})
        inputs = [p["input"]]
    # what reaches a prompt must be text a tokenizer can encode
    for text in [p["program"], p.get("message", "")] + inputs:
        _utf8(text)
    program, imports, modules = _prepare(p["program"])
    pasted = [x.strip() for x in inputs if len(x.strip()) >= MIN_PASTED and x.strip() in program]
    if pasted:
        raise Invalid("the input appears verbatim in the program")
    entry = {"code": program, "pack_code": program, "args": [], "packs": [], "modules": modules}
    for k, x in enumerate(inputs):
        encoding, pack = arguments(x)
        entry["args"].append(encoding)
        if pack is not None:
            entry["packs"].append((k, pack))
    return entry


def _utf8(text):
    """Raise Invalid unless `text` is valid UTF-8 text (a lone surrogate is not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid("not valid UTF-8 text (a lone surrogate)") from None


def _call_f(entries, families, timeout):
    """f on every argument list, as validation and grading both run it. An entry: {"code": the
    program f comes from, "args": an encoding of (args, kwargs) per call, None where the input is
    not a literal, "packs": [(k, text)] for those, "pack_code": the program they are evaluated
    with}. Step 1 (only for inputs that are not literals): the pack texts evaluated in a child per
    family, which must agree -> the missing encodings. Step 2: f called on every argument list, in
    a fresh child per family. -> per entry, one run per family (a failed step 1 fails them all)."""
    first, owners = [], []
    for n, e in enumerate(entries):
        if not e["packs"]:
            continue
        for family in families:
            first.append({"code": e["pack_code"], "calls": [t for _, t in e["packs"]],
                          "family": family, "timeout": timeout})
        owners.append(n)
    failed = {}
    runs = sandbox.run(first)
    width = len(families)
    for j, n in enumerate(owners):
        error = _fill_arguments(entries[n], runs[j * width:(j + 1) * width])
        if error:
            failed[n] = sandbox.failed(error)
    second, owners = [], []
    for n, e in enumerate(entries):
        if n in failed:
            continue
        for family in families:
            second.append({"code": e["code"], "args": e["args"], "family": family,
                           "timeout": timeout})
        owners.append(n)
    runs = sandbox.run(second)
    out = {}
    for j, n in enumerate(owners):
        out[n] = runs[j * width:(j + 1) * width]
    for n, run in failed.items():
        out[n] = [run] * width
    return [out[n] for n in range(len(entries))]


def _fill_arguments(entry, runs):
    """Step 1's runs (one per family) of an entry -> "" after filling in its missing argument
    lists, else why not (an error, the families disagree, not an argument list of plain data)."""
    for run in runs:
        if not run["ok"]:
            return run["error"]
    try:
        if any(run["values"] != runs[0]["values"] for run in runs):
            return "non-deterministic: the input evaluates differently in two runs"
    except RecursionError:
        return "malformed result"
    for (k, _), value in zip(entry["packs"], runs[0]["values"]):
        try:
            args, kwargs = decode(value)
        except (ValueError, TypeError):
            return "the input is not an argument list of plain values"
        if type(args) is not tuple or type(kwargs) is not dict or not all(map(str.isidentifier,
                                                                             kwargs)):
            return "the input is not an argument list of plain values"
        entry["args"][k] = value
    return ""


def _validity(task, a, b, modules):
    """The verdict on a proposal's two runs (decided here, on what the children sent) -> result
    keys. The outputs students see are the reprs of the decoded golds, made here."""
    if not a["ok"] or not b["ok"]:
        return {"reason": "error: " + (a["error"] or b["error"])}
    # plain JSON data from both: == is safe
    if a["values"] != b["values"]:
        return {"reason": "non-deterministic: two runs with different hash seeds disagree"}
    shown = []
    for encoding in a["values"]:
        try:
            shown.append(shown_output(encoding, modules))
        except Invalid as e:
            return {"reason": f"invalid output: {e}"}
    if task == "code_f" and len(set(shown)) < 2:
        return {"reason": "fewer than 2 distinct outputs"}
    if task == "code_f":
        return {"valid": True, "reason": "valid", "outputs": shown, "gold": a["values"]}
    return {"valid": True, "reason": "valid", "output": shown[0], "gold": a["values"][0]}


def _output_key(task):
    """The key of a problem's shown output: code_f has several ("outputs")."""
    if _task(task) == "code_f":
        return "outputs"
    return "output"


def validate(task, proposals, timeout=5.0):
    """Proposals -> [{"valid", "reason", "program", "output" (code_f: "outputs"), "gold"}]; each
    valid proposal ran twice, in two separately started interpreters, in parallel with the others.
    "output(s)": the repr string(s) students see, made here from the gold; "gold": the canonical
    encoding(s) of the value(s) grading compares with (code_f: one per input), plain JSON data
    (lists and strings), None unless valid. Never raises for bad model text."""
    key = _output_key(task)
    results, entries, owners = [], [], []
    for i, p in enumerate(proposals):
        program = None
        if isinstance(p, dict):
            program = p.get("program")
        results.append({"valid": False, "reason": "", key: None, "gold": None, "program": program})
        try:
            entries.append(_proposal(task, p))
            results[i]["program"] = entries[-1]["code"]
            owners.append(i)
        except Invalid as e:
            results[i]["reason"] = str(e)
    runs = _call_f(entries, (0, 1), timeout)
    for i, entry, (a, b) in zip(owners, entries, runs):
        try:
            results[i].update(_validity(task, a, b, entry["modules"]))
        # what a child sent does not parse: this item fails, alone
        except (ValueError, RecursionError, MemoryError):
            results[i]["reason"] = "error: malformed result"
    return results


def add_golds(task, problems, timeout=5.0):
    """Problems stored before golds were (no "gold" key: an old archive or checkpoint) -> the same
    list with "gold" filled in by validating each again; None in place of one that is no longer
    valid or whose output changed. Problems that have a "gold" come back unchanged, unrun."""
    key = _output_key(task)
    # what validate reads of a problem
    if task == "code_f":
        fields = ("program", "inputs", "message")
    else:
        fields = ("program", "input")
    out, todo = list(problems), []
    for i, p in enumerate(problems):
        if not isinstance(p, dict) or "gold" not in p:
            todo.append(i)
    proposals = []
    for i in todo:
        p = problems[i]
        if not isinstance(p, dict):
            p = {}
        proposals.append({k: p[k] for k in fields if k in p})
    for i, r in zip(todo, validate(task, proposals, timeout)):
        same = isinstance(problems[i], dict) and r[key] == problems[i].get(key)
        out[i] = None
        if r["valid"] and same:
            out[i] = dict(problems[i], gold=r["gold"])
    return out


def _attempt(task, a):
    """One attempt -> (what to run: an entry for _call_f, a code_o expression job, or None when
    the answer is a literal read here; its value(s) if known already; the slice of values compared;
    the gold encodings they must equal). The job holds no gold. Raises Invalid."""
    _request(a, {"answer": str})
    if "gold" not in a:
        raise Invalid("bad request: no gold encoding (a problem from before golds were stored; "
                      "re-validate it with verify.add_golds)")
    if task == "code_f":
        _request(a, {"program": str, "inputs": list, "outputs": list, "gold": list})
        n = len(a["inputs"])
        if not 2 <= n <= MAX_INPUTS or len(a["outputs"]) != n or len(a["gold"]) != n:
            raise Invalid("bad request: inputs, outputs and gold must be lists of the same length "
                          f">= 2 and <= {MAX_INPUTS}")
        teacher, gold_imports, _ = _prepare(a["program"])
        student = _prepare(a["answer"])[0]
        # the teacher program's imports prepended (as AZR), screened as the one text that runs
        code = _prepare(gold_imports + "\n" + student)[0]
        entry = {"code": code, "pack_code": teacher, "args": [], "packs": []}
        for k, x in enumerate(a["inputs"]):
            if not isinstance(x, str):
                raise Invalid("bad request: inputs must be strings")
            encoding, pack = arguments(x)
            entry["args"].append(encoding)
            if pack is not None:
                entry["packs"].append((k, pack))
        # called on every input, in order, as in validation; the hidden half is compared
        return entry, None, slice(n // 2, n), a["gold"][n // 2:]
    _request(a, {"program": str, "input": str, "output": str, "gold": list})
    program, imports, _ = _prepare(a["program"])
    # code_o: the answer, with the program's imports in scope but not f
    if task == "code_o":
        encoding, source = answer_value(a["answer"])
        if source is None:
            return None, [encoding], slice(0, 1), [a["gold"]]
        job = {"code": imports, "calls": [source]}
        return job, None, slice(0, 1), [a["gold"]]
    # code_i: the answer's arguments, then f on them as plain data, as validation ran it
    encoding, pack = arguments(a["answer"])
    entry = {"code": program, "pack_code": program, "args": [encoding], "packs": []}
    if pack is not None:
        entry["packs"].append((0, pack))
    return entry, None, slice(0, 1), [a["gold"]]


def grade(task, attempts, timeout=5.0):
    """Attempts -> [{"correct", "reason"}], run in the sandbox in parallel and judged here. An
    attempt is a problem as validate made it ("program", "input"/"inputs", "output(s)", "gold";
    other keys ignored) plus "answer": code_o an output, code_i an input, code_f a program (run on
    every input, in order, as the teacher's was; graded on the hidden last half). Correct when each
    gold == the answer's value (Python's ==, as AZR, on values decoded here from plain data:
    builtin types only, so no always-equal object). A literal code_o answer is read here, without a
    run. `answer` None (a format error) scores False."""
    _task(task)
    results, entries, jobs, known = [], [], [], []
    for i, a in enumerate(attempts):
        results.append({"correct": False, "reason": ""})
        try:
            if isinstance(a, dict) and a.get("answer", "") is None:
                raise Invalid("no answer (format error)")
            work, values, compared, gold = _attempt(task, a)
        except Invalid as e:
            results[i]["reason"] = str(e)
            if not str(e).startswith("bad request"):
                results[i]["reason"] = f"invalid answer: {e}"
            continue
        if values is not None:
            known.append((i, {"ok": True, "values": values}, compared, gold))
        elif "calls" in work:
            jobs.append((i, dict(work, timeout=timeout), compared, gold))
        else:
            entries.append((i, work, compared, gold))
    runs = sandbox.run([job for _, job, _, _ in jobs])
    done = known + [(i, run, c, g) for (i, _, c, g), run in zip(jobs, runs)]
    runs = _call_f([e for _, e, _, _ in entries], (None,), timeout)
    done += [(i, run[0], c, g) for (i, _, c, g), run in zip(entries, runs)]
    for i, run, compared, gold in done:
        if not run["ok"]:
            results[i]["reason"] = "error: " + run["error"]
            continue
        values = run["values"][compared]
        correct = len(values) == len(gold) and all(equal(g, v) for g, v in zip(gold, values))
        results[i]["correct"] = correct
        results[i]["reason"] = "wrong answer"
        if correct:
            results[i]["reason"] = "correct"
    return results


# -------------------------------------------------------------------------- encodings, decided here

def shown_output(encoding, modules):
    """The repr students see of a value: made here, from the decoded gold with the real classes (so
    it is the value's true repr, whatever the program did to a class's __repr__) -> text. Raises
    Invalid when it would not evaluate back to an equal value with the program's imports in scope
    (`modules`: the top-level modules it imports; REPR_NAMES), as AZR's outputs must: nan or inf,
    a NaN Decimal, a defaultdict's factory, a Counter without collections imported, ...; or when it
    is longer than MAX_REPR chars or not valid UTF-8 text."""
    try:
        value = decode(encoding)
    except ValueError:
        raise Invalid("malformed result") from None
    in_scope = set()
    for module in modules:
        if module in REPR_NAMES:
            in_scope.update(name.strip() for name in REPR_NAMES[module].split("import")[1].split(","))
    _showable(value, in_scope)
    text = repr(value)
    if len(text) > MAX_REPR:
        raise Invalid(f"output repr longer than {MAX_REPR} chars")
    _utf8(text)
    return text


def _showable(value, in_scope):
    """Raise Invalid if the repr of `value` (decoded: exact builtin and collections / fractions /
    decimal types) would not evaluate back to an equal value with the names `in_scope`."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is float and not math.isfinite(v):
            raise Invalid("output holds nan or inf (its repr is not a literal)")
        if t is complex and not (math.isfinite(v.real) and math.isfinite(v.imag)):
            raise Invalid("output holds nan or inf (its repr is not a literal)")
        if t is int and v.bit_length() > 4 * MAX_REPR:
            raise Invalid(f"output repr longer than {MAX_REPR} chars")
        if t.__module__ in ("collections", "fractions", "decimal") and t.__name__ not in in_scope:
            raise Invalid(f"output repr needs {t.__name__}, which the program does not import")
        if t is Decimal and v.is_nan():
            raise Invalid("output holds a NaN Decimal (not equal to itself)")
        if t is defaultdict and v.default_factory is not None:
            raise Invalid("output is a defaultdict with a factory (its repr does not evaluate)")
        if t in (dict, OrderedDict, Counter, defaultdict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif t in (list, tuple, set, frozenset, deque):
            stack.extend(v)


def equal(gold, encoding):
    """AZR's verdict on one value: gold == value, Python's == on the two decoded values (dict and
    set order ignored, 1 == 1.0 == True, Counter == dict, list != tuple, nan != nan, -0.0 == 0.0).
    False for anything malformed."""
    try:
        return bool(decode(gold) == decode(encoding))
    except (ValueError, ArithmeticError, RecursionError, MemoryError, TypeError):
        return False


# ----------------------------------------------------------------------------------- benchmark code


def execute(jobs, timeout=5.0):
    """Generic sandboxed runs (benchmark tests): job {"code", "stdin" = "", "timeout" (optional),
    "memory_mb" (optional, default 1024)} -> {"ok", "stdout" (capped at 1 MiB), "error", "cpu_s"
    (the run's CPU seconds, as the kernel counted them: a time the program cannot fake)}. The time
    limit is the sandbox's wall-clock kill, not an alarm inside the program. No static screen (see
    docstring). stdout is the program's to write: what it says is to be checked by the caller, never
    trusted (graders.py)."""
    results, runs, owners = [], [], []
    for i, job in enumerate(jobs):
        results.append({"ok": False, "stdout": "", "error": "", "cpu_s": 0.0})
        if not isinstance(job, dict) or not isinstance(job.get("code"), str) or \
                not isinstance(job.get("stdin", ""), str):
            results[i]["error"] = "bad request: job needs a str 'code' (and optional str 'stdin')"
            continue
        runs.append({"code": job["code"], "stdin": job.get("stdin", ""),
                     "memory_mb": job.get("memory_mb"),
                     "timeout": float(job.get("timeout") or timeout)})
        owners.append(i)
    for i, run in zip(owners, sandbox.run(runs)):
        results[i].update(ok=run["ok"], stdout=run["stdout"], error=run["error"],
                          cpu_s=run["cpu_s"])
    return results


# the config key / flag that accepts the risk
UNSAFE_FLAG = "unsafe_sandbox_without_filesystem_isolation"


def require_isolation(accept_risk=False):
    """Start-up check for train.py and evaluate.py -> sandbox.layers(). Raises SystemExit, saying
    why and what to do, when the sandbox's children have no filesystem isolation (neither a mount
    namespace nor Landlock: an old kernel, Landlock off, no user namespaces, the landlock binding
    missing): model-written code could then read this user's files (keys, tokens) into the archive,
    prompts and logs, and delete them (checkpoints). With accept_risk
    (--unsafe_sandbox_without_filesystem_isolation) it warns on stderr and goes on."""
    lay = sandbox.layers()
    if lay["filesystem_isolation"]:
        return lay
    why = lay["why"]
    message = ("the sandbox has no filesystem isolation here: model-written programs could read "
               "and delete whatever this user can (keys, tokens, checkpoints).\n"
               f"  mount namespace: {why['mount_namespace']}\n  Landlock: {why['landlock']}\n"
               "To fix: run on Linux >= 5.13 with Landlock enabled (`landlock` in "
               "/sys/kernel/security/lsm), with the pinned bindings installed (pip install -r "
               "requirements.txt); or allow unprivileged user namespaces (sysctl "
               "kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0); or run as root. "
               "`python verify.py layers` shows every layer and why it is on or off.\n"
               f"To run anyway, accepting the risk: --{UNSAFE_FLAG}")
    if not accept_risk:
        raise SystemExit("error: " + message)
    print("WARNING: " + message, file=sys.stderr)
    return lay


def shutdown():
    """Stop the worker pool (also registered with atexit in sandbox.py)."""
    sandbox.shutdown()


# --------------------------------------------------------------------------------------- complexity


# Load, And, Add, ...: not depth
_MARKERS = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)


# nodes that are one branch point each
_BRANCHES = (ast.If, ast.For, ast.While, ast.AsyncFor, ast.ExceptHandler, ast.IfExp, ast.Assert,
             ast.match_case)


def complexity(program):
    """{"ast_depth", "cyclomatic", "loc", "variables"} of a program (all 0 if it does not parse).
    cyclomatic = 1 + branch points (if/loops/except/with-less boolean operands/comprehension
    clauses/match cases/ternaries/asserts); loc = non-blank, non-comment lines; variables = distinct
    bound names."""
    try:
        tree = quiet(ast.parse, program)
    except (SyntaxError, ValueError, RecursionError, MemoryError, TypeError):
        return {"ast_depth": 0, "cyclomatic": 0, "loc": 0, "variables": 0}
    depth, stack, branches, names = 0, [(tree, 1)], 0, set()
    # iterative: model text can nest deeper than Python's recursion limit
    while stack:
        node, d = stack.pop()
        depth = max(depth, d)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _MARKERS):
                stack.append((child, d + 1))
        if isinstance(node, _BRANCHES):
            branches += 1
        elif isinstance(node, ast.BoolOp):
            branches += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            branches += 1 + len(node.ifs)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    loc = 0
    for line in program.splitlines():
        if line.strip() and not line.strip().startswith("#"):
            loc += 1
    return {"ast_depth": depth, "cyclomatic": 1 + branches, "loc": loc, "variables": len(names)}


# ---------------------------------------------------------------------------------------- AZR seeds


def _literal(text):
    try:
        return quiet(ast.literal_eval, text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _seed_explanation(row, result):
    """How an AZR seed row's recorded output is explained by its validate result: "reproduced",
    "truncated" (AZR kept the first 200 + "..." + the last 200 chars), "recorded_empty" (AZR's
    leaky status check stored '', docs/azr.md §9.3), "hash_order" (set order changes with the hash seed:
    our two-interpreter check rejects it), else "unexplained"."""
    recorded = row["output"]
    if result["valid"]:
        same = result["output"] == recorded
        if same or _literal(result["output"]) == _literal(recorded):
            return "reproduced"
    if "..." in recorded and len(recorded) == 403:
        if not result["valid"] or result["output"][:200] == recorded[:200]:
            return "truncated"
    if recorded == "":
        return "recorded_empty"
    if result["reason"].startswith("non-deterministic"):
        return "hash_order"
    return "unexplained"


def seed_tally(rows, results, rechecks=2):
    """AZR seed rows ({"snippet"|"program", "input", "output"}) + their validate("code_o") results
    -> (tally {explanation: count}, the unexplained rows with their results). A set-order-dependent
    program can pass one check when the two hash seeds happen to agree; programs that would land in
    "unexplained" are re-validated on freshly started zygotes (new seeds) `rechecks` times."""
    keys = ["reproduced", "truncated", "hash_order", "recorded_empty", "unexplained"]
    tally, odd = dict.fromkeys(keys, 0), []
    for row, result in zip(rows, results):
        program = row.get("snippet", row.get("program"))
        key = _seed_explanation(row, result)
        for _ in range(rechecks):
            if key != "unexplained":
                break
            sandbox.shutdown()
            result = validate("code_o", [{"program": program, "input": row["input"]}])[0]
            key = _seed_explanation(row, result)
        if key == "unexplained":
            odd.append({"program": program, "input": row["input"], "result": result})
        tally[key] += 1
    return tally, odd


# ------------------------------------------------------------------------------------- command line


def main(argv=None):
    description = ("AZR task verifier: validate proposals / grade attempts (JSONL on stdin, one "
                   "JSON line out per line in)")
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("command", choices=["validate", "grade", "layers"])
    parser.add_argument("--task", choices=TASKS)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per sandboxed run")
    parser.add_argument("--chunk", type=int, default=512, help="lines validated/graded per batch")
    parser.add_argument("--json", action="store_true", help="layers: one JSON line, not a table")
    args = parser.parse_args(argv)
    if args.command == "layers":
        _print_layers(args.json)
        return
    if not args.task:
        parser.error("--task is required for validate and grade")
    lines = []
    for line in sys.stdin:
        if not line.strip():
            continue
        lines.append(line)
        if len(lines) >= args.chunk:
            _answer_chunk(args.command, args.task, args.timeout, lines)
            lines = []
    _answer_chunk(args.command, args.task, args.timeout, lines)


def _describe(e):
    """An exception -> "Type: message", at most 200 chars."""
    return f"{type(e).__name__}: {e}"[:200]


def _print_layers(as_json):
    """`verify.py layers`: every sandbox layer on or off and why, a line each (or one JSON line)."""
    lay = sandbox.layers()
    if as_json:
        print(json.dumps(lay))
        return
    for name, why in lay["why"].items():
        state = "OFF"
        if lay[name]:
            state = "on "
        print(f"{state}  {name:22} {why}")
    hidden = ", ".join(lay["hidden_dirs"]) or "nothing"
    print(f"hidden from children: {hidden}; {len(lay['workers'])} zygotes")


def _answer_chunk(command, task, timeout, lines):
    """Validate or grade a chunk of request lines (JSON text); write one JSON line per line in, in
    order, with the keys of `fail` only."""
    if command == "validate":
        fail = {"valid": False, "reason": "", _output_key(task): None, "gold": None}
        judge = validate
    else:
        fail = {"correct": False, "reason": ""}
        judge = grade
    items, numbers, out = [], [], {}
    for n, line in enumerate(lines):
        # a bad line answers for itself and does not stop the stream
        try:
            items.append(json.loads(line))
            numbers.append(n)
        except (ValueError, RecursionError, MemoryError) as e:
            out[n] = dict(fail, reason=f"bad request: not JSON ({_describe(e)})")
    try:
        results = judge(task, items, timeout)
    # a fault of ours on one item: judge them one by one, so only that one fails
    except Exception:
        results = []
        for item in items:
            try:
                results.append(judge(task, [item], timeout)[0])
            except Exception as e:
                results.append(dict(fail, reason=f"error: {_describe(e)}"))
    for n, result in zip(numbers, results):
        out[n] = {k: result[k] for k in fail}
    answers = []
    for n in range(len(lines)):
        answers.append(json.dumps(out[n]) + "\n")
    sys.stdout.write("".join(answers))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
