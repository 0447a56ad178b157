"""Process sandbox for model-written Python (design §3 layers 2-5; layer 1, the static screen, is in
verify.py).

API: run(jobs) -> [{"ok", "error", "stdout", "values", "pid", "cpu_s", "wall_s"}] (job keys:
_evaluate, _job), decode(encoding) (encoding.py's), layers() (every layer, on or off, and why),
zygotes(), seccomp_programs(), shutdown().

Design. The calling process never forks and never runs model text; it compiles each job (which runs
nothing) and ships it as marshal bytes (parent -> child only) to a pool of "zygotes": warm
interpreters launched separately, each with its own random PYTHONHASHSEED, in two families (a
validity check's two runs go to different families, so set order can differ). Per job a zygote makes
the child's fresh cwd (a random name) and forks; the child ends the lock-down, runs the job and
writes one JSON line; the zygote forwards it with what it measured itself (pid, the child's CPU
seconds from wait4), empties the private /tmp folders, and retires if that fails. No gold ever
enters a child: a child returns a canonical encoding of each value (encoding.py: exact builtin and
collections/fractions/decimal types, checked with the real `type`, size and depth capped) and the
parent decides (verify.py). User code can write the result line itself, so the parent parses every
line as hostile (_parse_answer): schema, types, caps, one entry per call; a bad line fails its job
alone.
Results pass through an mmap buffer the children do not inherit, given back to the kernel after each
job, so no child finds an earlier job's result in its memory.

Layers (Linux; `layers()` reports what the running zygotes measured, with reasons):
  2. per child: RLIMIT_AS (1 GiB default, `memory_mb`), RLIMIT_CPU (timeout + 2 s), RLIMIT_FSIZE =
     0, RLIMIT_NOFILE = 64, RLIMIT_NPROC = 0 (no fork, no threads; binding for any non-root uid); as
     root, children drop to a uid of a random range per pool (another trainer's children have other
     uids); no_new_privs; a scrubbed environment; stdin /dev/null or the job's; capped in-memory
     stdout/stderr (1 MiB / 64 KiB).
  3. before any user code: destructive functions of os, shutil, subprocess, socket are None (the
     last three via an import hook); zygotes run with -S: no site code, exit, quit or help.
  4. wall-clock timeout per job: the zygote SIGKILLs the child; a zygote that dies or hangs is
     replaced.
  5. namespaces. As root: a mount namespace (every filesystem read-only, fresh small tmpfs on /tmp,
     /var/tmp, /dev/shm, /run/lock, emptied after every job; /root, /home, $HOME and the repo's
     folder covered, the interpreter's folders bound back) and a network namespace (no interface
     up). Without root: the same inside a user namespace mapping only our uid, plus a PID namespace
     whose init is the zygote (children can signal only themselves and it). Root without
     CAP_SYS_ADMIN gets neither (a user namespace would make root-owned files its children's).
  6. Landlock (pinned `landlock` binding, Linux >= 5.13, no root needed): the zygote and so its
     children may read only the interpreter's folders and shared libraries, and write only the jobs'
     folder (and the private tmpfs).
  7. seccomp (BPF compiled in the parent by the pinned `pyseccomp`, entered by each zygote,
     inherited): no unshare/setns/mount, ptrace, process_vm_*, bpf, keyctl, io_uring, namespace
     clone flags, chmod/chown/utime/xattr, sockets; where children keep our uid and no PID namespace
     hides other processes, or stay root, each child adds a filter denying signals and fork.
Not covered: host CPU/memory are shared (per-child limits only); world-readable files under the
interpreter's folders stay readable; without Landlock and a mount namespace, children can read and
delete what this user can (verify.require_isolation refuses to start then). A child that reaches raw
syscalls (past the static screen) can write its own result line: grading is unaffected (it never
sees a gold), but a proposal can claim its own output.
"""
import atexit
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
# a lock for the pool without importing threading into the zygotes
import _thread
from importlib.machinery import PathFinder
# bound before layer 3 disables them for user code
from os import (_exit, chdir as _chdir, close as _close, closerange as _closerange, dup2 as _dup2,
                kill as _kill_pid, mkdir as _mkdir, open as _open_fd, pipe as _pipe, read as _read,
                readv as _readv, rmdir as _rmdir, setuid as _setuid, unlink as _unlink,
                wait4 as _wait4, write as _write)

# the value encoding both sides use; the zygote drops it from sys.modules (see _zygote_main)
from encoding import MAX_UNITS, decode, encode, escape

# zygotes per family (two families): POPULORA_SANDBOX_WORKERS, else the cores, at most 8
WORKERS_PER_FAMILY = int(os.environ.get("POPULORA_SANDBOX_WORKERS", "0"))
if not WORKERS_PER_FAMILY:
    WORKERS_PER_FAMILY = max(1, min(os.cpu_count() or 1, 8))
MEMORY_MB = 1024            # default RLIMIT_AS of a child
STDOUT_CAP = 1 << 20        # bytes of captured stdout kept
ERROR_CAP = 1000            # chars of a child's error message kept
# bytes of a child's result line (JSON escapes grow text 6x)
RESULT_CAP = STDOUT_CAP * 6 + (1 << 20)
# bytes of a job's settings, read by the zygote: 4 little-endian 8-byte numbers (see _pack)
HEADER = 32
GRACE_S = 5.0               # a zygote must answer within job timeout + this, else it is replaced
# the modules a model program may import (screen.py admits only these; measured on AZR's seeds and
# widened to the pure computing modules of the standard library), loaded in every zygote: a
# validation or grading child may import nothing else (_audit)
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

# ---------------------------------------------------------------------- child side (runs user code)

def _describe(e):
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


def _evaluate(job, exec_=exec, eval_=eval):
    """The job proper, on code objects the parent compiled -> the JSON text of each value's
    encoding, in order: each expression of job["calls"], then f on each argument list of
    job["args"]. The job holds no gold: the parent compares. Order: every argument list decoded
    (encodings of (args, kwargs), as plain data) before any user code runs; the program
    (job["code"]) in a namespace of its own; the calls evaluated there; f called from here, not
    from an expression in its namespace, so validation and grading call it alike: same globals,
    same call, arguments built the same way (decoded from plain data)."""
    arguments = []
    for encoding in job.get("args", ()):
        arguments.append(decode(encoding))
    if job.get("audit"):
        _watch(job)
    ns = {"__name__": "__main__"}
    exec_(job["code"], ns)
    values = []
    for call in job.get("calls", ()):
        values.append(_encoded(eval_(call, ns)))
    if arguments:
        f = ns["f"]
        for args, kwargs in arguments:
            values.append(_encoded(f(*args, **kwargs)))
    return values


# Layer 3 for model programs (validation and grading jobs: job["audit"], run by model zygotes),
# from just before the program runs: an audit hook (sys.addaudithook: Python code cannot remove
# one) that lets through only what computing needs, over a sys.modules holding only the allowed
# modules (_models_only), so that importing anything else (os, sys, ctypes: loaded in the zygote)
# is an import the hook sees and refuses.
# Behind the static screen: what it missed (a door to eval, a frame, a code object) fails here.
_AUDIT_PASS = {"builtins.id", "array.__new__", "time.sleep", "sys.unraisablehook"}
_AUDIT_SETTABLE = {"__module__", "__qualname__", "__name__", "__doc__", "__bases__",
                   "__defaults__", "__kwdefaults__"}
