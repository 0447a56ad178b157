"""Process sandbox for model-written Python (SPEC §3 layers 2-5; layer 1, the static screen, is in verify.py).

Split out of verify.py (process isolation is a concern of its own; this file is also the worker program). API:
run(jobs) -> [{"ok", "error", "stdout", "values", "pid"}] (job keys: see _evaluate, _job), layers(), shutdown().

Design. The calling process never forks and never runs model text; it compiles each job (which runs nothing) and
ships it as marshal bytes (parent -> child only) to a pool of "zygotes": warm interpreters launched separately, each
with its own random PYTHONHASHSEED, in two families (a validity check's two runs go to different families, so set
order can differ). Per job a zygote unmarshals it, makes the child's cwd and forks; the child ends the lock-down,
runs the job, writes one JSON line of plain strings/bools (values are `repr` strings) for the zygote to forward;
nothing from a child is unpickled or evaluated. ~1.5 ms CPU per run in all (fork, exit, faults); python -c: ~60 ms.

Layers (Linux; `layers()` reports what the running zygotes measured):
  2. per child: RLIMIT_AS (1 GiB default, `memory_mb`), RLIMIT_CPU (timeout + 2 s), RLIMIT_FSIZE = 0,
     RLIMIT_NOFILE = 64, RLIMIT_NPROC = 0 (no fork, no threads) made binding by dropping root to a uid of its own
     (60000 + zygote number), no_new_privs; a fresh empty cwd; the zygote's scrubbed environment (PATH, LANG,
     PYTHONHASHSEED, *_NUM_THREADS=1); stdin = /dev/null or a file holding the job's stdin; fds 1/2 on /dev/null
     and sys.stdout/err capped in-memory buffers (1 MiB / 64 KiB).
  3. before any user code: destructive functions of os, shutil, subprocess, socket are None (the last three, which
     zygotes do not load, via an import hook); zygotes run with -S: no site code, exit, quit or help.
  4. wall-clock timeout per job: the zygote SIGKILLs the child (it cannot have made processes) and forks a fresh
     one; a zygote that dies or stops answering (timeout + 5 s) is killed with its process group and replaced.
  5. as root, each zygote unshares a network namespace (no interface up, not even loopback) and a private mount
     namespace in which every filesystem is read-only, /tmp, /var/tmp, /dev/shm, /run/lock are fresh small
     tmpfs, and /root, /home, $HOME and the repo's parent folder are covered (the interpreter's own folders,
     e.g. pyenv under /root, are bound back read-only). Without root: a user + network namespace is tried, no
     uid drop (NPROC = 0 still blocks fork), no mount namespace.
Not covered: no seccomp, no PID namespace (/proc lists other processes; other uids cannot signal or trace them),
world-readable system files stay readable, host CPU/memory are shared (per-child limits only), a child's memory
(its zygote's) may hold bytes of earlier jobs; without the mount namespace, children can create empty files in
world-writable folders and truncate world-writable files.
"""
import atexit
import cmath
import ctypes
import gc
import io
import json
import marshal
import os
import resource
import select
import signal
import sys
import time
from importlib.machinery import PathFinder
from os import (_exit, chdir as _chdir, chown as _chown, close as _close, closerange as _closerange, dup2 as _dup2,
                kill as _kill_pid, mkdir as _mkdir, open as _open_fd, pipe as _pipe, read as _read, rmdir as _rmdir,
                setuid as _setuid, unlink as _unlink, waitpid as _waitpid, write as _write)   # bound before layer 3

