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
to f on the token stream); helpers, nested defs and classes allowed; passes the static screen
(screen.py); an input of 8+ chars is not pasted into the program; program, inputs and message are
valid UTF-8 text; two runs in two separately started interpreters (different hash seeds, clocks,
pids, folders: sandbox.py) succeed within the time limit and agree on the encoding; the value is
plain (builtin, collections, fractions, decimal types) and its repr, made here from the decoded
value (shown_output), has at most 2,000 chars and evaluates back to an equal value with the
program's imports in scope (plus Counter/OrderedDict/deque/defaultdict, Fraction, Decimal when their
module is imported); code_f also: 10 to 64 inputs, a message that is non-empty and does not contain
the program, >= 2 distinct outputs; every problem answerable [ours]: its natural answer (the
output as shown, the input, the program, in the fence the prompt asks for) comes back whole through
parse_student, and the shown output reads back through the code_o answer path to the gold.
Multi-line inputs work.

How f is called [ours; issue 22]: the same way in validation and grading, so f cannot tell them
apart. Each input becomes plain data first: a literal is read here (ast.literal_eval, nothing
runs), anything else is evaluated in a child of its own with the program in scope (as AZR allows
`f(3) + f(33)`), in both families for validity (they must agree). f is then called on the decoded
arguments from the sandbox's own code in a fresh child, with the program's own globals, every
input in order (code_f students too: the hidden half is compared).

Golds and grading [ours; design §3 "verdicts are decided outside the untrusted process"]: a valid
proposal gets "gold", the canonical encoding of its value(s) (encoding.py; plain JSON data,
stored with the problem, with "args", the argument lists f was called on). Children never see a
gold: they run the answer and send back its value's encoding; the parent decodes both and compares
with Python's == (AZR's semantics). code_o: a literal answer read here (never screened: it never
runs), another evaluated with the program's imports but not f; code_i: the answer's arguments as
above, then f on them; code_f: the student's program (the teacher program's imports prepended,
screened as one text) on the stored arguments. Each problem is also graded against itself in the
same batch, in children of its own; one that fails is void (grade). Problems from before golds or
args: add_golds.