# the one compile the allowed modules make: collections.namedtuple's __new__ (typing.NamedTuple too)
_NAMEDTUPLE_NEW = re.compile(r"lambda _cls, (?P<a>[\w, ]*): _tuple_new\(_cls, \((?P=a)\)\)")
# the job's own code objects, and whether the next exec is of a compile allowed just before
_audit_state = {"ours": (), "granted": False}


def _watch(job):
    """Start layer 3 in a validation or grading child (see _audit; its zygote kept only the allowed
    modules in sys.modules: _models_only)."""
    _audit_state["ours"] = (job["code"], *job.get("calls", ()))
    sys.addaudithook(_audit)


def _audit(event, args):
    """The audit hook of layer 3: returns for what computing needs, raises for the rest (an import
    of a module not allowed, open, compile, exec of code that is not the job's, a code object or
    function made, a frame, a restricted attribute read such as gi_frame or __code__, os / ctypes /
    socket / marshal / gc / ... events). sys._getframe raises ValueError, which typing, enum and
    namedtuple catch."""
    if event in _AUDIT_PASS:
        return
    if event == "exec":
        ours = any(args[0] is code for code in _audit_state["ours"])
        if ours or _audit_state["granted"]:
            _audit_state["granted"] = False
            return
    elif event == "compile":
        # eval hands the hook its text as UTF-8 bytes
        source = args[0]
        if type(source) is bytes:
            source = source.decode("utf-8", "replace")
        if type(source) is str and _NAMEDTUPLE_NEW.fullmatch(source):
            _audit_state["granted"] = True
            return
    # a class's names, bases (typing.NamedTuple sets them) and a function's defaults; not a
    # function's __code__ nor an object's __class__
    elif event in ("object.__setattr__", "object.__delattr__"):
        if type(args[1]) is str and args[1] in _AUDIT_SETTABLE:
            return
    elif event == "sys._getframe":
        raise ValueError("no frames in the sandbox")
    raise RuntimeError(f"not allowed in the sandbox: {event}")


def _encoded(value):
    """A value -> the JSON text of its canonical encoding (ValueError if it is not plain data)."""
    parts = []
    encode(value, parts, [MAX_UNITS])
    return "".join(parts)


def _outcome(job):
    """Run a job -> its result line: one JSON object {"ok", "error", "stdout", "values"} (values:
    JSON texts from _evaluate), built with the C string escaper alone (json.dumps costs ~80
    copy-on-write faults in a fresh child). User code can write such a line too: the parent trusts
    nothing in it (see _parse_answer)."""
    values, error = None, ""
    try:
        values = _evaluate(job)
    # SystemExit, KeyboardInterrupt, MemoryError, ... all contained
    except BaseException as e:
        error = _describe(e)
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


def _child(settings, requests, wfd, limits, uid):
    """Runs in a child the zygote forked for one job, inside a fresh empty cwd of its own: read the
    job itself (8-byte length + marshal bytes) from the request pipe, which only this child reads
    while it is alive (the zygote reads the next job's settings once it is gone), so no job ever
    passes through the zygote, of which every later child is a copy; acknowledge it with one byte
    ("+": the pipe is in step), finish the lock-down, run, write one JSON line to wfd, _exit. Never
    returns. The syscalls used are this module's own bindings (layer 3 sets os.<name> = None for
    user code); user code starts after every limit."""
    try:
        if uid:
            # RLIMIT_NPROC = 0 (inherited) is binding now that root is gone
            _setuid(uid)
        # no capability left: a child that stays root (no uid drop) or holds a user namespace's
        # cannot raise its limits, override file modes or trace its zygote
        if _libc.capset(_caps[0], _caps[1]) != 0:
            raise OSError("capset refused")
        payload = _take(requests, settings["length"])
        _closerange(3, wfd)
        _closerange(wfd + 1, 1 << 16)
        if len(payload) != settings["length"]:
            raise OSError("the job was cut short")
        _write_all(wfd, b"+")
        job = marshal.loads(payload)
        del payload
        if job.get("stdin"):
            _stdin(job["stdin"])
        for kind, value in limits:
            resource.setrlimit(kind, value)
        # prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program)
        if _signal_filter is not None and _libc.prctl(22, 2, _signal_filter, 0, 0) != 0:
            raise OSError("seccomp filter refused")
        line = _outcome(job)
    except BaseException as e:
        error = escape("sandbox set-up failed: " + _describe(e))
        line = '{"ok": false, "error": %s, "stdout": "", "values": null}\n' % error
    try:
        _write_all(wfd, line.encode())
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

# the zygote's state, set in the zygote: libc's functions (resolved there: children must not
# dlopen after fork), /dev/null's fd, the Landlock ruleset and the per-child seccomp filter
_libc = _pyfork = _null = _caps = None
# with a PID namespace: (an fd of its ns_last_pid, the largest value to write) (_pid_namespace)
_last_pid = None
_landlock = _landlock_restrict = _signal_filter = None
# the capped stdout every child inherits (kept here in case user code rebinds sys.stdout)
_out = None
# seccomp programs kept alive (_seccomp_load); the folders hidden and the private tmpfs folders
# made (_mount_setup); those folders' times at the last clean (_clean)
_bpf, _hidden, _scratch, _scratch_times = [], [], [], []
# kept folders (the interpreter's) put back inside a scratch folder, and the folder the children's
# cwds are made in (with its identity: _identity): the clean-up spares them
_kept, _jobs, _jobs_identity = [], "", None
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC = 1, 32, 4096, 8192, 16384
_MS_PRIVATE = 1 << 18


# folders every child gets a fresh, private, writable tmpfs on (emptied after each job)
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# the shared libraries a child may load (extension modules), kept readable wherever a cover falls
LIBRARIES = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib")