WORKERS_PER_FAMILY = int(os.environ.get("POPULORA_SANDBOX_WORKERS", "0")) or max(1, min(os.cpu_count() or 1, 8))
MEMORY_MB = 1024            # default RLIMIT_AS of a child
STDOUT_CAP = 1 << 20        # bytes of captured stdout kept
GRACE_S = 5.0               # a zygote must answer within job timeout + this, else it is replaced
UID_BASE = 60000            # children run as UID_BASE + zygote number (root only)
PRELOAD = ("collections", "itertools", "functools", "math", "cmath", "re", "string", "heapq", "bisect", "json",
           "typing", "dataclasses", "fractions", "decimal", "statistics", "copy", "operator", "enum", "array",
           "numbers", "textwrap", "unicodedata", "queue")   # not socket, subprocess, shutil: see _GuardHook
GUARD = {"os": "kill killpg system remove removedirs rmdir unlink rename renames replace truncate chmod fchmod lchmod "
               "chown fchown lchown chroot fork forkpty setuid setgid setsid setpgid fchdir chdir execv execve execl "
               "execle execlp execlpe execvp execvpe spawnv spawnve spawnvp spawnvpe spawnl spawnle spawnlp spawnlpe "
               "popen posix_spawn posix_spawnp link symlink mkfifo mknod",
         "shutil": "rmtree move chown copyfile copy copy2 copytree", "builtins": "exit quit help",
         "subprocess": "Popen run call check_call check_output getoutput getstatusoutput",
         "socket": "socket create_connection create_server socketpair fromfd"}

# ----------------------------------------------------------------------------- child side (runs user code)

_type_ok = {}
_escape = json.encoder.encode_basestring_ascii


def _real_type(t):
    """True if `t` is a builtin or collections/fractions/decimal type reachable at its module path: not a class
    the user made or renamed, nor a library's always-equal object (unittest.mock.ANY)."""
    if t in _LITERAL:
        return True
    if t not in _type_ok:
        try:
            obj = sys.modules.get(t.__module__) if t.__module__ in _VALUE_MODULES else None
            for part in t.__qualname__.split("."):
                obj = getattr(obj, part, None)
            _type_ok[t] = obj is t
        except Exception:
            _type_ok[t] = False
    return _type_ok[t]


_VALUE_MODULES = {"builtins", "collections", "fractions", "decimal", "array"}
_LITERAL = {type(None), type(...), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset}


def _plain(value, limit=1_000_000):
    """0 unless `value` is built only from real builtin/stdlib types, so `==` on it cannot be user-defined (no
    always-equal objects sneaking through grading); 2 when it is moreover a tree of literal types with finite
    numbers, whose repr evaluates back to an equal value by construction; else 1. Iterative; shared or cyclic
    containers are walked once (and make it 1); more than `limit` nodes make it 0."""
    stack, seen, count, kind = [value], set(), 0, 2
    while stack:
        v, count = stack.pop(), count + 1
        t = type(v)
        if not _real_type(t) or count > limit:
            return 0
        if t not in _LITERAL or (t is float or t is complex) and not cmath.isfinite(v):
            kind = 1
        if isinstance(v, (list, tuple, set, frozenset, dict)) or t.__name__ == "deque":
            if id(v) in seen:
                kind = 1
                continue
            seen.add(id(v))
            stack.extend(v.items() if isinstance(v, dict) else v)
    return kind


def _describe(e):
    try:
        text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    except BaseException:
        text = type(e).__name__
    return text if len(text) <= 300 else text[:300] + "..."


class _Capped(io.BytesIO):
    """stdout/stderr sink that keeps the first `cap` bytes and silently drops the rest (huge outputs)."""
    cap = STDOUT_CAP

    def write(self, b):
        room = self.cap - self.tell()
        if room > 0:
            super().write(bytes(b[:room]))
        return len(b)