Layer 1, the static screen, is screen.py (an import allowlist, no introspection, the text that runs
is the text screened); layers 2-7 are sandbox.py's (`python verify.py layers`); require_isolation
stops a trainer without filesystem isolation. `execute` (benchmark code, which imports os/sys
freely) skips the screen and the audit hook.
"""
import argparse
import ast
import json
import math
import re
import sys
import unicodedata

from collections import Counter, OrderedDict, defaultdict, deque
from decimal import Decimal

import prompts
import sandbox
import screen
# the canonical encoding of values (a child's results and the golds), decoded here to judge
from encoding import decode
from zygote import OVER_BUDGET

TASKS = ("code_i", "code_o", "code_f")
N_INPUTS = 10            # code_f: inputs a teacher writes; the student sees the first half
MIN_PASTED = 8           # an input this long or longer must not appear verbatim in the program
MAX_INPUTS = 64          # inputs of a code_f problem
MAX_REPR = 2000          # chars of an output repr (AZR truncates at 400 instead)
# [ours] what one item may cost the parent (red team round 12b, A01/A05/A06): the inputs of a
# proposal together (train.py keeps N_INPUTS, each under screen.MAX_INPUT, so never more), and the
# argument lists one proposal or code_i answer makes, in the encoding's units (a value each, 16
# chars of text one more: a list of 16,000 small items is ~3 MB of parsed JSON here)
MAX_INPUTS_CHARS = N_INPUTS * screen.MAX_INPUT
MAX_ARG_UNITS = 1 << 14
# a run whose values together take more units than this is kept as their JSON text (~18 times
# smaller than the parsed lists), parsed again one value at a time where a value is compared
MAX_KEPT_UNITS = 1 << 12
# units a run may send per output it computes (job["units"]; round 13b A08: a 54,500-unit value,
# refused for its repr only after this process read three ~1 MB lines of it). A repr of at most
# MAX_REPR chars holds at most MAX_REPR // 2 + 1 = 1,001 units: each node shows 2 chars of its own
# (brackets, quotes, `0.0`) or, a 1-digit int, 1 char plus a ", " or ": " before it unless it is its
# container's first item (at most one per container, which shows 2 of its own); an extra unit (16
# chars of a str or Decimal, 64 bits of an int, 8 bytes, 16 bits of a Fraction) shows >= 4 more.
# So no valid output is refused, nor a value equal to a gold, except a Decimal with long trailing
# zeros or a Counter with zero counts (the only values much larger than a gold they equal, already
# refused past MAX_UNITS). A zygote caps a job at MAX_UNITS: 64 inputs of
# code_f at 1,001 units each still fit
OUTPUT_UNITS = 1 << 11
# the error of a run pinned to a zygote that has been replaced since (sandbox.run)
LOST = "its zygote is gone"

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
    return prompts.teacher_prompt(_task(task), references, program, screen.BANNED_SHOWN, N_INPUTS)


def student_prompt(task, problem):
    """Full student prompt (the text is in prompts.py). code_i/code_o: problem
    {"program","input","output"}; code_f: {"program","inputs","outputs","message"}, of which the
    first half of the pairs is shown (the rest is hidden for grading)."""
    return prompts.student_prompt(_task(task), problem, screen.BANNED_SHOWN)


# a markdown fence, as the prompts write them (tinyworld.py builds its transcripts with it)
fence = prompts.fence
# the old private name, still used by tinyworld.py
_fence = prompts.fence


# ------------------------------------------------------------------------------------------ parsers

# [ours] no regex here scans to the end of the text more than once: a response holds up to
# max_new_tokens of model text, and a lazy `.*?</answer>` tried at every `<answer>` of a response
# with none closed is quadratic (64 KB: ~2 s a parse); a fence's opening line is matched with
# possessive quantifiers (Python >= 3.11), which never give back what they took:
# `[ \t]*[\w-]*[ \t]*` tries every split of a long run of blanks with no newline after it (64 K
# spaces: ~8 s a parse)
_THINK_END = re.compile(r"</think>\s*<answer>")
_FENCES = re.compile(r"(?s)```[ \t]*+([\w-]*+)[ \t]*+\n(.*?)```")


def _between(text, start, end):
    """The bodies of the non-overlapping `start`...`end` spans of `text`, left to right (what
    re.findall(start + "(.*?)" + end) gives), in one pass."""
    bodies, pos = [], 0
    while True:
        left = text.find(start, pos)
        if left < 0:
            return bodies
        right = text.find(end, left + len(start))
        if right < 0:
            return bodies
        bodies.append(text[left + len(start):right])
        pos = right + len(end)


def _answer(response):
    """Content of the last <answer>...</answer>, or None when the response breaks the format
    (`...</think> <answer>...</answer>`)."""
    if not isinstance(response, str):
        return None
    head = _THINK_END.search(response)
    if head is None or response.find("</answer>", head.end()) < 0:
        return None
    return _between(response, "<answer>", "</answer>")[-1]


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
            messages = _between(answer, "<message>", "</message>")
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
# (layer 1: screen.py; these names stay here for callers of verify)

Invalid = screen.Invalid
prepare_program = screen.prepare_program
quiet = screen.quiet


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
        # before any parsing: 64 inputs at their own cap cost ~3 s of this process's CPU
        if sum(map(len, inputs)) > MAX_INPUTS_CHARS:
            raise Invalid(f"inputs too long together (more than {MAX_INPUTS_CHARS} chars)")
        program_words = " ".join(p["program"].split())
        if not p["message"].strip() or program_words in " ".join(p["message"].split()):
            raise Invalid("message is empty or contains the program")
    else:
        _request(p, {"program": str, "input": str})
        inputs = [p["input"]]
    # what reaches a prompt must be text a tokenizer can encode
    for text in [p["program"], p.get("message", "")] + inputs:
        _prompt_text(text)
    program, imports, modules = screen.prepare(p["program"])
    pasted = [x.strip() for x in inputs if len(x.strip()) >= MIN_PASTED and x.strip() in program]
    if pasted:
        raise Invalid("the input appears verbatim in the program")
    # a code_f student sees the inputs, never the program: inputs that are not literals are
    # evaluated with its imports alone, where its own top level never ran (red team round 15: a
    # decimal context it set, a class it patched, its docstring read as __doc__, A02/A09/A04)
    pack_code = imports if task == "code_f" else program
    entry = {"code": program, "pack_code": pack_code, "args": [], "packs": [], "modules": modules,
             "input": inputs[0].strip(), "natural": [], "sealed": task == "code_i"}
    for k, x in enumerate(inputs):
        encoding, pack = screen.arguments(x)
        entry["args"].append(encoding)
        if pack is not None:
            entry["packs"].append((k, pack))
    _check_arguments(entry["args"])
    # after the inputs' own screen (screen.arguments: sizes, depth)
    hidden = screen.own_names_read(program, inputs) if task == "code_f" else []
    if hidden:
        raise Invalid(f"an input uses the program's own {hidden[0]}, which students never see")
    # code_i: its natural answer would be refused (_attempt: an answer may not search through the
    # program)
    hidden = screen.own_names_read(program, inputs) if task == "code_i" else []
    if hidden:
        raise Invalid(f"the input uses the program's own {hidden[0]}, which an answer may not")
    # f gets plain data, rebuilt: what Python passes it that plain data cannot carry (two names for
    # one list, a set's order, a defaultdict's factory, what an input's own call of f changed)
    # would make the shown output differ from the one a student derives from the input's text. So
    # an input that is not a literal, or holds a set, is also run as written, `f(<input>)` in a
    # child of its own, which must agree (red team round 9, A01-A03)
    if _not_plain(entry):
        entry["natural"] = [_as_written_call(x) for x in inputs]
    return entry


def _as_written_call(text):
    """The call `f(<text>)` of an input or answer as written (compiled from the screened tree).
    Raises Invalid."""
    return screen.compiled(f"f(\n{text}\n)", "eval")


def _units_over(encodings, limit):
    """Do the encodings together take more than `limit` units (encoding.py's: a list is one, 16
    chars of a string one more)? Looks at no more than ~limit nodes."""
    stack, units = list(encodings), 0
    while stack:
        node = stack.pop()
        if type(node) is list:
            units += 1
            # each item at least a unit
            if len(node) > limit:
                return True
            stack.extend(node)
        elif type(node) is str:
            units += len(node) >> 4
        if units > limit:
            return True
    return False


def _check_arguments(args):
    """Raise Invalid when an item's argument lists (encodings; None for one not known yet) are too
    large together: a 20-char pack can make 64,000 units, which every run of the item sends back."""
    if _units_over([a for a in args if a is not None], MAX_ARG_UNITS):
        raise Invalid(f"input too large (its arguments take more than {MAX_ARG_UNITS} units)")


def _not_plain(entry):
    """Does an entry have an input that plain data may not carry as Python passes it: one that is
    not a literal (a pack), or one holding a set?"""
    return bool(entry["packs"]) or any(_holds_a_set(encoding) for encoding in entry["args"])


def _run_as_written(items, timeout):
    """Inputs as written, each in a child of its own: `items` [(the program, its calls: `f(<input>)`
    as written, or a code_f problem's {"pack_code", "packs"}: its inputs as written, each evaluated
    with its imports alone and f called on it; the zygote where the run it is compared with ran
    (red team round 12a, A08: elsewhere a per-zygote bit of f made an exact right answer wrong))]
    -> one run per item: its values in order, or the failure that decides (_joined). A child per
    input, as stock Python runs each input: in one child, what an input left behind (a name
    rebound by `:=`, a decimal context, an object shared with the next input, the memory it held,
    the CPU it spent) reached the next inputs and f on them (red team round 31, A01/A04-A08/A12:
    right programs graded wrong, golds stock never gives)."""
    jobs, widths = [], []
    for code, calls, zygote in items:
        job = {"code": screen.compiled(code), "family": None, "timeout": timeout, "audit": True,
               "zygote": zygote, "units": OUTPUT_UNITS}
        if isinstance(calls, dict):
            parts = [dict(job, pack_code=calls["pack_code"], packs=[pack])
                     for pack in calls["packs"]]
        else:
            parts = [dict(job, calls=[call]) for call in calls]
        jobs += parts
        widths.append(len(parts))
    runs, out = _slim(_run(jobs)), []
    for width in widths:
        out.append(_joined(runs[:width]))
        runs = runs[width:]
    return out


def _joined(runs):
    """One input's runs (see _run_as_written) -> the run that stands for them all: each value in
    order when all ran, else the failure that decides: a zygote replaced between runs (_lost), then
    one the sandbox stopped (_sandbox_ended), then the first."""
    failed = [run for run in runs if not run["ok"]]
    for which in (_lost, _sandbox_ended, lambda run: True):
        for run in failed:
            if which(run):
                return run
    return dict(runs[0], values=[value for run in runs for value in run["values"]])


def _holds_a_set(encoding):
    """Does an encoding hold a set or frozenset anywhere (a mapping's keys and values, a deque's
    items included)? Every list is walked: a tag is only ever a list's first item (red team round
    32, A07: a key-value pair taken for a tagged node hid `{0: {3, 11}}`'s set)."""
    todo = [encoding]
    while todo:
        node = todo.pop()
        if type(node) is not list:
            continue
        if node and node[0] in ("set", "frozenset"):
            return True
        todo += node
    return False