def _mount_setup(repo, homes):
    """Private mount namespace: every filesystem read-only; a fresh writable tmpfs on each SCRATCH
    folder; an empty read-only tmpfs over /root, /home, the homes and the checkout with its folder;
    the interpreter's folders and the shared libraries put back where they were, wherever that is
    (under /root, a home, the checkout, /tmp ...). Nothing here depends on where the checkout or the
    interpreter lives: the folders to keep are set aside (bound into a staging tmpfs) before anything
    covers them and moved back after. -> the hidden folders; raises OSError naming the step that
    failed."""
    mount = _libc.mount
    # CLONE_NEWNS; private first, so nothing propagates to the host
    _check(_libc.unshare(0x00020000), "unshare(CLONE_NEWNS)")
    _check(mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "making / private")
    _read_only_everywhere()
    scratch = []
    for d in SCRATCH:
        if os.path.isdir(d) and not os.path.islink(d):
            scratch.append(d)
    keep = _outermost(_interpreter_folders(repo) + [p for p in LIBRARIES if os.path.isdir(p)])
    hide = []
    for d in ("/root", "/home", *homes, os.path.dirname(repo), repo):
        if not d or not os.path.isdir(d):
            continue
        d = os.path.realpath(d)
        # the root, kernel filesystems, or a folder inside the interpreter's (which stay readable)
        if d == "/" or _inside(d, ("/proc", "/sys", "/dev")) or _inside(d, keep):
            continue
        hide.append(d)
    # what a fresh scratch tmpfs hides needs no cover of its own
    hidden = _outermost(hide)
    hide = []
    for d in hidden:
        if not _inside(d, scratch):
            hide.append(d)
    covered = []
    for k in keep:
        if _inside(k, hide + scratch):
            covered.append(k)
    staging, stashed = _stage(covered, hide + scratch)
    # outermost first: a scratch folder or a kept one may lie inside a cover
    for d in sorted(hide, key=len):
        tmpfs = mount(b"tmpfs", d.encode(), b"tmpfs", 0, b"size=64k,nr_inodes=1024,mode=0711")
        _check(tmpfs, f"covering {d}")
    fresh = b"size=256m,nr_inodes=16384,mode=1777"
    for d in scratch:
        if d == staging:
            continue
        os.makedirs(d, mode=0o711, exist_ok=True)
        _check(mount(b"tmpfs", d.encode(), b"tmpfs", 0, fresh), f"a tmpfs on {d}")
        _scratch.append(d)
    for k, stash in stashed:
        os.makedirs(k, mode=0o711, exist_ok=True)
        _check(mount(stash.encode(), k.encode(), None, _MS_MOVE, None), f"putting back {k}")
        if _inside(k, scratch):
            _kept.append(k)
    # the staging tmpfs goes (MNT_DETACH); its folder gets its scratch tmpfs like the others
    if staging:
        _check(_libc.umount2(staging.encode(), 2), f"unmounting the staging tmpfs {staging}")
        _check(mount(b"tmpfs", staging.encode(), b"tmpfs", 0, fresh), f"a tmpfs on {staging}")
        _scratch.append(staging)
    for d in hide:
        flags = _MS_REMOUNT | _MS_RDONLY
        _check(mount(None, d.encode(), None, flags, None), f"making the cover of {d} read-only")
    return hidden


def _check(result, step):
    """A libc call's result -> nothing, or OSError naming the step and errno."""
    if result != 0:
        raise OSError(f"{step} refused ({os.strerror(ctypes.get_errno())})")


def _read_only_everywhere():
    """Remount every mount but the kernel's (/proc, /sys, /dev) read-only, a per-mount flag of
    our namespace only."""
    with open("/proc/self/mountinfo", "rb") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        fields = line.split()
        # mountinfo escapes space, tab, newline and backslash as \ooo; the rest is raw bytes
        point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])
        options = fields[5].split(b",")
        if b"ro" in options or point.startswith((b"/proc", b"/sys", b"/dev")):
            continue
        # a remount must keep these flags of the mount, or it is refused
        kept = 0
        for name, bit in ((b"nosuid", 2), (b"nodev", 4), (b"noexec", 8)):
            if name in options:
                kept |= bit
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept
        _check(_libc.mount(None, point, None, flags, None), f"a read-only remount of {point}")


def _stage(keep, covered):
    """Bind each folder of `keep` (those a cover will hide) into a staging tmpfs, before any cover
    goes on. The staging tmpfs goes on the first SCRATCH folder that is neither inside another
    folder about to be covered nor holds a kept one (it gets its own scratch tmpfs afterwards). ->
    (staging folder or None when nothing needs keeping, [(kept folder, its stash)])."""
    if not keep:
        return None, []
    staging = None
    for d in SCRATCH:
        if not os.path.isdir(d) or os.path.islink(d):
            continue
        inside_cover = any(_inside(d, [c]) and c != d for c in covered)
        if not inside_cover and not any(_inside(k, [d]) for k in keep):
            staging = d
            break
    if staging is None:
        raise OSError("no folder to stage the interpreter's folders in")
    _check(_libc.mount(b"tmpfs", staging.encode(), b"tmpfs", 0, b"size=64k,mode=0700"),
           f"a staging tmpfs on {staging}")
    stashed = []
    for n, k in enumerate(keep):
        stash = f"{staging}/{n}"
        os.mkdir(stash)
        _check(_libc.mount(k.encode(), stash.encode(), None, _MS_BIND | _MS_REC, None),
               f"setting aside {k}")
        stashed.append((k, stash))
    return staging, stashed


def _inside(path, folders):
    """Is `path` one of `folders` or beneath one?"""
    for folder in folders:
        if path == folder or path.startswith(folder.rstrip("/") + "/"):
            return True
    return False


def _outermost(folders):
    """The folders that are inside no other of them, sorted, without repeats."""
    out = []
    for folder in sorted(set(folders)):
        if not _inside(folder, out):
            out.append(folder)
    return out


def _interpreter_folders(repo):
    """The interpreter's folders (prefixes, sys.path), real paths, never the checkout itself."""
    folders = []
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path):
        if p and os.path.isdir(p) and os.path.realpath(p) != repo:
            folders.append(os.path.realpath(p))
    return folders


def _uid_works(uid):
    """Can a child with this uid still read the stdlib (Python may live under /root, e.g. pyenv)?"""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.close(os.open(os.path.dirname(os.__file__) + "/random.py", 0))
            code = 0
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1] == 0


def _namespaces(repo, homes):
    """Layer 5: network and mount namespaces -> {layer: [active, why]}. As root (CAP_SYS_ADMIN):
    both directly. Otherwise a user namespace first, mapping only our own uid (so children stay that
    uid; a root without CAP_SYS_ADMIN skips it: in there its children would own every root-owned
    file). No root needed."""
    out = {"mount_namespace": [False, ""], "network_namespace": [False, ""],
           "ipc_namespace": [False, ""], "time_namespace": [False, ""],
           "pid_namespace": [False, "not needed as root: children run as another uid, which "
                                    "cannot signal us"]}
    in_user_ns = False
    if os.geteuid() != 0:
        # CLONE_NEWUSER
        if _libc.unshare(0x10000000) == 0:
            uid, gid = os.getuid(), os.getgid()
            maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                    ("gid_map", f"{gid} {gid} 1"))
            for name, text in maps:
                with open(f"/proc/self/{name}", "w") as fh:
                    fh.write(text)
            in_user_ns = True
            out["pid_namespace"] = _pid_namespace()
        else:
            error = os.strerror(ctypes.get_errno())
            why = f"no user namespace ({error}; kernel.unprivileged_userns_clone?)"
            out = {k: [False, why] for k in out}
            return out
    via = ""
    if in_user_ns:
        via = " in a user namespace"
    try:
        hidden = _mount_setup(repo, homes)
        what = f"read-only filesystems, private tmpfs, {len(hidden)} folders hidden{via}"
        out["mount_namespace"] = [True, what]
        _hidden.extend(hidden)
    except OSError as e:
        out["mount_namespace"][1] = f"{e}{via}"
    # CLONE_NEWNET
    if _libc.unshare(0x40000000) == 0:
        out["network_namespace"] = [True, f"no interface up, not even loopback{via}"]
    else:
        error = os.strerror(ctypes.get_errno())
        out["network_namespace"][1] = f"unshare(CLONE_NEWNET) refused ({error}{via})"
    # CLONE_NEWIPC: SysV objects and POSIX queues of our own, gone with us (seccomp denies them to
    # children in any case)
    out["ipc_namespace"] = [True, f"SysV IPC and POSIX message queues private to this zygote{via}"]
    if _libc.unshare(0x08000000) != 0:
        error = os.strerror(ctypes.get_errno())
        out["ipc_namespace"] = [False, f"unshare(CLONE_NEWIPC) refused ({error}{via}); seccomp "
                                       "still denies SysV IPC"]
    out["time_namespace"] = _time_namespace(via)
    return out