def _evaluate(job, repr_=repr, eval_=eval, exec_=exec, compile_=compile):
    """The job proper, on code objects the parent compiled. Order: gold values first (imports only, no user code
    yet), then the program, then calls. mode "repr": each call's value -> repr string (round-trip checked unless
    job["roundtrip"] is False); "equal": gold == value on plain values; otherwise just run the program."""
    gold_ns = {"__name__": "__main__"}
    exec_(job["imports"], gold_ns)
    golds = [eval_(g, dict(gold_ns)) for g in job["golds"]]
    ns = {"__name__": "__main__"}
    exec_(job["code"], ns)
    values, mode, cap = [], job.get("mode"), job.get("repr_cap", 2000)
    for i, call in enumerate(job["calls"]):
        v = eval_(call, ns)
        if mode == "repr":
            r = repr_(v)
            if type(r) is not str or len(r) > cap:
                raise ValueError(f"output repr is not a str of at most {cap} chars")
            kind = _plain(v)
            if not kind:
                raise ValueError("output is not a plain value (builtin and standard-library types only)")
            if kind == 1 and job.get("roundtrip", True):   # Counter(...), nan, ...: really evaluate the repr
                try:
                    back = eval_(compile_(r, "<repr>", "eval"), dict(gold_ns))
                except Exception as e:
                    raise ValueError(f"output repr does not evaluate back ({_describe(e)})") from None
                if not (_plain(back) and bool(back == v)):
                    raise ValueError("output repr does not evaluate back to an equal value")
            values.append(r)
        elif mode == "equal":
            values.append(bool(_plain(v) and golds[i] == v))
    return values


def _outcome(job):
    """Run a job -> its result line: one JSON object of plain strings/bools (values are repr strings or bools),
    built with the C string escaper alone (json.dumps costs ~80 copy-on-write faults in a fresh child)."""
    values, error, ok = None, "", False
    try:
        values, ok = _evaluate(job), True
    except BaseException as e:                    # SystemExit, KeyboardInterrupt, MemoryError, ... all contained
        error = _describe(e)
    try:
        _out.flush()
        stdout = _out.buffer.getvalue().decode("utf-8", "replace")
    except BaseException:
        stdout = ""
    esc = _escape
    return '{"ok": %s, "error": %s, "stdout": %s, "values": %s}\n' % (
        "true" if ok else "false", esc(error), esc(stdout), "null" if values is None else "[%s]" % ", ".join(
            ("true" if v else "false") if v is True or v is False else esc(v) for v in values))


def _guard():
    """Layer 3 (after HumanEval's reliability_guard): defence in depth against code that got past layer 1."""
    for module, names in GUARD.items():
        for name in set(names.split()) & set(dir(sys.modules.get(module))):
            setattr(sys.modules[module], name, None)


class _GuardHook:
    """Layer 3 for GUARD modules zygotes do not load (banned in screened code; each page costs every fork)."""
    @staticmethod
    def find_spec(name, path=None, target=None):
        spec = PathFinder.find_spec(name, path) if name in GUARD else None
        if spec is not None and spec.loader is not None:
            load = spec.loader.exec_module
            spec.loader.exec_module = lambda module: (load(module), _guard())
        return spec


def _child(job, wfd, limits, uid):
    """Runs in a child the zygote forked for one job, inside a fresh empty cwd of its own with stdin in place:
    finish the lock-down, run, write one JSON line to wfd, _exit. Never returns. Every page a child writes costs a
    copy-on-write fault (~3 us here), so whatever it can, the zygote did before the fork. The syscalls used are this
    module's own bindings (layer 3 sets os.<name> = None for user code); user code starts after every limit."""
    try:
        if uid:
            _setuid(uid)                          # RLIMIT_NPROC = 0 (inherited) is binding now that root is gone
        _closerange(3, wfd)
        _closerange(wfd + 1, 1 << 16)
        for kind, value in limits:
            resource.setrlimit(kind, value)
        line = _outcome(job)
    except BaseException as e:
        line = '{"ok": false, "error": %s, "stdout": "", "values": null}\n' % _escape("sandbox set-up failed: " +
                                                                                   _describe(e))
    try:
        _write_all(wfd, line.encode())
    except BaseException:
        pass
    _exit(0)


