"""A zygote and its children (sandbox.py's design): the process the pool starts, which puts up
its walls once (isolation.py), then forks a child per job. Split from sandbox.py (the pool in the
calling process) because it is the other side of the pipe: run as a script, it never imports the
pool, and what it keeps in memory every child inherits.

  python zygote.py --worker N HOMES UID_BASE PROGRAMS KIND [SITE ...]   (started by sandbox._start)

The child side (_child, _evaluate, _audit_hook) runs model and benchmark code; everything it needs
is bound here before layer 3 disables os functions for user code.
"""
import array
import ctypes
import gc
import io
import json
import marshal
import mmap
import os
import re
import resource
import select
import signal
import sys
import time
import warnings
from importlib.machinery import PathFinder
# bound before layer 3 disables them for user code
from os import (_exit, chdir as _chdir, close as _close, closerange as _closerange, dup2 as _dup2,
                getppid as _getppid, kill as _kill_pid, mkdir as _mkdir, pipe as _pipe,
                read as _read, readv as _readv, rmdir as _rmdir, setsid as _setsid,
                setuid as _setuid, unlink as _unlink, wait4 as _wait4, write as _write)
from signal import ITIMER_PROF, setitimer as _setitimer
from types import FunctionType, SimpleNamespace

# the walls (set-up only) and the value encoding both sides use; the zygote drops both from
# sys.modules (see _zygote_main)
import isolation
from encoding import MAX_UNITS, decode, encode, escape

MEMORY_MB = 1024            # default RLIMIT_AS of a child
STDOUT_CAP = 1 << 20        # bytes of captured stdout kept
ERROR_CAP = 1000            # chars of a child's error message kept
# the error of a value over what its job may send (job["units"]); verify reads it as such
OVER_BUDGET = "output too large (more than the %d units this run may send)"
# bytes of a child's result line (JSON escapes grow text 6x)
RESULT_CAP = STDOUT_CAP * 6 + (1 << 20)
# a child's time limit is CPU seconds; one still running after WALL_FACTOR times that (+ 1 s) of
# wall clock (asleep, blocked, or starved on a host loaded far past its cores) is killed too
WALL_FACTOR = 4
# a model program's child that has waited this long in all (on a lock it holds itself: it has one
# thread, so only a timeout can end a wait; seccomp fails a timed wait at once, so this is a wait
# for ever, a SimpleQueue().get(), or any wait where seccomp is off) is ended then, as a timeout:
# the wall backstop would hold its zygote for 4 x its limit. Waiting: a watch interval (IDLE_S / 4)
# in which the child used under IDLE_SHARE of a CPU, so that a child starved on a loaded host is
# not taken for one asleep
IDLE_S, IDLE_SHARE = 0.5, 0.01
# the collector's thresholds (700, 10, 10 in CPython), and at most how many objects a child keeps
# through its first full collection (_collector_phase)
GC_THRESHOLDS, GC_PAD = gc.get_threshold(), 4096
# bytes of a job's settings, read by the zygote: 4 little-endian 8-byte numbers (see _pack)
HEADER = 32
# the modules a model program may import (screen.py admits only these; measured on AZR's seeds and
# widened to the pure computing modules of the standard library), loaded in every zygote: a
# validation or grading child may import nothing else (_audit_hook)
ALLOWED_MODULES = ("collections collections.abc itertools functools operator math cmath "
                   "statistics fractions decimal numbers heapq bisect array copy string re "
                   "textwrap unicodedata typing enum json json.decoder json.encoder json.scanner "
                   "queue abc struct base64 binascii zlib difflib graphlib keyword").split()
GUARD = {"os": "kill killpg system remove removedirs rmdir unlink rename renames replace truncate "
               "chmod fchmod lchmod chown fchown lchown chroot fork forkpty setuid setgid setsid "
               "setpgid fchdir chdir execv execve execl execle execlp execlpe execvp execvpe "
               "spawnv spawnve spawnvp spawnvpe spawnl spawnle spawnlp spawnlpe popen posix_spawn "
               "posix_spawnp link symlink mkfifo mknod",
         "shutil": "rmtree move chown copyfile copy copy2 copytree", "builtins": "exit quit help",
         "subprocess": "Popen run call check_call check_output getoutput getstatusoutput",
         "socket": "socket create_connection create_server socketpair fromfd"}
# [ours] layer 3 in a model zygote only (graders' benchmark runner sets its own per-input alarm): a
# child's CPU timer and how signals reach it, in signal and _signal (they raise no audit event: a
# program past layer 1 could switch its timer off or block SIGPROF; RLIMIT_CPU backs the timer)
SIGNALS = ("setitimer alarm signal pthread_kill pthread_sigmask raise_signal siginterrupt "
           "set_wakeup_fd sigwait sigwaitinfo sigtimedwait pidfd_send_signal").split()

# ---------------------------------------------------------------------- child side (runs user code)

def describe(e):
    """An exception -> "Type: message", at most 300 chars (+ "..."); "Type" alone when the message
    is empty or fails to print (user code's exception classes)."""
    text = type(e).__name__
    try:
        if str(e):
            text = f"{type(e).__name__}: {e}"
    except BaseException:
        text = type(e).__name__
    if len(text) > 300:
        text = text[:300] + "..."
    return text


class _Capped(io.BytesIO):
    """stdout/stderr sink that keeps the first `cap` bytes and drops the rest (huge outputs)."""
    cap = STDOUT_CAP

    def write(self, b):
        room = self.cap - self.tell()
        if room > 0:
            super().write(bytes(b[:room]))
        return len(b)


# Python's own recursion limit, before anything here changes it
_STOCK_LIMIT = sys.getrecursionlimit()