def _time_namespace(via):
    """Children's clocks, deliberately different from any other zygote's: a time namespace whose
    monotonic and boot-time clocks run a random number of seconds (1e6 to 1e9) ahead of ours, so a
    validity check's two runs (two zygotes) disagree on any value read from them. The wall clock
    cannot be offset (no kernel does): the static screen keeps it out of reach. -> [active, why]."""
    offset = 10**6 + int.from_bytes(os.urandom(4), "little") % 10**9
    # CLONE_NEWTIME (Linux >= 5.6): our next children are its first members
    if _libc.unshare(0x80) != 0:
        error = os.strerror(ctypes.get_errno())
        return [False, f"unshare(CLONE_NEWTIME) refused ({error}{via})"]
    with open("/proc/self/timens_offsets", "w") as fh:
        fh.write(f"monotonic {offset} 0\nboottime {offset} 0\n")
    return [True, f"children's monotonic and boot clocks {offset} s ahead (random per zygote)"]


def _pid_namespace():
    """Where children keep our uid: move into a new PID namespace as its init (pid 1), so a child
    can signal nothing but itself and us, and init ignores signals it has no handler for (SIGINT is
    set to be ignored). The process the parent started stays outside, waiting for us, holding no
    pipe. -> [active, why]."""
    # CLONE_NEWPID: our next child is the namespace's init
    if _libc.unshare(0x20000000) != 0:
        return [False, f"unshare(CLONE_NEWPID) refused ({os.strerror(ctypes.get_errno())})"]
    pid = os.fork()
    if pid:
        # the parent sees EOF when the zygote goes, not when we do
        os.closerange(0, 1 << 16)
        _exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) & 0xFF)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    global _last_pid
    # the namespace's pid counter, set at random before each fork (_job): children's pids are as
    # different from one zygote to the next as the host's are
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            top = int(fh.read()) - 2
        _last_pid = (os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY), top)
    except (OSError, ValueError):
        _last_pid = None
    return [True, "children see and can signal only themselves and their zygote (the init); "
                  "pids random per job"]


def _landlock_setup(landlock, read_paths, write_paths):
    """Layer 6 (Linux >= 5.13, no root needed): a Landlock ruleset the zygote enters, and so its
    children: read and execute beneath `read_paths`, everything beneath `write_paths` (the jobs'
    folder; with the mount namespace the private tmpfs folders too), nothing else. `landlock`: the
    binding, or the ImportError of importing it (done before the mount namespace hides the folders
    it may be in). -> (ruleset fd or None, why)."""
    try:
        if isinstance(landlock, ImportError):
            raise landlock
        plumbing = landlock.plumbing
        # the binding reads errno even after a call that succeeded
        ctypes.set_errno(0)
        abi = landlock.landlock_abi_version()
        handled = landlock.FSAccess.all()
        fd = plumbing.get_create_ruleset()(ctypes.byref(plumbing.RulesetAttr(handled)),
                                           ctypes.sizeof(plumbing.RulesetAttr), 0)
        read = landlock.FSAccess.READ_FILE | landlock.FSAccess.READ_DIR | landlock.FSAccess.EXECUTE
        for path, rights in [(p, read) for p in read_paths] + [(p, handled) for p in write_paths]:
            if not os.path.isdir(path):
                # a file takes file rights only
                rights &= landlock.FSAccess.all_file()
            path_fd = os.open(path, os.O_PATH)
            ctypes.set_errno(0)
            rule = plumbing.PathBeneathAttr(rights, path_fd)
            # LANDLOCK_RULE_PATH_BENEATH
            plumbing.get_add_rule()(fd, 1, ctypes.byref(rule), 0)
            os.close(path_fd)
        global _landlock_restrict
        _landlock_restrict = plumbing.get_restrict_self()
    except ImportError as e:
        return None, f"the landlock binding is not installed ({e}); pip install -r requirements.txt"
    # old kernel, Landlock not enabled at boot, ...
    except Exception as e:
        return None, f"Landlock unavailable: {_describe(e)}"
    return fd, f"ABI {abi}: read {len(read_paths)} interpreter folders, write the job's folder only"


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def seccomp_programs():
    """Layer 7's BPF, compiled here in the parent by libseccomp (its Python binding; zygotes do not
    load it: 1.4 MB more in every fork) -> {"zygote": hex, "signals": hex, "why"} ("" where
    unavailable). "zygote": the filter a zygote enters before its first job, so its children inherit
    it (a filter attached per child costs ~0.2 ms: the kernel compiles it each time), an allowlist:
    ALLOWED_SYSCALLS and a clone with no namespace flag pass; DENIED_SYSCALLS fail with EPERM;
    everything else, including every syscall newer than this list (or than libseccomp), fails with
    ENOSYS, which the C library takes for "not in this kernel" and falls back from where it can
    (clone3 -> clone, faccessat2 -> faccessat, ...). "signals": EPERM for SIGNAL_SYSCALLS, entered
    by each child where children keep the zygote's uid and no PID namespace hides other
    processes."""
    if "seccomp" in _pool:
        return _pool["seccomp"]
    out = {"zygote": "", "signals": "", "why": ""}
    try:
        import pyseccomp
        zygote = pyseccomp.SyscallFilter(pyseccomp.ERRNO(38))
        # a binary tree of syscall numbers, not a 250-instruction chain (libseccomp >= 2.5)
        try:
            zygote.set_attr(pyseccomp.Attr.CTL_OPTIMIZE, 2)
        except (AttributeError, OSError, ValueError, RuntimeError):
            pass
        allowed = _add_rules(pyseccomp, zygote, pyseccomp.ALLOW, ALLOWED_SYSCALLS)
        _add_rules(pyseccomp, zygote, pyseccomp.ERRNO(1), DENIED_SYSCALLS)
        no_namespace = pyseccomp.Arg(0, pyseccomp.MASKED_EQ, sum(NAMESPACE_FLAGS), 0)
        zygote.add_rule(pyseccomp.ALLOW, "clone", no_namespace)
        signals = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        _add_rules(pyseccomp, signals, pyseccomp.ERRNO(1), SIGNAL_SYSCALLS)
        for key, rules in (("zygote", zygote), ("signals", signals)):
            fd = os.memfd_create("seccomp")
            rules.export_bpf(io.FileIO(fd, "w", closefd=False))
            out[key] = os.pread(fd, 1 << 20, 0).hex()
            os.close(fd)
        out["why"] = (f"an allowlist of {allowed} syscalls, the rest ENOSYS or EPERM "
                      f"({len(out['zygote']) // 16} BPF instructions from libseccomp)")
    except ImportError as e:
        out = {"zygote": "", "signals": "", "why": f"the pyseccomp binding is not installed ({e})"}
    # no libseccomp.so.2, ...
    except Exception as e:
        out = {"zygote": "", "signals": "", "why": f"seccomp unavailable: {_describe(e)}"}
    _pool["seccomp"] = out
    return out


def _add_rules(pyseccomp, rules, action, names):
    """Add `action` for each syscall of `names` this architecture and libseccomp know -> how many."""
    added = 0
    for name in names.split():
        try:
            rules.add_rule(action, name)
            added += 1
        except (OSError, ValueError, RuntimeError):
            # a syscall this architecture (or this libseccomp) does not have
            pass
    return added