# ----------------------------------------------------------------------------- zygote side

_libc = _pyfork = _null = None   # set in the zygote (children must not dlopen after fork)
_out = None    # the capped stdout every child inherits (kept here in case user code rebinds sys.stdout)
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 8192, 16384, 1 << 18


def _mount_setup(repo, home):
    """Private mount namespace: empty tmpfs over the world-writable dirs, tmpfs over private homes and the
    repo's folder, with the interpreter's own folders (which may live under /root) bound back in.
    Returns the list of hidden dirs, or None when the namespace could not be made."""
    mount = _libc.mount
    if _libc.unshare(0x00020000) != 0 or mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return None                               # CLONE_NEWNS; private first, so nothing propagates to the host
    for line in open("/proc/self/mountinfo"):     # every filesystem read-only in here (per-mount flag, ours only)
        point, options = line.split()[4].encode().decode("unicode_escape"), line.split()[5].split(",")
        if "ro" not in options and not point.startswith(("/proc", "/sys", "/dev")):
            keep = sum(bit for name, bit in (("nosuid", 2), ("nodev", 4), ("noexec", 8)) if name in options)
            if mount(None, point.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | keep, None) != 0:
                return None
    for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
        if os.path.isdir(d) and not os.path.islink(d):
            mount(b"tmpfs", d.encode(), b"tmpfs", 0, b"size=256m,nr_inodes=16384,mode=1777")
    keep = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path)
            if p and os.path.isdir(p) and os.path.realpath(p) != repo}
    keep = sorted(k for k in keep if not any(k.startswith(o + "/") for o in keep))
    hidden = []
    for d in ("/root", "/home", home, os.path.dirname(repo), repo):
        d = os.path.realpath(d) if d else ""
        if not d or d == "/" or not os.path.isdir(d) or any(d == h or d.startswith(h + "/") for h in hidden):
            continue
        if any(d == k or d.startswith(k + "/") for k in keep):
            continue                              # d is inside the interpreter's folders
        inner = [k for k in keep if k.startswith(d + "/")]
        stash = []
        for j, k in enumerate(inner):             # bind the interpreter's folders aside, cover d, move them back
            s = f"/tmp/.keep{len(hidden)}-{j}"
            os.mkdir(s)
            if mount(k.encode(), s.encode(), None, _MS_BIND | _MS_REC, None) == 0:
                stash.append((k, s))
        opts = b"size=64k,nr_inodes=256,mode=0711" if inner else b"size=4k,nr_inodes=2,mode=000"
        if mount(b"tmpfs", d.encode(), b"tmpfs", 0 if inner else _MS_RDONLY, opts) != 0:
            continue
        for k, s in stash:
            os.makedirs(k, mode=0o711, exist_ok=True)
            mount(s.encode(), k.encode(), None, _MS_MOVE, None)
            os.rmdir(s)
        hidden.append(d)
    return hidden


def _uid_works(uid):
    """Can a child with this uid still read the stdlib (Python may be installed under /root, e.g. pyenv)?"""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid), os.setuid(uid), os.close(os.open(os.path.dirname(os.__file__) + "/random.py", 0))
        finally:
            os._exit(0 if sys.exc_info()[0] is None else 1)
    return os.waitpid(pid, 0)[1] == 0