def _evaluate(job, exec_=exec, eval_=eval, getframe=sys._getframe, limit=sys.setrecursionlimit,
              setprofile=sys.setprofile):
    """The job proper, on code objects the parent compiled -> the JSON text of each value's
    encoding, in order: each expression of job["calls"], then f on each argument list of
    job["args"], then on each of job["packs"] (expressions that make one, evaluated with
    job["pack_code"] alone, after the program's top level: an input as written, one object under
    two names, a set in its own order). The job holds no gold: the parent compares. Order: every
    argument list decoded
    (encodings of (args, kwargs), as plain data) before any user code runs; the program
    (job["code"]) in a namespace of its own; the calls evaluated there; f called from here, not
    from an expression in its namespace, so validation and grading call it alike: same globals,
    same call, arguments built the same way (decoded from plain data)."""
    arguments = []
    for encoding in job.get("args", ()):
        arguments.append(decode(encoding))
    # a model program has the stack room of a script run by stock Python: its top level (and an
    # expression of job["calls"]) as much as a module's, f as much as when that module's top level
    # calls it; measured under the frames of this harness (red team round 18, A08: a room above
    # stock's told f it ran in the sandbox, and f graded right code_i answers wrong)
    # compiled here, before the hook is armed with the code objects (sandbox._pack says why)
    job["code"] = _compiled(job["code"], "<program>", "exec")
    job["calls"] = [_compiled(call, "<call>", "eval") for call in job.get("calls", ())]
    if "packs" in job:
        job["pack_code"] = _compiled(job["pack_code"], "<program>", "exec")
        job["packs"] = [_compiled(pack, "<call>", "eval") for pack in job["packs"]]
    under = 0
    if job.get("sealed"):
        # before the hook is armed (setting a profiler is an event it refuses)
        setprofile(_sealing)
    if job.get("audit"):
        _collector_phase(*_phase[0])
        frame = getframe(0)
        while frame is not None:
            under, frame = under + 1, frame.f_back
        _watch(job)
        limit(_STOCK_LIMIT + under)
    # a module's own __doc__ (None without a docstring), not the builtins module's (red team round
    # 10, A11)
    ns = {"__name__": "__main__", "__doc__": None}
    exec_(job["code"], ns)
    if "packs" in job:
        # a code_f input as written sees the teacher's imports alone, as its plain data did (red
        # team round 30, A04-A13: in a student's globals its names were the student's), evaluated
        # after the program's top level ran, as python3 evaluates a call's arguments (round 32,
        # A04/A13: before it, the program's decimal context overrode the input's)
        inputs = {"__name__": "__main__", "__doc__": None}
        exec_(job["pack_code"], inputs)
        arguments += [eval_(pack, inputs) for pack in job["packs"]]
    # one size budget for all the job's values: ten inputs of a code_f problem, each a list just
    # under a value's cap, made lines of 6.5 MB the parent parsed whole (red team round 8, S02).
    # The parent says what it can use of them (job["units"], see verify.OUTPUT_UNITS): a 70-char
    # program's 54,500-unit dict, refused in the end for its repr, was read and parsed first, ~1 MB
    # a line, ~0.25 s of the parent's CPU each (red team round 13b, A08/A09)
    units = min(job.get("units", MAX_UNITS), MAX_UNITS)
    values, budget = [], [units]
    # a sealed job's expressions (code_i answers, inputs that are not literals) run in a copy of
    # the program's globals, and no code of the program may run from them: f, a helper, a method,
    # a generator, an __eq__, by whatever route (what a module holds: red team round 37, A1, f set
    # as an attribute of re.IGNORECASE; round 38, a class's dict): a search for the input
    here = ns
    if job.get("sealed"):
        here = dict(ns)
        _sealed.append(ns)
    for call in job.get("calls", ()):
        values.append(_encoded(eval_(call, here), budget, units))
    if arguments:
        f = ns["f"]
        if under:
            limit(_STOCK_LIMIT + under - 1)
        for args, kwargs in arguments:
            values.append(_encoded(f(*args, **kwargs), budget, units))
    return values


# Layer 3 for model programs (validation and grading jobs: job["audit"], run by model zygotes),
# from just before the program runs: an audit hook (installed by audithook.c, which calls it with
# stack room of its own; Python code cannot remove one) that lets through only what computing
# needs, over a sys.modules holding only the allowed modules (_models_only), so that importing
# anything else (os, sys, ctypes: loaded in the zygote) is an import the hook sees and refuses.
# Behind the static screen: what it missed (a door to eval, a frame, a code object) fails here.
_AUDIT_PASS = frozenset(("builtins.id", "array.__new__", "sys.unraisablehook"))
_AUDIT_SETTABLE = frozenset(("__module__", "__qualname__", "__name__", "__doc__", "__bases__",
                             "__defaults__", "__kwdefaults__"))
# the one compile the allowed modules make: collections.namedtuple's __new__ (typing.NamedTuple too)
_NAMEDTUPLE_NEW = re.compile(r"lambda _cls, (?P<a>[\w, ]*): _tuple_new\(_cls, \((?P=a)\)\)")
# the event that arms the hook: raised by the harness (_watch) with the job's own code objects
_ARM = "populora.arm"


def _watch(job):
    """Arm layer 3 in a validation or grading child (see _audit_hook; its zygote installed the hook,
    disarmed, and kept only the allowed modules in sys.modules: _models_only)."""
    packs = (job["pack_code"], *job["packs"]) if "packs" in job else ()
    sys.audit(_ARM, (job["code"], *job.get("calls", ()), *packs))


def _audit_hook(refused):
    """-> the audit hook of layer 3 (a fresh one, disarmed). Its state lives in this closure, which
    nothing but the hook (held by the interpreter, and by no Python object: sys offers no way to
    list hooks; gc's listings are refused events) can reach, and it changes one way only: the first
    _ARM event arms it for good with the job's code objects; a second one is refused. So no data
    write by user code can disarm it or widen what it lets through.

    Armed, it returns for what computing needs and raises for the rest (an import of a module not
    allowed, open, compile, exec of code that is not the job's, a code object or function made, a
    frame, a restricted attribute read such as gi_frame or __code__, os / ctypes / socket / marshal
    / gc / ... events). The one frame it lends is _caller_module's own (sys._getframe in a model
    child), which reads a module name from the stack and lets go of it."""
    # armed, the job's code objects, whether the next exec is of a compile allowed just before, the
    # frame whose code the hook is reading (that read is an event too)
    state = {"armed": False, "ours": (), "granted": False, "reading": None}
    # what it lets through, held here too: rebinding the module's names changes nothing
    arm, passing, settable, grant = _ARM, _AUDIT_PASS, _AUDIT_SETTABLE, _NAMEDTUPLE_NEW
    lender = _caller_module.__code__

    def hook(event, args):
        if not state["armed"]:
            if event == arm:
                state.update(armed=True, ours=args[0])
            return
        if event in passing:
            return
        if event == "exec":
            # a plain loop: a generator here costs a child ~10 copy-on-write faults per exec
            for code in state["ours"]:
                if args[0] is code:
                    return
            if state["granted"]:
                state["granted"] = False
                return
        elif event == "compile":
            # eval hands the hook its text as UTF-8 bytes
            source = args[0]
            if type(source) is bytes:
                source = source.decode("utf-8", "replace")
            if type(source) is str and grant.fullmatch(source):
                state["granted"] = True
                return
        # a class's names, bases (typing.NamedTuple sets them) and a function's defaults; not a
        # function's __code__ nor an object's __class__
        elif event in ("object.__setattr__", "object.__delattr__"):
            if type(args[1]) is str and args[1] in settable:
                return
        elif event == "import" and type(args[0]) is str and args[0].startswith("encodings."):
            # every codec is loaded (_models_only): an encodings module still to import does not
            # exist, so the codec search gets the ImportError stock Python's import gives and says
            # LookupError (red team round 14, A03: an unknown codec's name was a recorded refusal,
            # and right code_i answers such as 'xyz' were graded wrong)
            raise ModuleNotFoundError(f"No module named {args[0]!r}", name=args[0])
        elif event == "sys._getframe":
            state["reading"] = args[0]
            lent = args[0].f_code is lender
            state["reading"] = None
            if lent:
                return
        elif event == "object.__getattr__" and args[0] is state["reading"]:
            return
        # kept where the program cannot reach it: a refusal it catches still fails the job
        refused.append(event)
        raise RuntimeError(f"not allowed in the sandbox: {event}")
    return hook