def _seccomp_load(program):
    """Enter a BPF program (hex) as a seccomp filter: seccomp(SECCOMP_SET_MODE_FILTER). No binding
    does it from bytes; the zygote's one call. Returns the sock_fprog address, kept alive, for a
    child's later call."""
    code = bytes.fromhex(program)
    _bpf.append(_SockFprog(len(code) // 8, code))
    return ctypes.addressof(_bpf[-1])


# Layer 7, what a zygote (once locked) and its children may call: what CPython and the C library
# need to compute, read the interpreter's files, write within their folders, keep time, handle
# their own signals, and what the zygote needs to fork, wait, clean up and drop a child's rights.
# Measured on AZR's seeds and the benchmarks' canonical solutions (bench/syscalls_used.py: 36 used
# on Linux 6.18 / glibc 2.36 / CPython 3.11), widened to their near kin (the *at forms, the time
# and signal families). Files: Landlock and the mount namespace decide where. Not here: sockets,
# namespaces, mounts, tracing, keys, BPF, io_uring, SysV/POSIX IPC, exec, chmod/chown/utime/xattr
# (Landlock leaves metadata alone), handles, modules, clocks' setters, and every syscall newer
# than this list.
ALLOWED_SYSCALLS = (
    # memory
    "brk mmap munmap mremap mprotect madvise msync mincore "
    # files and folders
    "read write readv writev pread64 pwrite64 preadv pwritev preadv2 pwritev2 open openat creat "
    "close close_range lseek dup dup2 dup3 fcntl flock fsync fdatasync ftruncate truncate "
    "fadvise64 sendfile copy_file_range stat fstat lstat newfstatat statx statfs fstatfs access "
    "faccessat faccessat2 readlink readlinkat getdents getdents64 getcwd chdir fchdir mkdir "
    "mkdirat rmdir unlink unlinkat rename renameat renameat2 link linkat symlink symlinkat umask "
    "pipe pipe2 memfd_create eventfd eventfd2 ioctl poll ppoll select pselect6 epoll_create "
    "epoll_create1 epoll_ctl epoll_wait epoll_pwait "
    # time
    "clock_gettime clock_getres clock_nanosleep nanosleep gettimeofday time times getrusage "
    "setitimer getitimer alarm timer_create timer_settime timer_gettime timer_getoverrun "
    "timer_delete "
    # signals (to other processes: see SIGNAL_SYSCALLS, the uid drop and the PID namespace)
    "rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigsuspend rt_sigtimedwait "
    "sigaltstack pause kill tgkill tkill restart_syscall "
    # this process
    "exit exit_group wait4 waitid fork vfork getpid getppid gettid getuid geteuid getgid getegid "
    "getgroups getresuid getresgid getpgrp getpgid getsid setuid capget capset prctl arch_prctl "
    "set_tid_address set_robust_list get_robust_list rseq futex sched_yield sched_getaffinity "
    "sched_getparam sched_getscheduler sched_get_priority_max sched_get_priority_min getcpu "
    "getpriority uname sysinfo getrandom prlimit64 getrlimit setrlimit")
# ... and of the rest, those that fail with EPERM (a clear "not permitted"), not ENOSYS
DENIED_SYSCALLS = ("unshare setns mount umount2 pivot_root chroot fsopen fsmount fsconfig fspick "
                   "move_mount open_tree mount_setattr ptrace process_vm_readv process_vm_writev "
                   "kcmp perf_event_open bpf userfaultfd keyctl add_key request_key io_uring_setup "
                   "io_uring_enter io_uring_register open_by_handle_at name_to_handle_at "
                   "kexec_load kexec_file_load init_module finit_module delete_module reboot "
                   "swapon swapoff acct quotactl iopl ioperm chmod fchmod fchmodat fchmodat2 chown "
                   "fchown lchown fchownat utime utimes utimensat futimesat setxattr lsetxattr "
                   "fsetxattr removexattr lremovexattr fremovexattr socket socketpair "
                   "shmget shmat shmdt shmctl msgget msgsnd msgrcv msgctl semget semop semtimedop "
                   "semctl mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr "
                   "ipc execve execveat pidfd_open pidfd_getfd pidfd_send_signal setsid setpgid")
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
NAMESPACE_FLAGS = (0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
# fork too: a child that stays root is exempt from NPROC
SIGNAL_SYSCALLS = ("kill tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo pidfd_open "
                   "pidfd_send_signal pidfd_getfd fork vfork clone")


def _zygote_main(number, homes, uid_base, programs, kind="model"):
    """A zygote's life (sandbox.py run as a script, see the end of this file): lock itself down
    layer by layer, measuring each, send the parent that report (its "hello"), then fork a child per
    job until EOF. `programs`: seccomp_programs() of the parent."""
    global _landlock
    programs = {"zygote": "", "signals": "", "why": "no BPF given", **programs}
    # set by the parent so children never resolve symbols (GOT writes); not for user code to see
    os.environ.pop("LD_BIND_NOW", None)
    _load_libc()
    repo = os.path.dirname(os.path.realpath(__file__))
    # before the mount namespace can hide the folder it is in
    try:
        import landlock
        import landlock.plumbing
    except ImportError as e:
        landlock = e
    layers = _namespaces(repo, homes)
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
    _landlock, why = _landlock_setup(landlock, _readable(repo), [jobs] + _scratch)
    # unknown: the first clean lists them
    _scratch_times.extend([(0, 0)] * len(_scratch))
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
        _models_only()
        hello["modules"] = len(sys.modules)
    # keep the collector off the zygote's pages in children
    gc.freeze()
    # the zygote enters the domain itself: children inherit it, free
    if _landlock is not None:
        ctypes.set_errno(0)
        _landlock_restrict(_landlock, 0)
        os.close(_landlock)
    # seccomp(SECCOMP_SET_MODE_FILTER, 0, program)
    # prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program): the same on every architecture
    if programs["zygote"] and _libc.prctl(22, 2, _seccomp_load(programs["zygote"]), 0, 0) != 0:
        raise OSError("seccomp filter refused")
    _write_all(replies, (json.dumps(hello) + "\n").encode())
    _serve(requests, replies, jobs, uid)


# codecs a model program may name (str.encode looks them up by importing encodings.<name>): looked up
# once in a model zygote, whose children may import nothing
CODECS = ("ascii", "latin-1", "utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32",
          "utf-32-le", "utf-32-be", "cp1252", "cp437", "unicode_escape", "raw_unicode_escape",
          "utf-7", "idna", "punycode", "rot13", "hex", "base64")


def _models_only():
    """A model zygote, once: sys.modules keeps only the allowed modules (with their C parts), the
    codecs' and warnings (children import nothing: _audit refuses it), so that os, sys, ctypes,
    builtins ... loaded here are imports, which the hook sees, not lookups; and the hook's own code
    is made ready (quickened) here rather than written in every child."""
    import codecs
    for name in CODECS:
        codecs.lookup(name)
    keep = set()
    for name in ALLOWED_MODULES:
        keep.add(name.split(".")[0])
    for name in list(sys.modules):
        top = name.split(".")[0]
        if top.lstrip("_") in keep or top in ("encodings", "codecs", "_codecs", "warnings"):
            continue
        del sys.modules[name]
    code = compile("0", "<w>", "eval")
    _audit_state["ours"] = (code,)
    for _ in range(9):
        _audit("builtins.id", (0,))
        _audit("exec", (code,))
    _audit_state["ours"] = ()


def _load_libc():
    """libc's functions the zygote calls through ctypes, resolved before any fork (children must not
    dlopen)."""
    global _libc, _pyfork, _caps
    _libc = ctypes.CDLL(None, use_errno=True)
    _pyfork = ctypes.PyDLL(None).fork
    _libc.prctl.argtypes = (ctypes.c_int,) + (ctypes.c_ulong,) * 4
    # capset's arguments, made here: _LINUX_CAPABILITY_VERSION_3 for this process, every set empty
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    _caps = (header, (ctypes.c_uint32 * 6)())


def _uid_drop(layers, uid):
    """As root: children will run as `uid` (this pool's range) if it can read the interpreter's
    files; the zygote takes the children's gid and no groups now. Reports layers["uid_drop"]. ->
    the children's uid, 0 for none."""
    if os.geteuid() != 0:
        layers["uid_drop"] = [False, "not root: children keep the user's uid (RLIMIT_NPROC = 0 "
                                     "still binds)"]
    elif not _uid_works(uid):
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
        if _is_tmpfs("/dev/shm"):
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


def _is_tmpfs(path):
    """Is `path` the mount point of a tmpfs (and a folder we may write in)?"""
    with open("/proc/self/mountinfo", "rb") as fh:
        for line in fh:
            fields = line.split(b" - ")
            if fields[0].split()[4] == path.encode() and fields[1].split()[0] == b"tmpfs":
                return os.access(path, os.W_OK)
    return False


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
    while True:
        header = _take(requests, HEADER)
        if not header:
            return
        numbers = [int.from_bytes(header[k:k + 8], "little") for k in range(0, HEADER, 8)]
        settings = dict(zip(("length", "timeout_ms", "memory_mb", "stdout_cap"), numbers))
        # unguessable: no child can prepare the next one's
        workdir = f"{jobs}/{os.urandom(8).hex()}"
        header, size, retire = _job(settings, requests, workdir, uid, view)
        _write_all(replies, header)
        _write_all(replies, view[:size])
        result.madvise(mmap.MADV_DONTNEED, 0, size)
        if retire:
            return


def _readable(repo):
    """Folders a child may read (Landlock): the interpreter's (prefixes, stdlib, site-packages,
    which may live under a home folder) and the shared libraries, never the repo or its folder
    (checkpoints, logs)."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.__file__), *sys.path]
    paths += ["/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/etc/ld.so.cache"]
    out = []
    for p in paths:
        if not p or not os.path.exists(p):
            continue
        p = os.path.realpath(p)
        if p not in out and p != repo and p != os.path.dirname(repo):
            out.append(p)
    return out


def _job(settings, requests, workdir, uid, view):
    """Fork a child for one job in a fresh cwd, made here and given to the child's uid; the child
    reads the job from `requests`. Wait for its acknowledgement, result line and exit within the
    deadline, kill it, clean up. Reads the child's line into `view` -> (header b"<pid>\t<retire>\t<cpu
    s>\t<wall s>\t", size of the line in view, retire), where the line is the child's or one of ours,
    and retire says the clean-up failed or the request pipe may be out of step (no
    acknowledgement)."""
    timeout = settings["timeout_ms"] / 1000
    cap = min(settings["stdout_cap"], STDOUT_CAP)
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
    if _last_pid is not None:
        fd, top = _last_pid
        try:
            os.pwrite(fd, b"%d" % (int.from_bytes(os.urandom(4), "little") % top), 0)
        except OSError:
            pass
    start, forked_ns = time.monotonic(), time.time_ns()
    # fork(2) from libc, GIL held (PyDLL): os.fork's after-fork hooks (random reseed, threading
    # reinit, ...) cost ~0.6 ms of COW faults per child, 3x the bare fork; fine as the zygote has
    # one thread
    pid = _pyfork()
    if pid < 0:
        raise OSError("fork failed")
    if pid == 0:
        _close(r)
        _child(settings, requests, w, limits, uid)
    _close(w)
    # JSON escapes grow text 6x (\uXXXX); 1 byte of acknowledgement first
    limit = min(cap * 6 + (1 << 20) + 1, len(view))
    size, error = _read_line(r, view, limit, start + timeout)
    wall = time.monotonic() - start
    # not reaped yet, so it exists; it cannot have made processes
    _kill_pid(pid, signal.SIGKILL)
    _, status, usage = _wait4(pid, 0)
    _close(r)
    _chdir("/")
    # no acknowledgement: the child may have left part of its job in the pipe
    in_step = size > 0 and view[0] == 43
    retire = not in_step or not _clean(workdir, forked_ns)
    cpu = usage.ru_utime + usage.ru_stime
    header = b"%d\t%d\t%.6f\t%.6f\t" % (pid, retire, cpu, wall)
    if in_step:
        view[:size - 1] = view[1:size]
        size -= 1
    one_line = size and view[size - 1] == 10 and view.obj.find(b"\n", 0, size) == size - 1
    if in_step and not error and one_line:
        # exactly one line, the child's (the parent checks it all)
        return header, size, retire
    if not error:
        error = _no_result(status, size)
    line = (json.dumps({"ok": False, "error": error, "stdout": "", "values": None}) + "\n").encode()
    view[:len(line)] = line
    return header, len(line), retire


def _limits(memory_mb, timeout, uid):
    """Layer 2: the rlimits a child sets on itself -> [(resource, (soft, hard))]."""
    memory = memory_mb << 20
    limits = [(resource.RLIMIT_AS, (memory, memory)),
              (resource.RLIMIT_CPU, (int(timeout) + 2, int(timeout) + 2)),
              (resource.RLIMIT_FSIZE, (0, 0))]
    # without a uid drop, each child sets NPROC = 0
    if not uid:
        limits.append((resource.RLIMIT_NPROC, (0, 0)))
    return limits


def _read_line(fd, view, limit, deadline):
    """Read what the child writes to `fd` (one line, then it exits) into `view`, up to EOF, `limit`
    bytes or the deadline -> (size, error: "" or why the read stopped early)."""
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], (), (), left)[0]:
            return size, "timeout"
        if size >= limit:
            return size, "result too large"
        got = _readv(fd, [view[size:limit]])
        size += got
        if not got:
            return size, ""


def _no_result(status, size):
    """Why a child that was not stopped gave no one-line result: its exit status (from wait4) and
    the bytes it wrote."""
    code = os.waitstatus_to_exitcode(status)
    if size:
        return "malformed result"
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
            quiet = times == _scratch_times[n] and max(times) < forked_ns - 20_000_000
            if quiet and not _inside_any(_kept, folder):
                continue
            if not _empty(folder, spare):
                return False
            seen = os.stat(folder)
            _scratch_times[n] = (seen.st_mtime_ns, seen.st_ctime_ns)
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


# --------------------------------------------------------------------------- parent side (the pool)

# the calling process's pool of zygotes ("pid": the process that started them)
_pool = {"pid": None, "workers": [], "count": 0, "uid_base": 0, "kind": "model",
         "lock": _thread.allocate_lock()}


def _start(family, kind):
    """Launch one zygote of `kind` ("model": model programs, "code": benchmark code) with a fresh
    scrubbed environment and its own hash seed."""
    # parent only: zygotes never load it (see _GuardHook)
    import subprocess
    # 0 would turn hash randomisation off
    seed = 1 + int.from_bytes(os.urandom(4), "little") % (2**32 - 1)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": str(seed),
           "LD_BIND_NOW": "1", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    _pool["count"] += 1
    argv = [sys.executable, "-S", "-s", "-B", os.path.abspath(__file__), "--worker",
            str(_pool["count"]), json.dumps(_homes()), str(_pool["uid_base"]),
            json.dumps(seccomp_programs()), kind, *_site_folders()]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd="/", start_new_session=True)
    return {"proc": proc, "family": family, "kind": kind, "buf": b"", "jobs": [], "deadline": 0.0,
            "hello": None}


def _homes():
    """The folders a child must not see as this user's home: $HOME (if set) and the home the
    password database gives (HOME may be unset or point elsewhere)."""
    import pwd
    homes = [os.environ.get("HOME", "")]
    try:
        homes.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    return homes


def _site_folders():
    """Where a zygote finds third-party packages (it runs with -S: no site code, no .pth files):
    site-packages, the user site (`pip install --user`) and wherever the landlock binding was
    found (PYTHONPATH, ...)."""
    import importlib.util
    import site
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        folders.append(site.getusersitepackages())
    try:
        spec = importlib.util.find_spec("landlock")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        folders.append(os.path.dirname(list(spec.submodule_search_locations)[0]))
    return list(dict.fromkeys(folders))


def _hello(worker):
    # the zygote's layer report, once it is ready
    line = worker["proc"].stdout.readline()
    if not line:
        raise RuntimeError("sandbox worker failed to start; "
                           "`python sandbox.py --worker 1 [] 0 {} model` shows why")
    worker["hello"] = json.loads(line)
    return worker


def _stop(worker):
    """Kill a zygote and its children, close its pipes, remove its jobs folder if it made one
    outside a mount namespace."""
    # parent only, as in _start
    import shutil
    import tempfile
    try:
        # the zygote and its children (they stay in its group)
        os.killpg(worker["proc"].pid, signal.SIGKILL)
    except OSError:
        pass
    worker["proc"].wait()
    for f in (worker["proc"].stdin, worker["proc"].stdout):
        # unflushed bytes to a dead zygote: BrokenPipeError
        try:
            f.close()
        except OSError:
            pass
    base = ""
    if worker["hello"]:
        base = worker["hello"].get("base", "")
    made_here = os.path.dirname(base) in (tempfile.gettempdir(), "/dev/shm")
    if made_here and os.path.basename(base).startswith("populora-sandbox-"):
        shutil.rmtree(base, ignore_errors=True)


def _ensure(kind):
    """The pool's zygotes of `kind` started (two families of WORKERS_PER_FAMILY) and alive."""
    # first use, or we are a forked copy of the process that had it
    if _pool["pid"] != os.getpid():
        # children's uids: a random range per pool, so no child of another pool (another trainer)
        # shares one
        uid_base = (1 << 20) + int.from_bytes(os.urandom(4), "little") % (1 << 30)
        _pool.update(pid=os.getpid(), workers=[], uid_base=uid_base)
    if not any(w["kind"] == kind for w in _pool["workers"]):
        # start them all, then wait for each to be ready
        started = []
        for family in (0, 1):
            for _ in range(WORKERS_PER_FAMILY):
                started.append(_start(family, kind))
        _pool["workers"] += [_hello(w) for w in started]
    # died while idle (killed from outside): replace before use
    for n, w in enumerate(_pool["workers"]):
        if w["proc"].poll() is not None:
            _stop(w)
            _pool["workers"][n] = _hello(_start(w["family"], w["kind"]))


def _pack(job, cache):
    """Job dict with source texts -> the settings a zygote reads (HEADER bytes: the payload's
    length, the time limit in ms, the memory limit in MB, the stdout cap) + the payload its child
    reads (marshal bytes), every text compiled here (compiling runs nothing; a child then only
    unmarshals and executes, and a validity pair shares one compile via `cache`)."""
    # parent only (zygotes never pack)
    import warnings

    def code(text, name, mode):
        if (text, name, mode) not in cache:
            # model text's compile-time warnings stay off the console (verify.quiet)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cache[text, name, mode] = compile(text, name, mode, dont_inherit=True)
        return cache[text, name, mode]
    body = {k: v for k, v in job.items() if k != "family"}
    body["code"] = code(job.get("code", ""), "<program>", "exec")
    body["calls"] = [code(c, "<call>", "eval") for c in job.get("calls", ())]
    data = marshal.dumps(body)
    timeout_ms = int(float(job.get("timeout", 5.0)) * 1000)
    numbers = (len(data), timeout_ms, int(job.get("memory_mb") or MEMORY_MB),
               int(job.get("stdout_cap", STDOUT_CAP)))
    return b"".join(n.to_bytes(8, "little") for n in numbers) + data


def run(jobs):
    """Run jobs (dicts, see _evaluate/_child) in parallel over the pool. A job's "family" (0, 1 or
    None) picks the zygote family. Returns one {"ok", "error", "stdout", "values"} per job, in
    order."""
    results = [None] * len(jobs)
    # model programs (validation and grading: job["audit"]) and benchmark code run in zygotes of
    # their own (see _zygote_main)
    kind = "code"
    if any(job.get("audit") for job in jobs):
        kind = "model"
        if not all(job.get("audit") for job in jobs):
            raise ValueError("a run holds either model programs (audit) or benchmark code")
    if not jobs:
        return results
    with _pool["lock"]:
        _ensure(kind)
        _pool["kind"] = kind
        queues = {0: [], 1: [], None: []}
        for i in reversed(range(len(jobs))):
            queues[jobs[i].get("family")].append(i)
        try:
            _dispatch(jobs, results, queues)
        # interrupted (KeyboardInterrupt, ...): no stale job may answer later
        finally:
            for n, w in enumerate(_pool["workers"]):
                if w["jobs"]:
                    _stop(w)
                    _pool["workers"][n] = _hello(_start(w["family"], w["kind"]))
    return results


def _dispatch(jobs, results, queues):
    """The select loop of run(): feed the zygotes and collect their answers until every job has
    one."""
    cache, packed, pending = {}, {}, len(jobs)
    while pending:
        pending -= _feed(jobs, results, queues, cache, packed)
        pending -= _collect(jobs, results, queues)


def failed(error):
    """The result of a job that gave no answer of its own."""
    return {"ok": False, "error": error, "stdout": "", "values": None, "pid": 0, "cpu_s": 0.0,
            "wall_s": 0.0}


def _feed(jobs, results, queues, cache, packed):
    """Keep each zygote up to two jobs deep, idle zygotes first (the next job waits in its pipe: no
    sleep and wake between jobs). `packed`: jobs packed already that did not fit in a pipe. -> how
    many jobs were answered here (those that do not compile)."""
    answered = 0
    rounds = []
    for depth in (1, 2):
        for worker in _pool["workers"]:
            if worker["kind"] == _pool["kind"]:
                rounds.append((depth, worker))
    for depth, w in rounds:
        while len(w["jobs"]) < depth:
            queue = queues[w["family"]] or queues[None]
            if not queue:
                break
            i = queue.pop()
            try:
                payload = packed.pop(i, None) or _pack(jobs[i], cache)
            except (SyntaxError, ValueError, TypeError, OverflowError, RecursionError,
                    MemoryError) as e:
                results[i] = failed(_describe(e))
                answered += 1
                continue
            # must fit in the pipe (64 KiB) beside the job before it, or the write would block
            # while the zygote runs that one
            if w["jobs"] and len(payload) > 1 << 15:
                queue.append(i)
                packed[i] = payload
                break
            if not w["jobs"]:
                w["deadline"] = time.monotonic() + float(jobs[i].get("timeout", 5.0)) + GRACE_S
            w["jobs"].append(i)
            try:
                w["proc"].stdin.write(payload)
                w["proc"].stdin.flush()
            # a dead zygote: _collect sees EOF
            except OSError:
                pass
    return answered


def _collect(jobs, results, queues):
    """Wait for answers until the first deadline, take every complete one, replace zygotes that
    died (EOF) or are past their deadline (the jobs behind are requeued). -> how many jobs were
    answered."""
    answered = 0
    busy = []
    for w in _pool["workers"]:
        if w["jobs"]:
            busy.append(w)
    wait = min([w["deadline"] for w in busy], default=0) - time.monotonic()
    ready = set()
    if busy:
        pipes = [w["proc"].stdout for w in busy]
        ready = set(select.select(pipes, [], [], max(0.0, wait))[0])
    now = time.monotonic()
    for n, w in enumerate(_pool["workers"]):
        data = None
        if w["proc"].stdout in ready:
            # 64 KiB first: a 1 MiB buffer is an mmap + mremap per result
            size = 1 << 16
            if w["buf"]:
                size = 1 << 20
            data = os.read(w["proc"].stdout.fileno(), size)
        if data:
            w["buf"] += data
            answered += _answers(n, w, jobs, results, queues, now)
        # died (EOF) or hung: replace
        elif w["jobs"] and (data == b"" or now >= w["deadline"]):
            error = "timeout"
            if data == b"":
                error = "worker died"
            i = w["jobs"].pop(0)
            results[i] = failed(error)
            answered += 1
            _replace(n, w, jobs, queues)
    return answered


def _answers(n, w, jobs, results, queues, now):
    """Take the complete answer lines in zygote number n's buffer, one per job, in order. -> how
    many."""
    answered = 0
    while b"\n" in w["buf"] and w["jobs"]:
        line, w["buf"] = w["buf"].split(b"\n", 1)
        i = w["jobs"].pop(0)
        values = len(jobs[i].get("calls", ())) + len(jobs[i].get("args", ()))
        results[i], retire = _parse_answer(line, values)
        answered += 1
        # its clean-up failed: it has exited; the jobs behind go elsewhere
        if retire:
            _replace(n, w, jobs, queues)
            break
        # the zygote starts the next one now
        if w["jobs"]:
            timeout = float(jobs[w["jobs"][0]].get("timeout", 5.0))
            w["deadline"] = now + timeout + GRACE_S
    return answered


def _replace(n, worker, jobs, queues):
    """Requeue the jobs a zygote was given but will not answer; stop it; start another instead."""
    for i in reversed(worker["jobs"]):
        queues[jobs[i].get("family")].append(i)
    worker["jobs"] = []
    _stop(worker)
    _pool["workers"][n] = _hello(_start(worker["family"], worker["kind"]))


def _parse_answer(line, calls):
    """One answer line of a zygote -> (result dict, retire). The header (pid, retire, the child's
    CPU seconds from the kernel, wall seconds) is the zygote's; the rest is the child's line, which
    user code can write itself, so it is parsed as hostile: any parse error, wrong key, wrong type
    or a "values" list that is not one entry per call makes it a failed run ("malformed result"), of
    this job alone. The entries themselves are the caller's to check (verify.decode)."""
    head = line.split(b"\t", 4)
    result = failed("malformed result")
    try:
        result.update(pid=int(head[0]), cpu_s=float(head[2]), wall_s=float(head[3]))
        retire = head[1] == b"1"
        r = json.loads(head[4])
    except (ValueError, IndexError, RecursionError, MemoryError):
        return result, False
    if type(r) is not dict or len(r) != 4:
        return result, retire
    if type(r.get("error")) is not str or type(r.get("stdout")) is not str:
        return result, retire
    if r.get("ok") is True and type(r.get("values")) is list and len(r["values"]) == calls:
        result.update(ok=True, error="", values=r["values"])
    elif r.get("ok") is False and r.get("values", 0) is None:
        result["error"] = r["error"][:ERROR_CAP]
    else:
        return result, retire
    result["stdout"] = r["stdout"][:STDOUT_CAP]
    return result, retire


def layers():
    """What isolation is active, as measured by the running zygotes (starts the pool): {layer: bool}
    for each layer, "why": {layer: the reason it is on or off}, "hidden_dirs", "workers" [(pid, hash
    seed)]."""
    with _pool["lock"]:
        _ensure("model")
        hellos = [w["hello"] for w in _pool["workers"] if w["kind"] == "model"]
    out = {"static_screen": True, "rlimits": True, "reliability_guard": True, "timeout_kill": True}
    why = {"static_screen": "verify.py's AST screen (a validity rule, not a wall)",
           "rlimits": "memory, CPU, no file bytes, 64 fds per child",
           "reliability_guard": "os/shutil/... disabled",
           "timeout_kill": "the zygote SIGKILLs a child at its deadline"}
    for name in hellos[0]["layers"]:
        out[name] = all(h["layers"][name][0] for h in hellos)
        why[name] = hellos[0]["layers"][name][1]
    out["network_isolation"] = out["network_namespace"] or out["seccomp"]
    why["network_isolation"] = "network namespace or seccomp (no sockets)"
    if not out["network_isolation"]:
        why["network_isolation"] = "neither a network namespace nor seccomp: children are online"
    out["filesystem_isolation"] = out["mount_namespace"] or out["landlock"]
    why["filesystem_isolation"] = "mount namespace or Landlock"
    if not out["filesystem_isolation"]:
        why["filesystem_isolation"] = ("neither a mount namespace nor Landlock: children can read "
                                       "and delete whatever this user can")
    workers = [(h["pid"], h["hash_seed"]) for h in hellos]
    out.update(why=why, hidden_dirs=hellos[0]["hidden"], workers=workers)
    return out


def zygotes():
    """The pool's zygotes, as started (starts none; empty before the first run):
    [{"pid": the process the parent started, whose group holds the zygote and its children,
    "family"}]."""
    out = []
    for w in _pool["workers"]:
        out.append({"pid": w["proc"].pid, "family": w["family"], "kind": w["kind"]})
    return out


def shutdown():
    """Stop the pool's zygotes and their children (also at exit); the next run starts new ones."""
    with _pool["lock"]:
        # a forked copy of the process that started them leaves them alone
        if _pool["pid"] == os.getpid():
            for w in _pool["workers"]:
                _stop(w)
        _pool.update(pid=None, workers=[])


atexit.register(shutdown)

if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    # site-packages without running .pth files (-S: ~4 MB less to fork)
    sys.path += sys.argv[7:]
    _zygote_main(int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]),
                 json.loads(sys.argv[5]), sys.argv[6])