# where Python and a reader may break lines differently: Python breaks at a lone \r, which a prompt
# shows inside its line (`k = 1  # note\r    k = -3` ran the second assignment behind a comment:
# red team round 26, A10); many readers (str.splitlines) break at these others, Python never
_LINE_BREAKS = re.compile("\r(?!\n)|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _prompt_text(text):
    """Raise Invalid unless `text` reaches a prompt as it is: valid UTF-8 (a lone surrogate is not,
    and the tokenizer raises on it) in NFC (Qwen2's tokenizer normalises to NFC, so `'e\u0301'`
    would reach the student as the one character `'é'`, one shorter than f counts: red team round 9,
    P02); without ``` (every such text is shown inside a fence, which a string in a program closed,
    showing a student a second `input` fence: red team round 15, A05); with no line break but \n and
    \r\n (_LINE_BREAKS)."""
    if "```" in text:
        raise Invalid("``` in a text a student sees inside a fence")
    if _LINE_BREAKS.search(text):
        raise Invalid("a line break other than \\n or \\r\\n (Python and a reader would split the "
                      "lines differently)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid("not valid UTF-8 text (a lone surrogate)") from None
    if not unicodedata.is_normalized("NFC", text):
        raise Invalid("text not in Unicode NFC (a tokenizer that normalises would change it)")


def _call_f(entries, families, timeout):
    """f on every argument list, as validation and grading both run it. An entry: {"code": the
    program f comes from, "args": an encoding of (args, kwargs) per call, None where the input is
    not a literal, "packs": [(k, text)] for those, "pack_code": the program they are evaluated
    with, "families" (optional): its own in place of `families`, "zygote" (optional, 0 = none):
    the zygote its runs are pinned to, "sealed" (optional): the packs may run none of the
    program's code (zygote._sealing)}. Step 1 (only for inputs that are
    not literals): the pack texts evaluated in a child per family, which must agree -> the missing
    encodings. Step 2: f called on every argument list, in a fresh child per family. -> per entry,
    one run per family (a failed step 1 fails them all)."""
    first, owners = [], []
    for n, e in enumerate(entries):
        if not e["packs"]:
            continue
        for family in e.get("families", families):
            calls = [screen.compiled(text, "eval") for _, text in e["packs"]]
            # its values become arguments, all of them no larger than MAX_ARG_UNITS together (as
            # _units_over counts; the encoding counts a Fraction's bits 4x, so a pack of huge
            # Fractions under that is refused too)
            first.append({"code": screen.compiled(e["pack_code"]), "calls": calls,
                          "family": family, "timeout": timeout, "audit": True,
                          "sealed": e.get("sealed", False),
                          "zygote": e.get("zygote", 0), "units": MAX_ARG_UNITS})
        owners.append(n)
    failed, where = {}, {}
    # not _slim: these values become arguments (_fill_arguments sizes them first)
    runs = _run(first)
    for n, chunk in zip(owners, _per_entry(entries, owners, families, runs)):
        # step 2 runs where step 1 did, run for run (red team round 12a, A08)
        where[n] = [run["zygote"] for run in chunk]
        error = _fill_arguments(entries[n], chunk)
        if error:
            failed[n] = _step_failed(chunk, error)
    # step 1's values, but those kept as arguments, are not held through step 2
    del runs
    second, owners = [], []
    for n, e in enumerate(entries):
        if n in failed:
            continue
        for j, family in enumerate(e.get("families", families)):
            zygote = e.get("zygote", 0)
            if n in where:
                zygote = where[n][j]
            second.append({"code": screen.compiled(e["code"]), "args": e["args"],
                           "family": family, "timeout": timeout, "audit": True,
                           "zygote": zygote, "units": OUTPUT_UNITS * len(e["args"])})
        owners.append(n)
    runs = _slim(_run(second))
    out = dict(zip(owners, _per_entry(entries, owners, families, runs)))
    for n, run in failed.items():
        out[n] = [run] * len(entries[n].get("families", families))
    return [out[n] for n in range(len(entries))]


def _step_failed(chunk, error):
    """The run that stands for an entry whose step 1 failed with `error`: the sandbox's own result
    when a run's zygote was gone (see _lost), else a failure where its first run was made."""
    for run in chunk:
        if _lost(run):
            return run
    return dict(sandbox.failed(error), zygote=chunk[0]["zygote"])


def _over_budget(run):
    """Did a run fail for a value larger than its job's "units" (zygote.OVER_BUDGET)? A program
    that raises this error itself fails as it would with its own error (only the reason differs)."""
    head = OVER_BUDGET.split("%d")[0]
    return not run["ok"] and run["error"].startswith("ValueError: " + head)


# how a child's run ends when the sandbox, not Python, stopped it: a refusal (caught or not), the
# child's memory or time, a crash, a value the encoding cannot carry (an int subclass, equal to an
# int in Python: red team round 16, A04) or carry in its budget (a Decimal with 5,000 trailing
# zeros or a Counter of zero counts equals a small gold: round 17, A01)
SANDBOX_ENDS = ("not allowed in the sandbox", "MemoryError", "timeout", "crashed", "exited",
                "malformed result", "worker died", "result too large",
                "ValueError: output is not a plain value", "ValueError: output is an unnormalised",
                "ValueError: too many keys with one hash", "ValueError: output too large",
                # the child could not decode the arguments sent to it (this process's limits)
                "ValueError: malformed encoding")


# a code_i answer whose value is past what the sandbox carries (the argument budget, the text
# cap, an int's bits, the depth of a value or of a text) is void, not wrong: stock Python would
# call f on it (red team round 26, A04; round 27, A07/A08)
PAST_LIMITS = ("input too large", "input longer than", "input: output too large",
               f"nested deeper than {screen.MAX_DEPTH} levels")
# ... and one evaluated to different values in the two families (a set's order, round 26, A05)
UNSETTLED = ("non-deterministic: the input evaluates differently",)
# ... and one that reads a builtin's name or an import the program's module rebinds (_attempt)
REBOUND = ("the answer reads a name the program's module rebinds:",)


def _sandbox_ended(run):
    """Did the sandbox's own limits end a run, where stock Python may have gone on (SANDBOX_ENDS)?
    The answer's own expression too, which runs with the teacher's program in scope (red team
    round 18, A01: an answer `f(3) + 1` met a refusal in f). A program can raise a MemoryError or
    an exception class named `timeout` itself: then it voids an attempt of its own problem, which
    then pays its teacher nothing."""
    return not run["ok"] and run["error"].startswith(SANDBOX_ENDS)


def _readable(run):
    """Can this process decode every value of a run (its limits: sizes, keys of one hash)?"""
    try:
        for value in run["values"]:
            decode(_tree(value))
    except (ValueError, ArithmeticError, RecursionError, MemoryError, TypeError):
        return False
    return True


def _same_answer(run, other):
    """Do two runs of f on one input agree: both fail, or both give the same encodings or values
    equal in Python (a set's order may differ; a nan is itself)?"""
    if not run["ok"] or not other["ok"]:
        return run["ok"] == other["ok"]
    return len(run["values"]) == len(other["values"]) and all(
        a == b or equal(a, b) for a, b in zip(run["values"], other["values"]))


def _lost(run):
    """Did a run fail because the zygote it was pinned to had been replaced? Only the sandbox says
    so (zygote 0); a child's own failure names its zygote, whatever its text."""
    return not run["ok"] and not run.get("zygote") and run["error"] == LOST


def _run(jobs):
    """sandbox.run, with a MemoryError here (reading answer lines) failing the jobs, not the batch:
    the jobs are run again in halves, and a job that alone runs this process out of memory fails
    alone."""
    try:
        return sandbox.run(jobs)
    except MemoryError:
        if len(jobs) <= 1:
            return [sandbox.failed("out of memory reading the result") for _ in jobs]
    half = len(jobs) // 2
    return _run(jobs[:half]) + _run(jobs[half:])


def _slim(runs):
    """Runs (in place) whose values together take more than MAX_KEPT_UNITS keep each value as
    ("json", its compact JSON text, whether its repr could fit MAX_REPR chars): what is judged
    of them is equality (same text, same data) and, one value at a time, == with a gold (_tree). A
    batch keeps ~1 MB per such run, not the ~13 MB its parsed lists took (red team round 12b,
    A06/A10: 32 proposals of 50 chars ran this process out of memory)."""
    for n, run in enumerate(runs):
        if not run["ok"] or not _units_over(run["values"], MAX_KEPT_UNITS):
            continue
        try:
            run["values"] = [("json", json.dumps(v, separators=(",", ":")),
                              repr_fits(v, MAX_REPR)) for v in run["values"]]
        except (ValueError, TypeError, RecursionError, MemoryError):
            runs[n] = dict(sandbox.failed("malformed result"), zygote=run["zygote"])
    return runs


def _tree(value):
    """A run's value as JSON data: parsed again if _slim kept it as text."""
    if type(value) is tuple:
        return json.loads(value[1])
    return value


def _per_entry(entries, owners, families, runs):
    """Runs made in order for the entries numbered `owners`, one per family of each -> a list of
    runs per owner."""
    chunks, start = [], 0
    for n in owners:
        width = len(entries[n].get("families", families))
        chunks.append(runs[start:start + width])
        start += width
    return chunks


def _fill_arguments(entry, runs):
    """Step 1's runs (one per family) of an entry -> "" after filling in its missing argument
    lists, else why not (an error, the families disagree, not an argument list of plain data)."""
    for run in runs:
        if _over_budget(run):
            return f"input too large (its arguments take more than {MAX_ARG_UNITS} units)"
        if not run["ok"]:
            return run["error"]
    try:
        if any(run["values"] != runs[0]["values"] for run in runs):
            return "non-deterministic: the input evaluates differently in two runs"
    except RecursionError:
        return "malformed result"
    # sized before anything decodes them; one too large is never kept
    try:
        _check_arguments(entry["args"] + runs[0]["values"])
    except Invalid as e:
        return str(e)
    for (k, _), value in zip(entry["packs"], runs[0]["values"]):
        try:
            plain = _argument_list(value)
        except ValueError:
            # plain data past this process's limits (keys of one hash): the sandbox's doing, where
            # stock Python would call f on it (red team round 24, A08: a right code_i answer of 9
            # ints that share a hash was graded wrong, not void)
            return "malformed result: its value cannot be read here"
        if not plain:
            return "the input is not an argument list of plain values"
        entry["args"][k] = value
    return ""


def _argument_list(value):
    """Is a child's value the encoding of (a tuple, a dict of keyword names)? ValueError when this
    process cannot decode it."""
    pair = decode(value)
    if type(pair) is not tuple or len(pair) != 2:
        return False
    args, kwargs = pair
    if type(args) is not tuple or type(kwargs) is not dict:
        return False
    return all(type(key) is str and key.isidentifier() for key in kwargs)


def _validity(task, a, b, entry, written):
    """The verdict on a proposal's two runs and its run as written (or None: see _proposal),
    decided here, on what the children sent -> result keys. The outputs students see are the
    reprs of the decoded golds, made here; "args" are the argument lists f was called on (grading
    calls f on these again, never re-evaluating an input's text)."""
    # a value over its run's OUTPUT_UNITS: its repr cannot fit MAX_REPR chars
    if _over_budget(a) or _over_budget(b):
        return {"reason": f"invalid output: output repr longer than {MAX_REPR} chars (more than "
                          f"{OUTPUT_UNITS} units)"}
    if not a["ok"] or not b["ok"]:
        return {"reason": "error: " + (a["error"] or b["error"])}
    if written is not None and written["values"] != a["values"]:
        return {"reason": "the input does not reach f as Python would pass it (f on it as "
                          "written: " + (written["error"] or "another value") + ")"}
    # plain JSON data from both (or its text: _slim): == is safe
    if a["values"] != b["values"]:
        return {"reason": "non-deterministic: two runs with different hash seeds disagree"}
    shown = []
    for encoding in a["values"]:
        try:
            shown.append(shown_output(encoding, entry["modules"]))
        except Invalid as e:
            return {"reason": f"invalid output: {e}"}
    if task == "code_f" and len(set(shown)) < 2:
        return {"reason": "fewer than 2 distinct outputs"}
    why = _unanswerable(task, entry, shown, a["values"])
    if why:
        return {"reason": why}
    gold = [_tree(value) for value in a["values"]]
    if task == "code_f":
        return {"valid": True, "reason": "valid", "outputs": shown, "gold": gold,
                "args": entry["args"]}
    return {"valid": True, "reason": "valid", "output": shown[0], "gold": gold[0],
            "args": entry["args"]}


# what a student answers with, and the fence the prompts ask for it in
_ANSWERED = {"code_o": "output", "code_i": "input", "code_f": "program"}
_ANSWER_FENCE = {"code_o": "output", "code_i": "input", "code_f": "python"}


def natural_response(task, text):
    """The response of a student who knows the answer `text`, written as the prompts ask: a fence
    of the answer's kind inside the answer tags."""
    return f"...</think>\n<answer>\n{fence(_ANSWER_FENCE[task], text)}\n</answer>"


def _unanswerable(task, entry, shown, gold):
    """[ours] Why no student can give the right answer, or "": the natural answer must come back
    whole through parse_student (no `</answer>` or ``` in it): code_f the teacher's program, else
    both the input (a code_i answer) and the output as shown (a code_o answer; the two tasks share
    programs); and the output must read back through the code_o answer path to a value equal to
    the gold (no word in it the screen refuses)."""
    natural = {"code_i": entry["input"], "code_o": shown[0]}
    if task == "code_f":
        natural = {"code_f": entry["code"].strip("\n").rstrip()}
    for kind, text in natural.items():
        if parse_student(kind, natural_response(kind, text)) != text:
            what = _ANSWERED[kind]
            return f"the answer format cannot carry the {what} (`</answer>` or ``` in it)"
    if task == "code_f":
        return ""
    try:
        encoding, source = screen.answer_value(shown[0])
    except Invalid as e:
        return f"the output cannot be given as an answer: {e}"
    if source is None and not equal(gold[0], encoding):
        return "the output does not read back to the value it shows"
    return ""


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
    with screen.silenced():
        for i, p in enumerate(proposals):
            program = None
            if isinstance(p, dict):
                program = p.get("program")
            results.append({"valid": False, "reason": "", key: None, "gold": None,
                            "program": program})
            try:
                entries.append(_proposal(task, p))
                results[i]["program"] = entries[-1]["code"]
                owners.append(i)
            except Invalid as e:
                results[i]["reason"] = str(e)
            except MemoryError:
                results[i]["reason"] = "error: out of memory reading the proposal"
        runs = _call_f(entries, (0, 1), timeout)
        natural = [(entry, a) for entry, (a, b) in zip(entries, runs)
                   if entry["natural"] and a["ok"] and b["ok"]]
        as_written = _run_as_written([(e["code"], e["natural"], a["zygote"])
                                      for e, a in natural], timeout)
        as_written = dict(zip([id(e) for e, _ in natural], as_written))
    for i, entry, (a, b) in zip(owners, entries, runs):
        try:
            results[i].update(_validity(task, a, b, entry, as_written.get(id(entry))))
        # what a child sent does not parse, or it does not fit in memory: this item fails, alone
        except (ValueError, RecursionError, MemoryError):
            results[i]["reason"] = "error: malformed result"
    return results


def add_golds(task, problems, timeout=5.0):
    """Problems stored before golds were (no "gold" or no "args" key: an old archive or checkpoint)
    -> the same list with "gold" and "args" filled in by validating each again; None in place of
    one that is no longer valid or whose output changed. Problems that have both come back
    unchanged, unrun."""
    key = _output_key(task)
    # what validate reads of a problem
    if task == "code_f":
        fields = ("program", "inputs", "message")
    else:
        fields = ("program", "input")
    out, todo = list(problems), []
    for i, p in enumerate(problems):
        if not isinstance(p, dict) or "gold" not in p or "args" not in p:
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
            out[i] = dict(problems[i], gold=r["gold"], args=r["args"])
    return out


def _teacher_args(a, n):
    """The argument lists f was called on in validation (the problem's "args"), or None for a
    problem from before they were stored (its inputs are then read again). Raises Invalid."""
    if "args" not in a:
        return None
    args = a["args"]
    try:
        if type(args) is list and len(args) == n and all(map(_argument_list, args)):
            return args
    # a corrupt record fails alone (red team round 29, A10: its ValueError lost the batch)
    except ValueError:
        pass
    raise Invalid("bad request: args must be one argument-list encoding per input")


def _arguments_entry(code, pack_code, texts, known):
    """An entry for _call_f that calls f (from `code`) on the argument lists `known` (encodings)
    where given, else on the input texts read again (literals here, packs evaluated with
    `pack_code`). Raises Invalid."""
    entry = {"code": code, "pack_code": pack_code, "args": [], "packs": []}
    for k, x in enumerate(texts):
        if known is not None and known[k] is not None:
            entry["args"].append(known[k])
            continue
        if not isinstance(x, str):
            raise Invalid("bad request: inputs must be strings")
        encoding, pack = screen.arguments(x)
        entry["args"].append(encoding)
        if pack is not None:
            entry["packs"].append((k, pack))
    return entry


def _teacher_side(a, n, seen):
    """(the problem's stored argument lists, screen.prepare of its program), worked out once per
    problem of a grade batch (`seen`): its attempts share them (red team round 9 S01: 8 attempts
    of a problem with a 60,000-item input decoded and screened it 8 times, ~1 s of the parent's
    CPU). Raises Invalid."""
    key = (a["program"], id(a.get("args")), n)
    if key not in seen:
        seen[key] = (_teacher_args(a, n), screen.prepare(a["program"]))
    return seen[key]


def _attempt(task, a, seen):
    """One attempt -> (what to run: an entry for _call_f, a code_o expression job, or None when
    the answer is a literal read here; its value(s) if known already; the slice of values compared;
    the gold encodings they must equal; the self-check: an entry that runs the teacher's own program
    on its own input(s)). The jobs hold no gold. Raises Invalid."""
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
        known, (teacher, gold_imports, _) = _teacher_side(a, n, seen)
        student = screen.prepare(a["answer"])[0]
        # the teacher program's imports prepended (as AZR), but for the names the student binds,
        # screened as the one text that runs; the student's docstring, if any, first again, so its
        # __doc__ is its own (red team round 15, A06)
        imports, left = screen.imports_for(gold_imports, student)
        doc = ast.get_docstring(ast.parse(student), clean=False)
        if imports and doc is not None:
            imports = repr(doc) + "\n" + imports
        code = screen.prepare(imports + "\n" + student, len(imports) + 1)[0]
        # on the argument values validation called f on, never an input's text evaluated again
        # (inputs of a problem from before: with the imports alone, as in validation)
        entry = dict(_arguments_entry(code, gold_imports, a["inputs"], known), left=left)
        check = _arguments_entry(teacher, gold_imports, a["inputs"], known)
        # and on the inputs as written where plain data may not carry them, as the teacher's was
        # in validation (red team round 29, A06-A08: one row under three names, a set's order, an
        # input's decimal context graded right programs wrong and wrong ones correct)
        entry["natural"] = check["natural"] = _inputs_as_written(a, gold_imports, seen)
        # called on every input, in order, as in validation; the hidden half is compared
        return entry, None, slice(n // 2, n), a["gold"][n // 2:], check
    _request(a, {"program": str, "input": str, "output": str, "gold": list})
    known, (program, imports, _) = _teacher_side(a, 1, seen)
    if known is None:
        known = [None]
    check = _arguments_entry(program, program, [a["input"]], known)
    # a code_i input (the teacher's, an answer) runs none of the program's code (zygote._sealing);
    # a code_o input may call f (`f(3) + f(33)`: 2 of AZR's seeds)
    check["sealed"] = task == "code_i"
    # code_o: the answer, with the program's imports in scope but not f
    if task == "code_o":
        encoding, source = screen.answer_value(a["answer"])
        if source is None:
            return None, [encoding], slice(0, 1), [a["gold"]], check
        job = {"code": screen.compiled(imports), "calls": [screen.compiled(source, "eval")],
               "audit": True, "units": OUTPUT_UNITS}
        return job, None, slice(0, 1), [a["gold"]], check
    # code_i: the answer's arguments, then f on them as plain data, as validation ran it (the first
    # and only call of f in its child); the check runs the teacher's input as any answer is run
    entry = dict(_arguments_entry(program, program, [a["answer"]], [None]), sealed=True)
    # not a search through the program (red team round 18, A05: `next(x for x in range(10 ** 5)
    # if f(x) == 392)`; round 19, A01: through a class's method, an alias): an allowlist
    runs = entry["packs"] and screen.own_names_read(program, [a["answer"]])
    # a builtin or an import the program's module rebinds (`list = tuple`, `math: int`): stock
    # Python reads the program's, which an answer may not reach, so void, not wrong (red team
    # round 35, A02; round 36, B1)
    if runs and set(runs) <= screen.rebound_names(program):
        raise Invalid(f"{REBOUND[0]} {runs[0]}")
    if runs:
        raise Invalid(f"the answer uses the program's own {runs[0]} (an answer may read only "
                      "builtins and the modules the program imports)")
    _check_arguments(entry["args"])
    check["natural"] = _teacher_as_written(a, program, program, [a["input"]], seen)
    return entry, None, slice(0, 1), [a["gold"]], check


def _teacher_as_written(a, program, pack_code, inputs, seen):
    """A problem's inputs run as written, `f(<input>)` each in order, when plain data may not carry
    one of them (see _proposal; as a code_i answer is run: _as_written) -> those calls, or [],
    worked out once per problem of a batch (`seen`)."""
    key = ("as written", a["program"], json.dumps(inputs))
    if key not in seen:
        seen[key] = []
        # an input the screen now refuses: so is that answer, which is then not run as written
        try:
            if _not_plain(_arguments_entry(program, pack_code, inputs, None)):
                seen[key] = [_as_written_call(x) for x in inputs]
        except Invalid:
            pass
    return seen[key]


def _inputs_as_written(a, imports, seen):
    """A code_f problem's inputs as written, when plain data may not carry one of them: {"pack_code":
    its imports, "packs": each input as Python passes it}, each evaluated in a child of its own
    (_run_as_written) with the imports alone, after the program's top level (the teacher's, a
    student's), and f called on it (round 30, A04-A13: evaluated in a student's globals, an input
    read the student's own `s` or `__doc__`) -> that, or [] (once per problem: `seen`)."""
    key = ("as written", a["program"], json.dumps(a["inputs"]))
    if key not in seen:
        seen[key] = []
        try:
            if _not_plain(_arguments_entry(a["program"], imports, a["inputs"], None)):
                packs = [screen.compiled(f"{screen.PACK}(\n{x}\n)", "eval") for x in a["inputs"]]
                seen[key] = {"pack_code": screen.compiled(imports), "packs": packs}
        except Invalid:
            pass
    return seen[key]


def _problem_key(a):
    """What identifies an attempt's problem within a batch: its program, inputs and gold."""
    if not isinstance(a, dict):
        return None
    try:
        return json.dumps([a.get("program"), a.get("input"), a.get("inputs"), a.get("gold")],
                          default=repr)
    except (ValueError, RecursionError):
        return None


def grade(task, attempts, timeout=5.0):
    """Attempts -> [{"correct", "reason", "void"}], run in the sandbox in parallel and judged here.
    An attempt is a problem as validate made it ("program", "input"/"inputs", "output(s)", "gold",
    "args"; other keys ignored) plus "answer": code_o an output, code_i an input, code_f a program
    (run on every input, in order, as the teacher's was; graded on the hidden last half). Correct
    when each gold == the answer's value (Python's ==, as AZR, on values decoded here from plain
    data: builtin types only, so no always-equal object). A literal code_o answer is read here,
    without a run. `answer` None (a format error) scores False.

    [ours; issue 22] The problem is checked against itself in the same batch, in children of its
    own: code_o, the teacher's program on its own inputs once per family; code_i and code_f, the
    teacher's program on its own input(s) in a child of every zygote that ran one of its attempts
    (the same interpreter, hash seed, clocks and stack room as that attempt; in both, f's first
    call(s) in its child, as in validation, so f can tell them apart by its argument alone). A
    problem whose own answer is not graded correct in every check (a wrong value, an error, a
    timeout) is VOID: every attempt of it in the batch is "void" (not correct, and neither rewarded
    nor penalised: a problem whose answer depends on the world it runs in decides nothing). A code_i
    attempt is void by itself when the sandbox stopped the teacher's program on its input
    (_sandbox_ended: a refusal, the child's memory or time, a value the encoding cannot carry),
    when f answers it differently in the two families, or when its value cannot be read here; a
    code_o or code_f attempt when the sandbox stopped the student's expression or program: where
    stock Python may have answered otherwise."""
    _task(task)
    results, entries, jobs, done, checks, seen, left = [], [], [], [], {}, {}, {}
    with screen.silenced():
        for i, a in enumerate(attempts):
            results.append({"correct": False, "reason": "", "void": False})
            try:
                if isinstance(a, dict) and a.get("answer", "") is None:
                    raise Invalid("no answer (format error)")
                work, values, compared, gold, check = _attempt(task, a, seen)
            except Invalid as e:
                results[i]["reason"] = str(e)
                if task == "code_i" and str(e).startswith(PAST_LIMITS + REBOUND):
                    results[i].update(void=True, reason=f"void: {e}")
                elif not str(e).startswith("bad request"):
                    results[i]["reason"] = f"invalid answer: {e}"
                continue
            except MemoryError:
                results[i]["reason"] = "error: out of memory reading the answer"
                continue
            key = _problem_key(a)
            if key not in checks:
                full = a["gold"]
                if task != "code_f":
                    full = [full]
                checks[key] = (check, slice(0, len(full)), full)
            if values is not None:
                done.append((i, {"ok": True, "values": values}, compared, gold, key))
            elif "calls" in work:
                jobs.append((i, dict(work, timeout=timeout), compared, gold, key))
            else:
                entries.append((i, work, compared, gold, key))
                left[i] = work.get("left", ())
        runs = _slim(_run([job for _, job, _, _, _ in jobs]))
        done += [(i, run, c, g, key) for (i, _, c, g, key), run in zip(jobs, runs)]
        # code_o: the checks in both families, beside the attempts; code_i and code_f: after them,
        # where they ran (a per-zygote bit, the stack room or an address, that both families and a
        # check per family agreed on failed a student's program in other zygotes: red team round
        # 11, A07/A08)
        owners, work = list(checks), []
        if task == "code_o":
            work = [dict(checks[key][0], families=(0, 1)) for key in owners]
        # code_i: f on each answer in both families, which must agree (red team round 16, A05: f
        # read a set's hash order on every input but its teacher's, and chose its solve rate)
        both = [dict(e, families=(0, 1)) if task == "code_i" else e for _, e, _, _, _ in entries]
        runs = _call_f(both + work, (None,), timeout)
        done += [(i, run[0], c, g, key) for (i, _, c, g, key), run in zip(entries, runs)]
        elsewhere = {i: run[1] for (i, *_), run in zip(entries, runs) if len(run) > 1}
        check_runs = runs[len(entries):]
        written = {}
        if task != "code_o":
            owners, check_runs = _pinned_checks(checks, done, timeout)
        if task != "code_o":
            written = _as_written(attempts, entries, done, timeout)
    void = {}
    for key, runs_of in zip(owners, check_runs):
        _, compared, gold = checks[key]
        if not all(_matches(run, compared, gold) for run in runs_of):
            void[key] = "void: the problem's own answer is not graded correct here"
    # code_i: the teacher's program on a student's input, a path its own input never took, where
    # the sandbox may not say what stock Python says (red team round 15, A08: a refusal on every
    # input but the teacher's own graded right answers wrong, at the teacher's choice). Such an
    # attempt is void, itself alone: another student's verdict stands (round 17, A05: a wrong
    # answer voided its peers' right ones); its problem pays its teacher nothing and decides no
    # rated match (train.py), so voiding right answers gains a teacher nothing
    unsure = {}
    # every task: the sandbox stopped a run of the attempt, as plain data or as written, where
    # stock Python may have gone on to the gold(s): code_i, the teacher's program on the answer
    # (round 16, A01: a refusal only as written); code_o, the answer's expression (round 34, F1:
    # `len([0] * 200000000)`, a namedtuple equal to the gold tuple); code_f, a student's program
    # on the stored inputs (round 33, J1/J2: a right program slower than the limit, or needing
    # more than the child's memory) or on an input as written (round 31, A12: an input held 760 MB
    # through f's call, and a right program that needs 400 MB)
    for i, run, _, _, _ in done:
        for ran, how in ((run, ""), (written.get(i, run), " as written")):
            if _sandbox_ended(ran):
                unsure.setdefault(i, f"void: the sandbox stopped its run{how} ({ran['error']})")
    for i, run, _, _, key in done if task == "code_i" else ():
        if i in elsewhere and not _same_answer(run, elsewhere[i]):
            unsure.setdefault(i, "void: the program answers it differently in two worlds")
        # a value this process cannot read (round 17, A02: keys of one hash, refused by decode)
        if run["ok"] and not _readable(run):
            unsure.setdefault(i, "void: its value cannot be read here")
        # an input past the argument budget, or one whose value differs between the families (a
        # set's order), on which f may still give what stock Python gives (round 26, A04/A05)
        if not run["ok"] and run["error"].startswith(PAST_LIMITS + UNSETTLED):
            unsure.setdefault(i, f"void: {run['error']}")
    # code_f: a student's program read a name of the teacher's imports that the line left out (the
    # student binds it somewhere): stock Python, with the teacher's imports before it, may have read
    # the module (red team round 40, R1: a helper's parameter `string`; round 41, B3: `if False:
    # math = 0`)
    for i, run, _, _, _ in done if task == "code_f" else ():
        for ran in (run, written.get(i, run)):
            missing = re.fullmatch(r"NameError: name '(\w+)' is not defined", ran.get("error") or "")
            if missing and missing.group(1) in left.get(i, ()):
                unsure.setdefault(i, f"void: the teacher's import of {missing.group(1)} was left "
                                     "out (the program binds that name)")
    # f gives the gold(s) on the input(s) as written (as stock Python passes them: one list under
    # two names, `[[]] * 2`; a set in its own order) but not on the plain data: not wrong by
    # stock, not provably right either (round 26, A09; code_f: round 29, A06/A07)
    for i, run, compared, gold, key in done:
        if (i in written and not _matches(run, compared, gold)
                and _matches(written[i], compared, gold)):
            unsure.setdefault(i, "void: f gives the gold on the input as written, not on its "
                                 "plain data (one object under two names, a set's own order)")
    for i, run, compared, gold, key in done:
        if i in unsure:
            results[i].update(void=True, reason=unsure[i])
            continue
        # one of its runs could not go where the others ran: this attempt decides nothing
        if _lost(run) or _lost(written.get(i, run)):
            results[i].update(void=True, reason="void: its zygote was replaced between its runs")
            continue
        if not run["ok"]:
            results[i]["reason"] = "error: " + run["error"]
            continue
        correct = _matches(run, compared, gold)
        results[i]["correct"] = correct
        results[i]["reason"] = "wrong answer"
        if correct:
            results[i]["reason"] = "correct"
        if correct and i in written and not _matches(written[i], compared, gold):
            reason = ("wrong answer: f on the input as written gives another value (as plain "
                      "data it gave the gold)")
            results[i].update(correct=False, reason=reason)
    for i, a in enumerate(attempts):
        if results[i]["reason"].startswith("bad request") or _problem_key(a) not in void:
            continue
        results[i].update(correct=False, void=True, reason=void[_problem_key(a)])
    return results


def _as_written(attempts, entries, done, timeout):
    """code_i answers that are not literals or hold a set (see _proposal), and code_f students'
    programs on such inputs (the entry's "natural" calls), each run as written, `f(<input>)`, in a
    child of its own, of the zygote where f ran on the plain data (`done`: grade's runs) ->
    {attempt number: run}: such an attempt is correct only if f as Python passes the input gives
    the gold too (`[[0]] * 2` is two names for one list)."""
    ran = {i: run for i, run, _, _, _ in done}
    owners, items = [], []
    for i, e, _, _, _ in entries:
        # also one f failed on as plain data: as written it may give the gold (round 27, A10:
        # `[[0] * 3] * 3`, one row under three names, where f raised on three rows)
        if _sandbox_ended(ran[i]) or _lost(ran[i]):
            continue
        calls = e.get("natural")
        if calls is None and _not_plain(e):
            try:
                calls = [_as_written_call(attempts[i]["answer"])]
            except Invalid:
                continue
        if not calls:
            continue
        items.append((e["code"], calls, ran[i]["zygote"]))
        owners.append(i)
    return dict(zip(owners, _run_as_written(items, timeout)))


def _pinned_checks(checks, done, timeout):
    """code_i's and code_f's self-checks: the teacher's program on its own input(s) in a child of
    every zygote that ran one of its attempts (`done`: grade's runs; `checks`: key -> (entry,
    ...)) -> (the problem key of each check, its runs)."""
    where = {}
    for _, run, _, _, key in done:
        where.setdefault(key, set()).add(run.get("zygote", 0))
    work, owners = [], []
    for key, (check, _, _) in checks.items():
        # 0: none of its attempts reached f (each answer failed before): any zygote
        for zygote in sorted(where.get(key, set()) - {0}) or [0]:
            work.append(dict(check, families=(None,), zygote=zygote))
            owners.append(key)
    runs = _call_f(work, (None,), timeout)
    # a check no child of its zygote answered (the zygote died or was replaced since: any
    # program's doing, or a crash) says nothing of this problem: checked in both families
    lost = [n for n, runs_of in enumerate(runs)
            if any(not run["ok"] and not run.get("zygote") for run in runs_of)]
    again = _call_f([dict(work[n], families=(0, 1), zygote=0) for n in lost], (None,), timeout)
    for n, runs_of in zip(lost, again):
        runs[n] = runs_of
    # code_i: and as written where plain data may not carry the input, in each zygote it ran in
    # as plain data, as every such answer is run (_as_written)
    items, owners_of = [], []
    for n, runs_of in enumerate(runs):
        for run in runs_of:
            if work[n].get("natural") and run["ok"]:
                items.append((work[n]["code"], work[n]["natural"], run["zygote"]))
                owners_of.append(n)
    for n, run in zip(owners_of, _run_as_written(items, timeout)):
        runs[n] = runs[n] + [run]
    return owners, runs


def _matches(run, compared, gold):
    """Do a run's values in the slice `compared` equal the gold encodings (Python's ==)?"""
    if not run["ok"]:
        return False
    values = run["values"][compared]
    return len(values) == len(gold) and all(equal(g, v) for g, v in zip(gold, values))


# -------------------------------------------------------------------------- encodings, decided here

def shown_output(encoding, modules):
    """The repr students see of a value: made here, from the decoded gold with the real classes (so
    it is the value's true repr, whatever the program did to a class's __repr__) -> text. Raises
    Invalid when it would not evaluate back to an equal value with the program's imports in scope
    (`modules`: the top-level modules it imports; screen.REPR_NAMES), as AZR's outputs must: nan or
    inf,
    a NaN Decimal, a defaultdict's factory, a Counter without collections imported, ...; or when it
    is longer than MAX_REPR chars or not valid UTF-8 text."""
    # [ours] bounded first: decoding and repr of a 60,000-item value cost the parent ~0.5 s, which
    # a 50-char program can ask for with every proposal (a value kept as text was sized before)
    if type(encoding) is tuple and not encoding[2]:
        raise Invalid(f"output repr longer than {MAX_REPR} chars")
    encoding = _tree(encoding)
    if not repr_fits(encoding, MAX_REPR):
        raise Invalid(f"output repr longer than {MAX_REPR} chars")
    try:
        value = decode(encoding)
    except ValueError:
        raise Invalid("malformed result") from None
    in_scope = set()
    for module in modules:
        if module in screen.REPR_NAMES:
            names = screen.REPR_NAMES[module].split("import")[1]
            in_scope.update(name.strip() for name in names.split(","))
    _showable(value, in_scope)
    text = repr(value)
    if len(text) > MAX_REPR:
        raise Invalid(f"output repr longer than {MAX_REPR} chars")
    _prompt_text(text)
    return text


def repr_fits(encoding, limit):
    """Could the value an encoding (a child's, not decoded yet) stands for have a repr of at most
    `limit` chars? -> False when it surely cannot, after looking at no more than ~limit of its
    nodes. Counts a lower bound of the repr's length: a char per list of the encoding (each value
    and each key-value pair shows at least one), and for each string beyond 24 chars (tags,
    floats in hex) half its extra length (a str's text, an int's or a Fraction's hex digits, a
    Decimal's text, a bytes' hex all show at least that many chars)."""
    stack, units = [encoding], 0
    while stack:
        node = stack.pop()
        if type(node) is list:
            units += 1
            # a tag list has at most 4 entries; a list of items, one per item shown
            if len(node) > limit + 4:
                return False
            stack.extend(node)
        elif type(node) is str:
            units += max(0, len(node) - 24) // 2
        if units > limit:
            return False
    return True


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
        return bool(decode(_tree(gold)) == decode(_tree(encoding)))
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
screen.MARKERS = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)


# nodes that are one branch point each
_BRANCHES = (ast.If, ast.For, ast.While, ast.AsyncFor, ast.ExceptHandler, ast.IfExp, ast.Assert,
             ast.match_case)


def complexity(program):
    """{"ast_depth", "cyclomatic", "loc", "variables"} of a program (all 0 if it does not parse).
    cyclomatic = 1 + branch points (if/loops/except/with-less boolean operands/comprehension
    clauses/match cases/ternaries/asserts); loc = non-blank, non-comment lines; variables = distinct
    bound names."""
    try:
        tree = screen.quiet(ast.parse, program)
    except (SyntaxError, ValueError, RecursionError, MemoryError, TypeError):
        return {"ast_depth": 0, "cyclomatic": 0, "loc": 0, "variables": 0}
    depth, stack, branches, names = 0, [(tree, 1)], 0, set()
    # iterative: model text can nest deeper than Python's recursion limit
    while stack:
        node, d = stack.pop()
        depth = max(depth, d)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, screen.MARKERS):
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
        return screen.quiet(ast.literal_eval, text)
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