def _caller_module(depth=0, getframe=sys._getframe, /):
    """sys._getframe in a model child (_models_only). The standard library asks it for the module
    name of a caller (namedtuple, typing's TypeVar, NewType, TypedDict and protocol checks, enum)
    and falls back to another one when it fails ('collections', None: red team round 12, A03):
    -> an object whose one attribute is f_globals, a fresh dict holding the `__name__` of the frame
    `depth` calls up, as stock Python's. Called by audithook.c's builtin `sys._getframe` (which
    parses `depth` as stock's does), whose caller is this function's caller. No frame leaves this
    function: the real one (a default no program can reach) returns this function's own frame, the
    one frame the hook lends (_audit_hook), and the walk up from it reads names only."""
    frame = getframe(0)
    # the real one counts a depth below 0 as 0
    for _ in range(max(depth, 0) + 1):
        frame = frame.f_back
        if frame is None:
            raise ValueError("call stack is not deep enough")
    names = {}
    if "__name__" in frame.f_globals:
        names["__name__"] = frame.f_globals["__name__"]
    return SimpleNamespace(f_globals=names)


def _compiled(text, name, mode):
    """A job's text -> its code object, as stock Python compiles a script (its compile-time
    warnings unshown, as the parent's screen leaves them); a code object as it is."""
    if type(text) is not str:
        return text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile(text, name, mode, dont_inherit=True)


def _encoded(value, budget, units):
    """A value -> the JSON text of its canonical encoding (ValueError if it is not plain data or
    larger than what is left of `budget`, [units] of the job's `units`, which it spends)."""
    parts = []
    try:
        encode(value, parts, budget)
    except ValueError:
        if budget[0] >= 0:
            raise
    # encode checks the budget before each node, so a value's last string or number could
    # overdraw it unnoticed ('a' * 10**6: a 1 MB line)
    if budget[0] < 0:
        raise ValueError(OVER_BUDGET % units)
    return "".join(parts)


def _outcome(job):
    """Run a job -> its result line: one JSON object {"ok", "error", "stdout", "values"} (values:
    JSON texts from _evaluate), built with the C string escaper alone (json.dumps costs ~80
    copy-on-write faults in a fresh child). User code that found the pipe could write such a line,
    but not the job's token before it (_job); the parent trusts nothing in it either (see
    _parse_answer)."""
    values, error = None, ""
    try:
        values = _evaluate(job)
    # SystemExit, KeyboardInterrupt, MemoryError, ... all contained
    except BaseException as e:
        error = describe(e)
    # a refusal of the audit hook that the program caught (`except Exception: return "..."`) would
    # make a gold of the sandbox's choosing, not Python's (red team round 10, A12)
    if _refused:
        caught = "" if "not allowed in the sandbox" in error else " (the program caught it)"
        values, error = None, f"not allowed in the sandbox: {_refused[0]}{caught}"
    try:
        _out.flush()
        stdout = _out.buffer.getvalue().decode("utf-8", "replace")
    except BaseException:
        stdout = ""
    if values is None:
        line = '{"ok": false, "error": %s, "stdout": %s, "values": null}\n'
        return line % (escape(error), escape(stdout))
    line = '{"ok": true, "error": "", "stdout": %s, "values": [%s]}\n'
    return line % (escape(stdout), ", ".join(values))


def _guard():
    """Layer 3 (after HumanEval's reliability_guard): defence in depth behind layer 1."""
    for module, names in GUARD.items():
        for name in set(names.split()) & set(dir(sys.modules.get(module))):
            setattr(sys.modules[module], name, None)


class _GuardHook:
    """Layer 3 for GUARD modules zygotes do not load (banned in screened code; each page costs
    every fork)."""
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in GUARD:
            return None
        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            load = spec.loader.exec_module

            def exec_module(module):
                load(module)
                _guard()

            spec.loader.exec_module = exec_module
        return spec


def _collector_phase(young, collections, older, pad, collect=gc.collect):
    """The garbage collector's state at a model program's start, random per child (drawn by the
    zygote: _job): how many objects the program makes before a cycle of its own is collected (a
    generator's finally runs then; a freed address is reused) was the same in every child, and
    not stock's (red team round 21, A01/A02: 628 where two stock builds of 3.11 count 481 and
    655; round 22, A01/A04: the full collections likewise, after 11 of the middle generation's
    where stock counts 9 or 10, as site.py's start-up ran 2 more). A gold no student derives and a
    tell of the sandbox; now such a count differs between a problem's runs (invalid, or a void
    attempt), as between Python builds. From one full collection: `pad` objects that live through
    it (the oldest generation's size, which gates the next full collection), `older` collections
    of the middle generation, `collections` of the youngest, `young` objects made."""
    _phase.append([[] for _ in range(pad)])
    collect()
    for _ in range(older):
        collect(1)
    for _ in range(collections):
        collect(0)
    _phase.append([[] for _ in range(young)])