def _zygote_main(number, home):
    global _libc, _out, _pyfork, _null
    os.environ.pop("LD_BIND_NOW", None)          # set by the parent so children never resolve symbols (GOT writes)
    _libc = ctypes.CDLL(None, use_errno=True)
    _pyfork = ctypes.PyDLL(None).fork
    repo = os.path.dirname(os.path.abspath(__file__))
    layers = {"uid_drop": False, "network_namespace": False, "mount_namespace": False, "hidden": []}
    if os.geteuid() == 0:
        hidden = _mount_setup(repo, home)
        layers.update(mount_namespace=hidden is not None, hidden=hidden or [])
        layers["network_namespace"] = _libc.unshare(0x40000000) == 0   # CLONE_NEWNET
    elif _libc.unshare(0x10000000 | 0x40000000) == 0:                  # CLONE_NEWUSER | CLONE_NEWNET
        uid, gid = os.getuid(), os.getgid()
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
        layers["network_namespace"] = True
    uid = UID_BASE + number % 5000
    layers["uid_drop"] = os.geteuid() == 0 and _uid_works(uid)
    uid = uid if layers["uid_drop"] else 0
    if uid:                                       # still root (euid 0) but with the children's gid and no groups;
        os.setgroups(())
        os.setgid(uid)
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))   # root is exempt (it still forks), the children's uid not
    for kind, value in ((resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):   # inherited by every child
        resource.setrlimit(kind, (value, value))
    base = "/tmp" if layers["mount_namespace"] else __import__("tempfile").mkdtemp(prefix="populora-sandbox-")
    os.chmod(base, 0o1777)                        # like /tmp (which it is, with the mount namespace)
    os.mkdir(jobs := base + "/jobs", 0o711)       # the zygote's: children reach their own cwd in here, make no name
    for name in PRELOAD:
        __import__(name)
    if sys.path and sys.path[0] == repo:
        del sys.path[0]                            # user code must not import the repo's modules
    layers.update(pid=os.getpid(), hash_seed=os.environ.get("PYTHONHASHSEED"), base=base)
    # Protocol on private fds; children inherit fd 0 (their job's stdin), capped sys.stdout/err, fds 1/2 /dev/null
    requests, replies = os.dup(0), os.dup(1)
    _null = os.open(os.devnull, os.O_RDWR)        # kept: a job's stdin file is swapped back for it after the job
    for fd in (0, 1, 2):
        os.dup2(_null, fd)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8",
                                 errors="replace")
    sys.stdout = _out = io.TextIOWrapper(_Capped(), encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.stderr = io.TextIOWrapper(_Capped(), encoding="utf-8", errors="backslashreplace", write_through=True)
    _libc.prctl(38, 1, 0, 0, 0)                   # PR_SET_NO_NEW_PRIVS, inherited: no exec can gain privileges
    _guard()                                      # layer 3, once here: every child inherits disabled functions
    sys.meta_path.insert(0, _GuardHook)
    warm = {"imports": compile("", "<w>", "exec"), "code": compile("f = list", "<w>", "exec"), "calls": [compile(
            "f([1, 'a', (2.5,)])", "<w>", "eval")], "golds": [compile("[1, 'a', (2.5,)]", "<w>", "eval")]}
    for mode in ("repr", "equal") * 9:            # a fixed job of ours quickens the child-side code here, not in
        _outcome(dict(warm, mode=mode))           # every child (~10 fewer copy-on-write faults per child)
    gc.freeze()                                   # keep the collector off the zygote's pages in children
    _write_all(replies, (json.dumps(layers) + "\n").encode())
    count = 0                                     # jobs: length + marshal bytes; b"" at EOF (shutdown, or parent died)
    while payload := _take(requests, int.from_bytes(_take(requests, 8) or b"\0", "little")):
        count += 1
        _write_all(replies, _job(marshal.loads(payload), f"{jobs}/{count}", uid))


def _job(job, workdir, uid):
    """Fork a child for one job (trusted code objects from the parent) in a fresh cwd, made here and given to the
    child's uid; wait for its result line and exit within the deadline, kill it, clean up. Returns
    b"<pid>\t<json>\n" for the parent. A page the zygote writes costs ~0.8 us (a write-protect fault) when no
    child shares it, a page a child writes ~3 us (a copy): so the job is unmarshalled and set up here."""
    timeout = float(job.get("timeout", 5.0))
    _out.buffer.cap = cap = int(job.get("stdout_cap", STDOUT_CAP))
    limits = [(resource.RLIMIT_AS, (int(job.get("memory_mb") or MEMORY_MB) << 20,) * 2),
              (resource.RLIMIT_CPU, (int(timeout) + 2,) * 2), (resource.RLIMIT_FSIZE, (0, 0)),
              *[(resource.RLIMIT_NPROC, (0, 0))] * (not uid)]   # without a uid drop, each child sets NPROC = 0
    _mkdir(workdir, 0o700)
    if uid:
        _chown(workdir, uid, uid)
    _chdir(workdir)
    if job.get("stdin"):
        with open(".stdin", "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(job["stdin"])
        fd = _open_fd(".stdin", os.O_RDONLY)
        _dup2(fd, 0)                              # the zygote's fd 0 goes back to /dev/null below
        _close(fd)
    r, w = _pipe()
    deadline = time.monotonic() + timeout
    pid = _pyfork()                               # fork(2) from libc, GIL held (PyDLL): os.fork's after-fork hooks
    if pid < 0:                                   # (random reseed, threading reinit, ...) cost ~0.6 ms of COW faults
        raise OSError("fork failed")              # per child, 3x the bare fork; fine as the zygote has one thread
    if pid == 0:
        _close(r)
        _child(job, w, limits, uid)
    _close(w)
    buf, error = b"", ""
    while True:                                   # the child writes one line, then exits: read to EOF
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([r], (), (), left)[0]:
            error = "timeout"
            break
        data = _read(r, 4096 if not buf else 1 << 16)
        buf += data
        if not data or len(buf) > cap * 6 + (1 << 20):   # JSON escapes can grow text 6x (\uXXXX)
            error = "" if not data else "result too large"
            break
    _kill_pid(pid, signal.SIGKILL)                # not reaped yet, so it exists; it cannot have made processes
    _, status = _waitpid(pid, 0)
    _close(r)
    if job.get("stdin"):
        _dup2(_null, 0)
    _chdir("/")
    try:
        _rmtree(workdir)
    except OSError:
        pass
    if not error and buf.endswith(b"\n") and buf.count(b"\n") == 1:
        return b"%d\t" % pid + buf
    if not error:
        code = os.waitstatus_to_exitcode(status)
        error = ("malformed result" if buf else f"crashed ({signal.Signals(-code).name})" if code < 0 and
                 -code != signal.SIGKILL else f"exited (code {code}) without a result")
    return b"%d\t" % pid + (json.dumps({"ok": False, "error": error, "stdout": "", "values": None}) + "\n").encode()


def _write_all(fd, data):
    while data:
        data = data[_write(fd, data):]


def _take(fd, n):
    """Exactly n bytes (b"" at EOF), unbuffered: a child must not inherit the bytes of the job queued behind it."""
    data = b""
    while len(data) < n and (chunk := _read(fd, n - len(data))):
        data += chunk
    return data if len(data) == n else b""


def _rmtree(path):
    """shutil.rmtree without the functions the guard disabled (the common case is an empty dir)."""
    try:
        _rmdir(path)
    except OSError:
        for entry in os.scandir(path):
            _rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else _unlink(entry.path)
        _rmdir(path)


# ----------------------------------------------------------------------------- parent side (the pool)

_pool = {"pid": None, "workers": [], "count": 0, "lock": __import__("_thread").allocate_lock()}


def _start(family):
    """Launch one zygote with a fresh scrubbed environment and its own hash seed; read its hello line."""
    import subprocess                             # parent only: zygotes never load it (see _GuardHook)
    seed = 1 + int.from_bytes(os.urandom(4), "little") % (2**32 - 1)   # 0 would turn hash randomisation off
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": str(seed), "LD_BIND_NOW": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    _pool["count"] += 1
    proc = subprocess.Popen([sys.executable, "-S", "-s", "-B", os.path.abspath(__file__), "--worker",
                             str(_pool["count"]), os.environ.get("HOME", ""), *__import__("site").getsitepackages()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            cwd="/", start_new_session=True)
    return {"proc": proc, "family": family, "buf": b"", "jobs": [], "deadline": 0.0, "hello": None}


def _hello(worker):
    if not (line := worker["proc"].stdout.readline()):   # the zygote's layer report, once it is ready
        raise RuntimeError("sandbox worker failed to start; `python sandbox.py --worker 1 ~` shows why")
    worker["hello"] = json.loads(line)
    return worker


def _stop(worker):
    try:
        os.killpg(worker["proc"].pid, signal.SIGKILL)   # the zygote and its children (they stay in its group)
    except OSError:
        pass
    worker["proc"].wait()
    for f in (worker["proc"].stdin, worker["proc"].stdout):
        with __import__("contextlib").suppress(OSError):
            f.close()                             # unflushed bytes to a dead zygote: BrokenPipeError
    base = (worker["hello"] or {}).get("base", "")
    if base.startswith(__import__("tempfile").gettempdir() + "/populora-sandbox-"):
        __import__("shutil").rmtree(base, ignore_errors=True)


def _ensure():
    if _pool["pid"] != os.getpid():             # first use, or we are a forked copy of the process that had it
        _pool.update(pid=os.getpid(), workers=[])
        started = [_start(family) for family in (0, 1) for _ in range(WORKERS_PER_FAMILY)]
        _pool["workers"] = [_hello(w) for w in started]
    for n, w in enumerate(_pool["workers"]):   # died while idle (killed from outside): replace before use
        if w["proc"].poll() is not None:
            _stop(w)
            _pool["workers"][n] = _hello(_start(w["family"]))


def _pack(job, cache):
    """Job dict with source texts -> 8-byte length + marshal bytes, every text compiled here (compiling runs
    nothing; a child then only unmarshals and executes, and a validity pair shares one compile via `cache`)."""
    def code(text, name, mode):
        if (text, name, mode) not in cache:
            cache[text, name, mode] = compile(text, name, mode, dont_inherit=True)
        return cache[text, name, mode]
    body = {k: v for k, v in job.items() if k != "family"}
    body.update(code=code(job.get("code", ""), "<program>", "exec"), imports=code(job.get("imports", ""), "<imports>",
                "exec"), golds=[code(f"(\n{g}\n)", "<gold>", "eval") for g in job.get("golds", ())],
                calls=[code(c, "<call>", "eval") for c in job.get("calls", ())])
    data = marshal.dumps(body)
    return len(data).to_bytes(8, "little") + data


def run(jobs):
    """Run jobs (dicts, see _evaluate/_child) in parallel over the pool. A job's "family" (0, 1 or None)
    picks the zygote family. Returns one {"ok", "error", "stdout", "values"} per job, in order."""
    results = [None] * len(jobs)
    with _pool["lock"]:
        _ensure()
        queues = {0: [], 1: [], None: []}
        for i in reversed(range(len(jobs))):
            queues[jobs[i].get("family")].append(i)
        try:
            _dispatch(jobs, results, queues)
        finally:                                  # interrupted (KeyboardInterrupt, ...): no stale job may answer later
            for n, w in enumerate(_pool["workers"]):
                if w["jobs"]:
                    _stop(w)
                    _pool["workers"][n] = _hello(_start(w["family"]))
    return results


def _dispatch(jobs, results, queues):
    """The select loop of run(): keep each zygote up to two jobs deep (the next waits in its pipe: no sleep and wake
    between jobs), collect answers in order, replace zygotes that die or hang (the job behind is requeued)."""
    cache, packed, pending = {}, {}, len(jobs)
    while pending:
        for depth, w in [(d, w) for d in (1, 2) for w in _pool["workers"]]:   # idle zygotes first, then queue one
            while len(w["jobs"]) < depth and (queues[w["family"]] or queues[None]):
                i = (queue := queues[w["family"]] or queues[None]).pop()
                try:
                    payload = packed.pop(i, None) or _pack(jobs[i], cache)
                except (SyntaxError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as e:
                    results[i] = {"ok": False, "error": _describe(e), "stdout": "", "values": None, "pid": 0}
                    pending -= 1
                    continue
                if w["jobs"] and len(payload) > 1 << 15:   # must fit in the pipe (64 KiB) beside nothing else,
                    queue.append(i)                         # or the write would block while the zygote runs one
                    packed[i] = payload
                    break
                if not w["jobs"]:
                    w["deadline"] = time.monotonic() + float(jobs[i].get("timeout", 5.0)) + GRACE_S
                w["jobs"].append(i)
                try:
                    w["proc"].stdin.write(payload)
                    w["proc"].stdin.flush()
                except OSError:
                    pass                          # dead zygote: noticed below as EOF
        busy = [w for w in _pool["workers"] if w["jobs"]]
        wait = min([w["deadline"] for w in busy], default=0) - time.monotonic()
        ready, now = set(select.select([w["proc"].stdout for w in busy], [], [], max(0.0, wait))[0] if busy else ()), \
            time.monotonic()
        for n, w in enumerate(_pool["workers"]):
            data = os.read(w["proc"].stdout.fileno(), 1 << 20 if w["buf"] else 1 << 16) if w["proc"].stdout in ready \
                else None                         # 64 KiB first: a 1 MiB buffer is an mmap + mremap per result
            if data:
                w["buf"] += data
                while b"\n" in w["buf"]:           # one line per job, in order
                    line, w["buf"] = w["buf"].split(b"\n", 1)
                    results[w["jobs"].pop(0)] = _decode(line)
                    pending -= 1
                    if w["jobs"]:                 # the zygote starts the next one now
                        w["deadline"] = now + float(jobs[w["jobs"][0]].get("timeout", 5.0)) + GRACE_S
            elif w["jobs"] and (data == b"" or now >= w["deadline"]):   # died (EOF) or hung: replace
                results[w["jobs"].pop(0)] = {"ok": False, "error": "worker died" if data == b"" else "timeout",
                                             "stdout": "", "values": None}
                pending -= 1
                for i in reversed(w["jobs"]):
                    queues[jobs[i].get("family")].append(i)
                _stop(w)
                _pool["workers"][n] = _hello(_start(w["family"]))


def _decode(line):
    pid, _, body = line.partition(b"\t")
    try:
        r = json.loads(body)
        return {"ok": r["ok"] is True, "error": str(r["error"]), "stdout": str(r["stdout"]), "values": r["values"],
                "pid": int(pid)}
    except (ValueError, KeyError, TypeError):    # only code that reached the result pipe could write this
        return {"ok": False, "error": "malformed result", "stdout": "", "values": None, "pid": int(pid)}


def layers():
    """What isolation is active, as measured by the running zygotes (starts the pool)."""
    with _pool["lock"]:
        _ensure()
        hellos = [w["hello"] for w in _pool["workers"]]
    return {"static_screen": True, "rlimits": True, "reliability_guard": True, "timeout_kill": True,
            "no_fork": all(h["uid_drop"] for h in hellos) or os.geteuid() != 0,
            **{k: all(h[k] for h in hellos) for k in ("uid_drop", "network_namespace", "mount_namespace")},
            "hidden_dirs": hellos[0]["hidden"], "workers": [(h["pid"], h["hash_seed"]) for h in hellos]}


def shutdown():
    with _pool["lock"]:
        for w in _pool["workers"] if _pool["pid"] == os.getpid() else ():
            _stop(w)
        _pool.update(pid=None, workers=[])


atexit.register(shutdown)

if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    sys.path += sys.argv[4:]                      # site-packages without running .pth files (-S: ~4 MB less to fork)
    _zygote_main(int(sys.argv[2]), sys.argv[3])