def _child(settings, requests, wfd, limits, uid, token):
    """Runs in a child the zygote forked for one job, inside a fresh empty cwd of its own: read the
    job itself (8-byte length + marshal bytes) from the request pipe, which only this child reads
    while it is alive (the zygote reads the next job's settings once it is gone), so no job ever
    passes through the zygote, of which every later child is a copy; acknowledge it (a byte of a
    page shared with the zygote: the pipe is in step), finish the lock-down, run, write `token` (the
    zygote's, for this job) and one JSON line to wfd, _exit. Never returns. The syscalls used are
    this module's own bindings (layer 3 sets os.<name> = None for user code); user code starts after
    every limit."""
    try:
        # a process group and a session of its own: kill(0) reaches this child alone, not its
        # zygote's group (which holds, for a normal user, the process the pool started outside the
        # PID namespace: red team round 7, E05)
        _setsid()
        # layer 4: SIGPROF (not caught: it ends the child) once it has used its time in CPU, by
        # itself, whatever the load of the host (RLIMIT_CPU and the zygote's wall clock back it)
        _setitimer(ITIMER_PROF, max(settings["timeout_ms"], 1) / 1000)
        # the child's only reference to a timer function (signal's are None in a model zygote): a
        # program past the screen and the audit hook finds none to turn its timer off with
        globals().pop("_setitimer")
        if uid:
            # RLIMIT_NPROC = 0 (inherited) is binding now that root is gone; so are its capabilities
            _setuid(uid)
        # no capability left: a child that stays root (no uid drop) or holds a user namespace's
        # cannot raise its limits, override file modes or trace its zygote
        elif _capset(_caps[0], _caps[1]) != 0:
            raise OSError("capset refused")
        # out of the group the pool kills with its zygote: SIGKILL when the zygote dies
        # (PR_SET_PDEATHSIG, set after the uid drop, which clears it), or now if it died already
        if _libc.prctl(1, 9, 0, 0, 0) != 0 or _getppid() != _zygote_pid:
            raise OSError("no parent-death signal")
        payload = _take(requests, settings["length"])
        _closerange(3, wfd)
        _closerange(wfd + 1, 1 << 16)
        if len(payload) != settings["length"]:
            raise OSError("the job was cut short")
        _acknowledged[0] = 1
        job = marshal.loads(payload)
        del payload
        if job.get("stdin"):
            _stdin(job["stdin"])
        for kind, value in limits:
            resource.setrlimit(kind, value)
        # prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program)
        if _signal_filter is not None and _libc.prctl(22, 2, _signal_filter, 0, 0) != 0:
            raise OSError("seccomp filter refused")
        # set up (the acknowledgement's second step): a child whose set-up failed retires its zygote
        # (what failed may fail again in every later child, a limit lowered in the zygote say)
        _acknowledged[0] = 2
        line = _outcome(job)
    except BaseException as e:
        error = escape("sandbox set-up failed: " + describe(e))
        line = '{"ok": false, "error": %s, "stdout": "", "values": null}\n' % error
    try:
        _write_all(wfd, token + line.encode())
    except BaseException:
        pass
    _exit(0)


def _stdin(text):
    """fd 0 := a memory file holding `text` (a job's stdin; the zygote's fd 0 is /dev/null)."""
    fd = os.memfd_create("stdin")
    _write_all(fd, text.encode("utf-8", "surrogateescape"))
    os.lseek(fd, 0, 0)
    _dup2(fd, 0)
    _close(fd)


# -------------------------------------------------------------------------------------- zygote side

# a page shared with each child (_serve), and what it is reset to
_acknowledged = None
_ZERO_PAGE = bytes(mmap.PAGESIZE)
# the zygote's state, set in the zygote: libc's functions (resolved there: children must not
# dlopen after fork), /dev/null's fd, capset's arguments, the Landlock ruleset and the per-child
# seccomp filter
_libc = _pyfork = _null = _capset = _caps = None
# the zygote's pid (1 in its PID namespace), a child's parent
_zygote_pid = None
# the events the audit hook refused in this child (_audit_hook)
_refused = []
# [the collector's phase for the next child, drawn by the zygote before each fork; then, in the
# child, the objects _collector_phase keeps till it exits]
_phase = [(0, 0, 0, 0)]
# a model zygote ends children that have waited IDLE_S in all
_idle = False
_landlock = _signal_filter = None
# audithook.c, built by the parent, loaded by a model zygote
_audithook = None
# the capped stdout every child inherits (kept here in case user code rebinds sys.stdout)
_out = None
# seccomp programs kept alive (_seccomp_load); the scratch folders' times at the last clean
# (an array of C ints: a time kept until the next job is no object on the heap, see _serve)
_bpf, _scratch_times = [], array.array("q")
# what isolation.py made: the folders hidden, the private tmpfs folders, the interpreter's
# folders put back inside one (the clean-up spares them)
_hidden, _scratch, _kept = (isolation.made[key] for key in ("hidden", "scratch", "kept"))
# the folder the children's cwds are made in, with its identity (_identity)
_jobs, _jobs_identity = "", None


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def _seccomp_load(program):
    """Enter a BPF program (hex) as a seccomp filter: seccomp(SECCOMP_SET_MODE_FILTER). No binding
    does it from bytes; the zygote's one call. Returns the sock_fprog address, kept alive, for a
    child's later call."""
    code = bytes.fromhex(program)
    _bpf.append(_SockFprog(len(code) // 8, code))
    return ctypes.addressof(_bpf[-1])


def _zygote_main(number, homes, uid_base, programs, kind="model"):
    """A zygote's life (sandbox.py run as a script, see the end of this file): lock itself down
    layer by layer, measuring each, send the parent that report (its "hello"), then fork a child per
    job until EOF. `programs`: seccomp_programs() of the parent."""
    global _landlock, _zygote_pid
    programs = {"zygote": "", "signals": "", "why": "no BPF given", **programs}
    # set by the parent so children never resolve symbols (GOT writes); not for user code to see
    os.environ.pop("LD_BIND_NOW", None)
    _load_libc()
    repo = os.path.dirname(os.path.realpath(__file__))
    # before the mount namespace can hide the folder they are in
    # (the path the parent built it at; the default one when run by hand)
    hook = os.environ.pop("POPULORA_AUDIT_HOOK", None)
    if kind == "model":
        global _audithook
        _audithook = isolation.load_audit_hook(hook or isolation.audit_hook_path())
    try:
        import landlock
        import landlock.plumbing
    except ImportError as e:
        landlock = e
    layers = isolation.namespaces(repo, homes)
    # after the PID namespace, if any: the children's parent
    _zygote_pid = os.getpid()
    uid = _uid_drop(layers, uid_base + number % 100_000)
    # inherited by every child
    for limit, value in ((resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    base, jobs = _jobs_folder(layers)
    for name in ALLOWED_MODULES:
        __import__(name)
    # user code must not import the repo's modules: not from the folder, and not encoding.py, loaded
    # (this module keeps the functions it took from it)
    if sys.path and sys.path[0] == repo:
        del sys.path[0]
    sys.modules.pop("encoding", None)
    sys.modules.pop("isolation", None)
    readable = isolation.readable(repo)
    _landlock, why = isolation.landlock_setup(landlock, readable, [jobs] + _scratch)
    # unknown: the first clean lists them
    _scratch_times.extend([0, 0] * len(_scratch))
    layers["landlock"] = [_landlock is not None, why]
    _seccomp_layers(layers, programs, uid)
    hello = {"layers": layers, "hidden": _hidden, "pid": os.getpid(), "base": base,
             "hash_seed": os.environ.get("PYTHONHASHSEED")}
    requests, replies = _private_stdio()
    # PR_SET_NO_NEW_PRIVS, inherited: no exec can gain privileges
    _libc.prctl(38, 1, 0, 0, 0)
    # layer 3, once here: every child inherits disabled functions
    _guard()
    sys.meta_path.insert(0, _GuardHook)
    _warm_up()
    hello["modules"] = len(sys.modules)
    if kind == "model":
        global _idle
        _idle = True
        _models_only()
        hello["modules"] = len(sys.modules)
    # keep the collector off the zygote's pages in children
    gc.freeze()
    # the zygote enters the domain itself: children inherit it, free
    if _landlock is not None:
        ctypes.set_errno(0)
        isolation.made["restrict"](_landlock, 0)
        os.close(_landlock)
    # seccomp(SECCOMP_SET_MODE_FILTER, 0, program)
    # prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program): the same on every architecture
    if programs["zygote"] and _libc.prctl(22, 2, _seccomp_load(programs["zygote"]), 0, 0) != 0:
        raise OSError("seccomp filter refused")
    _write_all(replies, (json.dumps(hello) + "\n").encode())
    _serve(requests, replies, jobs, uid)


# codecs a model program may name (str.encode looks them up by importing encodings.<name>):
# looked up once in a model zygote, whose children may import nothing
CODECS = ("ascii", "latin-1", "utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32",
          "utf-32-le", "utf-32-be", "cp1252", "cp437", "unicode_escape", "raw_unicode_escape",
          "utf-7", "idna", "punycode", "rot13", "hex", "base64")


def _models_only():
    """A model zygote, once: sys.modules keeps only the allowed modules (with their C parts), the
    codecs' and warnings (children import nothing: _audit_hook refuses it), so that os, sys, ctypes,
    builtins ... loaded here are imports, which the hook sees, not lookups; the hook is installed
    here, disarmed, its code made ready (quickened) here rather than written in every child; the
    SIGNALS functions and the enum functional API are disabled for user code."""
    import codecs
    import encodings
    import pkgutil
    # every codec of the standard library (~120 small modules, ~30 ms once per zygote), so that a
    # program's 'abc'.encode('cp1251') is a lookup, not an import the hook refuses (red team round
    # 13, A06b: a right code_i answer naming a codec not loaded was graded wrong)
    names = {module.name for module in pkgutil.iter_modules(encodings.__path__)}
    for name in sorted(names | set(CODECS)):
        try:
            codecs.lookup(name)
        except (LookupError, ImportError):
            # not a codec (aliases), or another platform's (mbcs, oem)
            pass
    for module in (signal, sys.modules["_signal"]):
        for name in set(SIGNALS) & set(dir(module)):
            setattr(module, name, None)
    keep = set()
    for name in ALLOWED_MODULES:
        keep.add(name.split(".")[0])
    for name in list(sys.modules):
        top = name.split(".")[0]
        if top.lstrip("_") in keep or top in ("encodings", "codecs", "_codecs", "warnings"):
            continue
        del sys.modules[name]
    # a hook of the same code, armed and run here, then dropped: its code is quickened here rather
    # than written in every child
    code = compile("0", "<w>", "eval")
    warm = _audit_hook([])
    warm(_ARM, ((code,),))
    for _ in range(9):
        warm("builtins.id", (0,))
        warm("exec", (code,))
    # installed here, disarmed (the zygote's own events pass): a child only arms it (_watch). With
    # it, sys._getframe's stand-in: the library's one way to a caller's module name, lending no
    # frame (Python 3.12's sys._getframemodulename goes: its callers fall back to sys._getframe).
    # Both are called from audithook.c, whose room keeps their frames out of the program's count
    sys._getframe = _audithook.install(_audit_hook(_refused), _caller_module, sys)
    if hasattr(sys, "_getframemodulename"):
        del sys._getframemodulename
    # the enum functional API (`E("X", {name: value})`) and _convert_ make class attributes named by
    # text made at run time; the screen refuses the spellings it can see, this every other one (an
    # alias, `E.__call__`, functools.partial(E), map(E, ...)), a refusal that fails the job
    # even if caught (stock Python makes the class); every enum class is made already
    meta = sys.modules["enum"].EnumMeta
    meta._create_ = _stand_in(meta._create_, _no_functional_enum)
    meta._convert_ = _stand_in(meta._convert_, _no_functional_enum)
    # random numbers, which the screen refuses by name, through statistics (its random is seeded
    # alike in every child of a zygote: a coin whose bias a teacher chose, red team round 18, A06)
    normal = sys.modules["statistics"].NormalDist
    normal.samples = _stand_in(normal.samples, _no_random)
    # a count of the abstract-class registrations this process made (30 in every zygote, 23-25 in
    # stock as root or not: a gold nobody derives, and a tell of the sandbox; round 19, A02)
    # what user code can reach: the kept modules, and threading, which queue holds (pruned from
    # sys.modules above; never time, whose clock the zygote reads)
    reachable = [*sys.modules.values(), sys.modules["queue"].threading]
    _everywhere(sys.modules["abc"].get_cache_token, _no_cache_token, reachable)
    # the clock that queue's and threading's timed waits read in Python loops (Queue.get/put,
    # Condition.wait_for with a timeout): a program counts those loops, or times its own code
    # against a timeout, and so tells the sandbox from stock Python (round 20: an audited call such
    # as array.array's runs this hook, 6x stock's time), and would see that a timed wait did not
    # sleep (isolation._futex_rules). The waits themselves (a lock's, a Condition's, SimpleQueue's)
    # read no Python clock
    queue = sys.modules["queue"]
    _everywhere(queue.time, _no_clock, reachable)
    # a lone surrogate printed: stock Python's stdout raises UnicodeEncodeError (a UTF-8 locale)
    # or writes a byte (\udc80-\udcff under C.UTF-8's surrogateescape), so what a program sees of
    # that print depends on the locale; the capped stdout's backslashreplace printed it, which no
    # stock stdout does (red team round 21, A04: a tell, 48 of 48 right code_i answers wrong)
    codecs.register_error("sandbox.print", _no_surrogate_print)
    _out.reconfigure(errors="sandbox.print")


def _stand_in(original, refusal):
    """`refusal` (a function that refuses) dressed as `original`, for a model child: what a program
    may read of a function (its name, qualified name, module, docstring, repr; the screen refuses
    the rest) is original's. A builtin's stand-in is a builtin (audithook.disguise); a Python
    function's, a copy of refusal under original's names (red team round 24, A04-A06: a stand-in's
    own names and docstring were a tell, 23 of 23 right code_i answers wrong)."""
    if type(original) is type(len):
        return _audithook.disguise(original, refusal)
    copy = FunctionType(refusal.__code__, refusal.__globals__, original.__name__)
    for name in ("__qualname__", "__module__", "__doc__", "__defaults__", "__kwdefaults__"):
        setattr(copy, name, getattr(original, name))
    return copy


def _everywhere(original, refusal, modules):
    """Bind _stand_in(original, refusal) wherever one of `modules` binds `original` (its own
    module's name and every `from x import` of it: functools.get_cache_token was abc's original,
    round 25, A01/A03: 30 registrations in every child, 23-25 in stock, and a tell beside abc's)."""
    stand_in = _stand_in(original, refusal)
    for module in modules:
        for name, value in list(getattr(module, "__dict__", {}).items()):
            if value is original:
                setattr(module, name, stand_in)


# the globals of a program whose code may no longer run in this child (_evaluate)
_sealed = []


def _sealing(frame, event, arg):
    """The profiler of a sealed job: refuse a call into the program's code (a frame whose globals
    are the program's) once _sealed holds them."""
    if event == "call" and _sealed and frame.f_globals is _sealed[0]:
        _refuse("the program's own code, run from an answer")


def _refuse(what):
    """Refuse `what` in a child as the audit hook does: recorded in _refused, so the job fails even
    if the program catches the RuntimeError (a gold of the sandbox's choosing, not Python's: red
    team round 13a, A01/A02)."""
    _refused.append(what)
    raise RuntimeError(f"not allowed in the sandbox: {what}")


def _no_functional_enum(*args, **kwargs):
    _refuse("the enum functional API")


def _no_random(*args, **kwargs):
    _refuse("random numbers (statistics.NormalDist.samples)")


def _no_cache_token(*args, **kwargs):
    _refuse("abc.get_cache_token (a count of this process's class registrations)")


def _no_surrogate_print(error):
    _refuse("printing a lone surrogate (stock Python raises or writes a byte, by locale)")


def _no_clock(*args, **kwargs):
    _refuse("the clock (a timed wait of queue or threading that reads it)")


def _load_libc():
    """libc's functions the zygote calls through ctypes, resolved before any fork (children must not
    dlopen)."""
    global _libc, _pyfork, _capset, _caps
    _libc = ctypes.CDLL(None, use_errno=True)
    _pyfork = ctypes.PyDLL(None).fork
    _libc.prctl.argtypes = (ctypes.c_int,) + (ctypes.c_ulong,) * 4
    # capset's arguments, made here: _LINUX_CAPABILITY_VERSION_3 for this process, every set empty
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    _caps = (header, (ctypes.c_uint32 * 6)())
    # resolved and its call path run here (capget, harmless): done in each child, they cost ~80
    # copy-on-write faults, a quarter of a child's
    _capset = _libc.capset
    for _ in range(3):
        _libc.capget(header, (ctypes.c_uint32 * 6)())


def _uid_drop(layers, uid):
    """As root: children will run as `uid` (this pool's range) if it can read the interpreter's
    files; the zygote takes the children's gid and no groups now. Reports layers["uid_drop"]. ->
    the children's uid, 0 for none."""
    if os.geteuid() != 0:
        layers["uid_drop"] = [False, "not root: children keep the user's uid (RLIMIT_NPROC = 0 "
                                     "still binds)"]
    elif not isolation.uid_works(uid):
        layers["uid_drop"] = [False, f"uid {uid} cannot read the interpreter's files"]
    else:
        layers["uid_drop"] = [True, "children run as a uid of this pool's random range"]
    if not layers["uid_drop"][0]:
        return 0
    # still root (euid 0) but with the children's gid and no groups
    os.setgroups(())
    os.setgid(uid)
    # root is exempt (it still forks), the children's uid not
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    return uid


def _jobs_folder(layers):
    """The folder the children's cwds are made in: /tmp/jobs with the mount namespace (a private
    tmpfs), else a fresh folder under the system's temporary folder -> (base, jobs folder)."""
    global _jobs, _jobs_identity
    if "/tmp" in _scratch:
        base = "/tmp"
    elif _scratch:
        base = _scratch[0]
    else:
        import tempfile
        # a tmpfs if there is one: a child can make ~10^5 entries in its time, and removing them
        # from a disk filesystem can take minutes (ext4 with discard: ~3 ms an entry)
        where = None
        if isolation.is_tmpfs("/dev/shm"):
            where = "/dev/shm"
        base = tempfile.mkdtemp(prefix="populora-sandbox-", dir=where)
    # like /tmp (which it is, with the mount namespace)
    os.chmod(base, 0o1777)
    # the zygote's: children reach their own cwd in here, make no name
    jobs = base + "/jobs"
    os.mkdir(jobs, 0o711)
    _jobs, _jobs_identity = jobs, _identity(jobs)
    # tempfile in a child: its own cwd
    os.environ["TMPDIR"] = "."
    os.umask(0)
    return base, jobs


def _seccomp_layers(layers, programs, uid):
    """Reports layers "seccomp", "seccomp_signals" and "no_fork"; loads the per-child signal filter
    where children keep our uid and no PID namespace hides other processes, or stay root."""
    global _signal_filter
    signals = not layers["uid_drop"][0] and (not layers["pid_namespace"][0] or os.geteuid() == 0)
    layers["seccomp"] = [bool(programs["zygote"]), programs["why"]]
    layers["seccomp_signals"] = [bool(programs["zygote"]), "children cannot signal other processes "
                                 "(uid drop or PID namespace)"]
    if signals and programs["zygote"]:
        layers["seccomp_signals"][1] = "a second filter per child denies signals and fork (~0.2 ms)"
        _signal_filter = _seccomp_load(programs["signals"])
    layers["no_fork"] = [True, "RLIMIT_NPROC = 0 binds: the children are not root"]
    if uid == 0 and os.geteuid() == 0:
        layers["pid_namespace"][1] = "not made as root (children that stay root: no signals)"
        how = "they can fork"
        if _signal_filter is not None:
            how = "seccomp denies fork"
        how = f"children stay root (NPROC does not bind): {how}"
        layers["no_fork"] = [_signal_filter is not None, how]


def _private_stdio():
    """The protocol moves to private fds -> (requests fd, replies fd). Children inherit fd 0 (their
    job's stdin), capped sys.stdout/err, fds 1/2 /dev/null."""
    global _null, _out
    requests, replies = os.dup(0), os.dup(1)
    # kept: a job's stdin file is swapped back for it after the job
    _null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(_null, fd)
    stdin = io.BufferedReader(io.FileIO(0, "r", closefd=False))
    sys.stdin = io.TextIOWrapper(stdin, encoding="utf-8", errors="replace")
    text = {"encoding": "utf-8", "errors": "backslashreplace", "write_through": True}
    _out = io.TextIOWrapper(_Capped(), **text)
    sys.stdout = _out
    sys.stderr = io.TextIOWrapper(_Capped(), **text)
    return requests, replies


def _warm_up():
    """A fixed job of ours quickens the child-side code here, not in every child (~10 fewer
    copy-on-write faults per child)."""
    arguments = ["tuple", [["tuple", [["list", [["int", "1"], ["str", "a"]]]]], ["dict", []]]]
    warm = {"code": compile("def f(*x):\n    return list(x)", "<w>", "exec"),
            "calls": [compile("f(2.5, (1,))", "<w>", "eval")], "args": [arguments]}
    for _ in range(18):
        _outcome(warm)


def _serve(requests, replies, jobs, uid):
    """The zygote's loop: read a job's settings (HEADER bytes: the payload's length, the time and
    memory limits, the stdout cap; numbers only), fork its child (which reads the payload itself),
    send back the header and the child's line; until EOF (shutdown, or the parent died) or a failed
    clean-up (the parent replaces a zygote that retires)."""
    # every child's line passes through this buffer; an anonymous mapping the children do not
    # inherit, whose pages are given back (zeroed) after each job: no later child can find an
    # earlier one's result
    result = mmap.mmap(-1, RESULT_CAP, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    result.madvise(mmap.MADV_DONTFORK)
    view = memoryview(result)
    # a child's acknowledgement that it read its whole job: one page shared with it, zeroed after
    # every job (a child may write all of it; the next one finds zeros)
    global _acknowledged
    _acknowledged = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    # every child is forked from the same heap: all the loop makes for a job it lets go of before
    # the next (_one's locals; one dict for the settings, which made the heap grow a block a job),
    # so the addresses a program sees depend on its zygote and its own job, not on how many jobs
    # came before (a per-job bit no per-zygote check can catch: red team round 5, H01-H03)
    settings = {}
    # a job of our own first, its answer dropped: the loop's first pass makes what it keeps
    # (first-use caches, the settings dict's table), so a zygote's first child saw another heap
    # than every later one, and an attempt run there could differ from its check (red team round
    # 6, I04)
    own = _pipe()
    body = marshal.dumps({"code": compile("def f(x):\n    return [x]", "<w>", "exec"),
                          "calls": [compile("f(1)", "<w>", "eval")], "audit": _idle})
    numbers = (len(body), 1000, MEMORY_MB, STDOUT_CAP)
    _write_all(own[1], b"".join(n.to_bytes(8, "little") for n in numbers) + body)
    _close(own[1])
    going = _one(own[0], _null, jobs, uid, view, result, settings)
    _close(own[0])
    del own, body, numbers
    while going and _one(requests, replies, jobs, uid, view, result, settings):
        pass


def _one(requests, replies, jobs, uid, view, result, settings):
    """One job of _serve's loop -> whether to go on (False at EOF or when the zygote retires)."""
    header = _take(requests, HEADER)
    if not header:
        return False
    for k, key in enumerate(("length", "timeout_ms", "memory_mb", "stdout_cap")):
        settings[key] = int.from_bytes(header[8 * k:8 * k + 8], "little")
    # unguessable: no child can prepare the next one's
    workdir = f"{jobs}/{os.urandom(8).hex()}"
    header, start, size, retire = _job(settings, requests, workdir, uid, view)
    _write_all(replies, header)
    _write_all(replies, view[start:size])
    result.madvise(mmap.MADV_DONTNEED, 0, size)
    for key in settings:
        settings[key] = None
    return not retire


def _job(settings, requests, workdir, uid, view):
    """Fork a child for one job in a fresh cwd, made here and given to the child's uid; the child
    reads the job from `requests`. Wait for its acknowledgement, result line and exit (its CPU time
    is limited in the child; here, the wall-clock backstop), kill it, clean up. Reads the child's
    output into `view` -> (header b"<pid>\t<retire>\t<cpu s>\t<wall s>\t", start and end of the
    line in view, retire), where the line is the one the harness wrote after this job's token, or
    one of ours, and retire says the clean-up failed, the request pipe may be out of step (no
    acknowledgement in the shared page) or the child's set-up failed."""
    timeout = settings["timeout_ms"] / 1000
    cap = min(settings["stdout_cap"], STDOUT_CAP)
    # a child's limit is CPU time (_child); the wall clock only ends one that sleeps or waits
    backstop = timeout * WALL_FACTOR + 1.0
    # kept from one job to the next only when it changes (see _serve)
    if cap != _out.buffer.cap:
        _out.buffer.cap = cap
    limits = _limits(settings["memory_mb"], timeout, uid)
    # seccomp denies chown (to us too): with a uid drop the cwd is open to all (umask 0), and still
    # reachable by its own child only: the jobs folder is ours, 0711, and the name random
    mode = 0o700
    if uid:
        mode = 0o777
    _mkdir(workdir, mode)
    _chdir(workdir)
    r, w = _pipe()
    if isolation.made["last_pid"] is not None:
        fd, top = isolation.made["last_pid"]
        try:
            os.pwrite(fd, b"%d" % (int.from_bytes(os.urandom(4), "little") % top), 0)
        except OSError:
            pass
    # the child writes it before its line: a line without it is not the harness's (user code that
    # found the pipe cannot know it: it lives in this frame and the child's, which the armed audit
    # hook keeps user code out of)
    token = os.urandom(16).hex().encode()
    draw = os.urandom(8)
    _phase[0] = (int.from_bytes(draw[:2], "little") % GC_THRESHOLDS[0], draw[2] % GC_THRESHOLDS[1],
                 draw[3] % (GC_THRESHOLDS[2] + 1), int.from_bytes(draw[4:6], "little") % GC_PAD)
    start, forked_ns = time.monotonic(), time.time_ns()
    # fork(2) from libc, GIL held (PyDLL): os.fork's after-fork hooks (random reseed, threading
    # reinit, ...) cost ~0.6 ms of COW faults per child, 3x the bare fork; fine as the zygote has
    # one thread
    pid = _pyfork()
    if pid < 0:
        raise OSError("fork failed")
    if pid == 0:
        _close(r)
        _child(settings, requests, w, limits, uid, token)
    _close(w)
    # JSON escapes grow text 6x (\uXXXX)
    limit = min(cap * 6 + (1 << 20) + len(token), len(view))
    size, error = _read_line(r, view, limit, start + backstop, pid)
    wall = time.monotonic() - start
    # not reaped yet, so it exists; it cannot have made processes
    _kill_pid(pid, signal.SIGKILL)
    _, status, usage = _wait4(pid, 0)
    _close(r)
    _chdir("/")
    # no acknowledgement: the child may have left part of its job in the pipe; 2: set up too
    in_step = _acknowledged[0] in (1, 2)
    set_up = _acknowledged[0] == 2
    _acknowledged[:] = _ZERO_PAGE
    retire = not in_step or not set_up or not _clean(workdir, forked_ns)
    cpu = usage.ru_utime + usage.ru_stime
    header = b"%d\t%d\t%.6f\t%.6f\t" % (pid, retire, cpu, wall)
    one_line = size and view[size - 1] == 10 and view.obj.find(b"\n", 0, size) == size - 1
    ours = view[:len(token)] == token
    if in_step and not error and one_line and ours:
        # exactly one line, the harness's (the parent checks it all)
        return header, len(token), size, retire
    if not error and one_line and not ours:
        error = "a result line the harness did not write"
    if not error:
        error = _no_result(status, size, cpu >= timeout)
    line = (json.dumps({"ok": False, "error": error, "stdout": "", "values": None}) + "\n").encode()
    view[:len(line)] = line
    return header, 0, len(line), retire


def _limits(memory_mb, timeout, uid):
    """Layer 2: the rlimits a child sets on itself -> [(resource, (soft, hard))]."""
    memory = memory_mb << 20
    limits = [(resource.RLIMIT_AS, (memory, memory)),
              (resource.RLIMIT_CPU, (int(timeout) + 2, int(timeout) + 2)),
              (resource.RLIMIT_FSIZE, (0, 0))]
    # without a uid drop, each child sets NPROC = 0
    if not uid:
        limits.append((resource.RLIMIT_NPROC, (0, 0)))
    # a host's own limit below ours (`ulimit -v` on a cluster node) is kept: a child cannot raise a
    # hard limit, and asking to failed every job's set-up (red team round 8, E01)
    kept = []
    for which, (soft, hard) in limits:
        host = resource.getrlimit(which)[1]
        if host != resource.RLIM_INFINITY:
            soft, hard = min(soft, host), min(hard, host)
        kept.append((which, (soft, hard)))
    return kept


def _read_line(fd, view, limit, deadline, pid):
    """Read what child `pid` writes to `fd` (one line, then it exits) into `view`, up to EOF,
    `limit` bytes, the deadline or, in a model zygote, IDLE_S waited in all -> (size, error: ""
    or why the read stopped early)."""
    size = 0
    # the child's CPU-time clock (clock_getcpuclockid: no /proc, no permission needed) and
    # [its last reading, when, the seconds it has waited]
    clock, watch = ((~pid) << 3) | 2, [0.0, time.monotonic(), 0.0]
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return size, "timeout"
        if not select.select([fd], (), (), min(left, IDLE_S / 4) if _idle else left)[0]:
            if _idle and _blocked(clock, watch):
                return size, "timeout"
            continue
        if size >= limit:
            return size, "result too large"
        got = _readv(fd, [view[size:limit]])
        size += got
        if not got:
            return size, ""


def _blocked(clock, watch):
    """Has the child whose CPU clock is `clock` waited IDLE_S in all (the intervals since the watch
    began in which it used under IDLE_SHARE of a CPU)? `watch`: [the last reading, when, the
    seconds waited], updated here."""
    try:
        used = time.clock_gettime(clock)
    # exited: its EOF ends the read
    except OSError:
        return False
    now = time.monotonic()
    if used - watch[0] < IDLE_SHARE * (now - watch[1]):
        watch[2] += now - watch[1]
    watch[:2] = [used, now]
    return watch[2] >= IDLE_S


def _no_result(status, size, spent):
    """Why a child that was not stopped gave no one-line result: its exit status (from wait4), the
    bytes it wrote, whether it had used its CPU time."""
    code = os.waitstatus_to_exitcode(status)
    if size:
        return "malformed result"
    # its CPU time spent: _child's timer, or RLIMIT_CPU (SIGXCPU, then SIGKILL at the hard limit
    # when the program blocked the signals before it)
    if -code in (signal.SIGPROF, signal.SIGXCPU) or (-code == signal.SIGKILL and spent):
        return "timeout"
    if code < 0 and -code != signal.SIGKILL:
        return f"crashed ({signal.Signals(-code).name})"
    return f"exited (code {code}) without a result"


def _clean(workdir, forked_ns):
    """After each job: the jobs folder emptied (the child's cwd and anything it left there) and
    still the folder we made (a child of our uid could rename it); with the mount namespace,
    everything a child left in the private tmpfs folders (/tmp, /var/tmp, /dev/shm, /run/lock)
    removed, but for the jobs folder and the interpreter's folders where they were put back in one:
    each run starts on empty ones, whatever the one before did (filled the inodes, planted files).
    A folder whose times did not change since the last clean, which was over 20 ms before the child
    was forked (`forked_ns`, wall clock: folder times are coarse, a few ms), holds nothing new: one
    stat instead of a listing (seccomp denies utime; not where kept folders lie beneath). False
    when the clean-up fails (a zygote that cannot clean up is replaced before its next job)."""
    try:
        if not _empty(_jobs, ()) or _identity(_jobs) != _jobs_identity:
            return False
        spare = set(_kept)
        spare.add(_jobs)
        for n, folder in enumerate(_scratch):
            seen = os.stat(folder)
            times = (seen.st_mtime_ns, seen.st_ctime_ns)
            quiet = times == tuple(_scratch_times[2 * n:2 * n + 2]) and \
                max(times) < forked_ns - 20_000_000
            if quiet and not _inside_any(_kept, folder):
                continue
            if not _empty(folder, spare):
                return False
            seen = os.stat(folder)
            _scratch_times[2 * n:2 * n + 2] = array.array("q", (seen.st_mtime_ns,
                                                                seen.st_ctime_ns))
        return True
    except (OSError, RecursionError):
        return False


def _identity(path):
    """(device, inode, mode, owner) of `path`, not following a link."""
    seen = os.lstat(path)
    return seen.st_dev, seen.st_ino, seen.st_mode, seen.st_uid


def _inside_any(paths, folder):
    """Does any of `paths` lie beneath `folder`?"""
    for path in paths:
        if path.startswith(folder + "/"):
            return True
    return False


def _empty(folder, spare):
    """Remove everything in `folder` but the paths in `spare` (the jobs folder, the kept folders:
    mount points) and the folders on the way to them, which are emptied the same way. -> whether
    only those are left."""
    for entry in os.scandir(folder):
        if entry.path in spare:
            continue
        if _inside_any(spare, entry.path) and entry.is_dir(follow_symlinks=False):
            if not _empty(entry.path, spare):
                return False
            continue
        _rmtree(entry.path)
    # nothing writes here now (the child is gone); what could not be removed raised already, so
    # only a folder with spared paths, where a mount point refuses, is listed again
    if not spare:
        return True
    for entry in os.scandir(folder):
        if entry.path not in spare and not _inside_any(spare, entry.path):
            return False
    return True


def _write_all(fd, data):
    while data:
        data = data[_write(fd, data):]


def _take(fd, n):
    """Exactly n bytes (b"" at EOF), unbuffered: a child must not inherit the bytes of the job
    queued behind it."""
    data = b""
    while len(data) < n:
        chunk = _read(fd, n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def _rmtree(path):
    """shutil.rmtree without the functions the guard disabled (the common case is an empty dir). Not
    for unbounded depth: a child's chain of folders deep enough to fail here retires its zygote."""
    try:
        _rmdir(path)
    except NotADirectoryError:
        _unlink(path)
    except OSError:
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                _rmtree(entry.path)
            else:
                _unlink(entry.path)
        _rmdir(path)



if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    # site-packages without running .pth files (-S: ~4 MB less to fork)
    sys.path += sys.argv[7:]
    _zygote_main(int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]),
                 json.loads(sys.argv[5]), sys.argv[6])

