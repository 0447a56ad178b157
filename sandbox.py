"""Process sandbox for model-written Python (design §3 layers 2-7; layer 1, the static screen, is
screen.py). Three files: this one, the pool in the calling process (the API); zygote.py, the
processes it starts and their children; isolation.py, the walls a zygote puts up once.

API: run(jobs) -> [{"ok", "error", "stdout", "values", "pid", "cpu_s", "wall_s", "zygote"}] (job
keys: zygote._evaluate, _pack, "family", "zygote"), layers() (every layer, on or off, and why),
zygotes(), shutdown(), failed(error), seccomp_programs() (isolation.py's).

Design. The calling process never forks and never runs model text; it compiles each job (which runs
nothing) and ships it as marshal bytes (parent -> child only) to a pool of "zygotes": warm
interpreters launched separately, each with its own random PYTHONHASHSEED, in two families (a
validity check's two runs go to different families) and two kinds (model programs, under layer 3's
audit hook; benchmark code). A zygote reads only a job's settings (time and memory limits, stdout
cap), makes the child's fresh cwd (a random name) and forks; the child reads the job itself from
the request pipe, so no job ever passes through a zygote, of which every later child is a copy. The
child finishes the lock-down, runs the job and writes one JSON line; the zygote forwards it with
what it measured itself (pid, the child's CPU seconds from wait4), empties the jobs folder and the
private tmpfs folders, checks the jobs folder is still its own, and retires if anything fails. No
gold ever enters a child: a child returns a canonical encoding of each value (encoding.py: exact
builtin and collections/fractions/decimal types, checked with the real `type`, size, depth and
hash collisions capped) and the parent decides (verify.py). A line counts only after its job's
random token, and the parent still parses every line as hostile (_parse_answer): schema, types,
caps, one entry per call; a bad line fails its job alone. Results pass through an mmap buffer the
children do not inherit, given back to the kernel after each job.

Layers (Linux; `layers()` reports what the running zygotes measured, with reasons):
  2. per child: RLIMIT_AS (1 GiB default, `memory_mb`), RLIMIT_CPU (timeout + 2 s, behind layer
     4), RLIMIT_FSIZE = 0, RLIMIT_NOFILE = 64, RLIMIT_NPROC = 0 (no fork, no threads; binding for
     any non-root uid); as root, children drop to a uid of a random range per pool; no
     capabilities (capset); no_new_privs; a scrubbed environment; stdin /dev/null or a memory
     file of its own; capped stdout/stderr.
  3. before any user code: destructive functions of os, shutil, subprocess, socket are None; zygotes
     run with -S. Model programs (validation and grading) also run under an audit hook that refuses
     imports (their zygote's sys.modules holds only the allowed modules), open, compile/exec of
     anything but the job's code, code objects, frames and restricted attributes
     (zygote._audit_hook).
  4. a CPU-time limit per job (a profiling timer the child sets: SIGPROF), a wall-clock backstop
     (zygote.WALL_FACTOR x the limit + 1 s) at which the zygote SIGKILLs it, sooner (zygote.IDLE_S)
     for a model program's child that has waited 0.5 s in all (on a lock it holds itself, with no
     timeout: seccomp fails timed waits at once); a zygote that dies or hangs is replaced,
     without the run waiting for the new one to start.
  5. namespaces (isolation.py). As root: a mount namespace (every filesystem read-only, fresh tmpfs
     on /tmp, /var/tmp, /dev/shm, /run/lock, emptied after every job; /root, /home, the homes and
     the checkout with its folder covered, the interpreter's folders and the shared libraries put
     back wherever they live), network (no interface up), IPC (private SysV) and time namespaces
     (the children's monotonic and boot clocks a random offset ahead, per zygote). Without root:
     the same in a user namespace mapping only our uid, plus a PID namespace whose init is the
     zygote (children can signal only themselves and it, each a process group and session of its
     own; pids random per job). Root without CAP_SYS_ADMIN gets none of them.
  6. Landlock (pinned `landlock` binding, Linux >= 5.13, no root needed): the zygote and so its
     children may read only the interpreter's folders and shared libraries, and write only the jobs'
     folder (and the private tmpfs).
  7. seccomp (BPF compiled in the parent by the pinned `pyseccomp`, entered by each zygote,
     inherited): an allowlist (isolation.ALLOWED_SYSCALLS; prlimit64 on pid 0 only: a child sets
     its own limits alone); everything else fails (EPERM for the known-dangerous, ENOSYS for the
     rest, new syscalls included); where children keep our uid and no PID namespace hides other
     processes, or stay root, each child adds a filter denying signals and fork.
Not covered: host CPU/memory are shared (per-child limits only); world-readable files under the
interpreter's folders stay readable; the wall clock cannot be offset (the screen and the audit hook
keep it out of reach); without Landlock and a mount namespace, children can read and delete what
this user can (verify.require_isolation refuses to start then). A child's line counts only after
its job's random token (zygote._job), which user code cannot name: a child past layers 1 and 3 that
can also read its own memory (a CPython memory bug, ctypes) could find it and claim its own output;
grading is unaffected (it never sees a gold).
"""
import atexit
import json
import marshal
import os
import select
import signal
import sys
import time
# a lock for the pool without importing threading
import _thread

from isolation import build_audit_hook, seccomp_programs
from zygote import ERROR_CAP, MEMORY_MB, STDOUT_CAP, WALL_FACTOR, describe

# zygotes per family (two families): POPULORA_SANDBOX_WORKERS, else the cores, at most 8
WORKERS_PER_FAMILY = int(os.environ.get("POPULORA_SANDBOX_WORKERS", "0"))
if not WORKERS_PER_FAMILY:
    WORKERS_PER_FAMILY = max(1, min(os.cpu_count() or 1, 8))
START_S = 60.0              # a zygote must say hello within this, else the sandbox fails
GRACE_S = 5.0               # a zygote must answer within its wall backstop + this, else replaced
# the zygote script the pool starts
ZYGOTE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")

# --------------------------------------------------------------------------- parent side (the pool)

# the calling process's pool of zygotes ("pid": the process that started them)
_pool = {"pid": None, "workers": [], "count": 0, "uid_base": 0, "kind": "model",
         "lock": _thread.allocate_lock()}


def _start(family, kind):
    """Launch one zygote of `kind` ("model": model programs, "code": benchmark code) with a fresh
    scrubbed environment and its own hash seed."""
    # parent only: zygotes never load it (see zygote._GuardHook)
    import subprocess
    # 0 would turn hash randomisation off
    seed = 1 + int.from_bytes(os.urandom(4), "little") % (2**32 - 1)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": str(seed),
           "LD_BIND_NOW": "1", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    _pool["count"] += 1
    if kind == "model":
        # once per source and interpreter; a model zygote loads it
        env["POPULORA_AUDIT_HOOK"] = build_audit_hook()
    argv = [sys.executable, "-S", "-s", "-B", ZYGOTE, "--worker",
            str(_pool["count"]), json.dumps(_homes()), str(_pool["uid_base"]),
            json.dumps(seccomp_programs()), kind, *_site_folders()]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd="/", start_new_session=True)
    # until its hello, "deadline" is when it must have said it
    return {"proc": proc, "family": family, "kind": kind, "buf": b"", "jobs": [],
            "deadline": time.monotonic() + START_S, "hello": None, "id": _pool["count"]}


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
    """Wait for a zygote's layer report (the first line it writes, once it is ready), if it has not
    come yet; -> the worker."""
    while worker["hello"] is None and b"\n" not in worker["buf"]:
        _greet(worker)
    if worker["hello"] is None:
        line, worker["buf"] = worker["buf"].split(b"\n", 1)
        worker["hello"] = json.loads(line)
    return worker


def _greet(worker):
    """Read what a starting zygote wrote into its buffer (blocks until it writes)."""
    data = os.read(worker["proc"].stdout.fileno(), 1 << 16)
    if not data:
        raise RuntimeError("sandbox worker failed to start; "
                           "`python zygote.py --worker 1 [] 0 {} model` shows why")
    worker["buf"] += data


def _stop(worker):
    """Kill a zygote and its children, close its pipes, remove its jobs folder if it made one
    outside a mount namespace."""
    # parent only, as in _start
    import shutil
    import tempfile
    try:
        # the zygote (its children, in groups of their own, get SIGKILL when it dies)
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
    # died while idle (killed from outside): replace before use (between runs no zygote holds a
    # job); and replacements started during an earlier run ready
    for n, w in enumerate(_pool["workers"]):
        if w["proc"].poll() is not None:
            _replace(n, w, (), {})
        if _pool["workers"][n]["kind"] == kind:
            _hello(_pool["workers"][n])


def _pack(job):
    """Job dict -> the settings a zygote reads (HEADER bytes: the payload's length, the time limit
    in ms, the memory limit in MB, the stdout cap) + the payload its child reads (marshal bytes).
    Its code comes as code objects (screen.compiled: compiling runs nothing, and a child only
    unmarshals and executes them) or as texts, which the child compiles (zygote._compiled): a
    benchmark harness, and model code holding a frozenset, which marshal would make again in its
    sorted order (screen.compiled says why)."""
    body = {k: v for k, v in job.items() if k not in ("family", "zygote")}
    body["code"] = job.get("code", "")
    body["calls"] = list(job.get("calls", ()))
    data = marshal.dumps(body)
    timeout_ms = int(float(job.get("timeout", 5.0)) * 1000)
    # a model program's stdout is never read: no room for it in its result line, which so stays
    # within the values' budget (1 MiB) for the parent to parse
    stdout_cap = int(job.get("stdout_cap", STDOUT_CAP))
    if job.get("audit"):
        stdout_cap = 0
    numbers = (len(data), timeout_ms, int(job.get("memory_mb") or MEMORY_MB), stdout_cap)
    return b"".join(n.to_bytes(8, "little") for n in numbers) + data


def run(jobs):
    """Run jobs (dicts, see _evaluate/_child) in parallel over the pool. A job's "family" (0, 1 or
    None) picks the zygote family; its "zygote" (a result's "zygote" from an earlier run) pins it to
    the zygote that ran that one: the same interpreter, hash seed and clocks (a job whose zygote has
    been replaced since fails: "its zygote is gone"). Returns one {"ok", "error", "stdout",
    "values", "zygote": the id of the zygote that answered, 0 if none} per job, in order."""
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
            queues.setdefault(_queue(jobs[i]), []).append(i)
        try:
            _dispatch(jobs, results, queues)
        # interrupted (KeyboardInterrupt, ...): no stale job may answer later
        finally:
            for n, w in enumerate(_pool["workers"]):
                if w["jobs"]:
                    _stop(w)
                    _pool["workers"][n] = _start(w["family"], w["kind"])
    return results


def _queue(job):
    """The queue a job waits in: its zygote's when it is pinned to one, else its family's."""
    if job.get("zygote"):
        return ("zygote", job["zygote"])
    return job.get("family")


def _dispatch(jobs, results, queues):
    """The select loop of run(): feed the zygotes and collect their answers until every job has
    one."""
    packed, pending = {}, len(jobs)
    while pending:
        # jobs pinned to a zygote that is not (or no longer) in the pool
        live = {w["id"] for w in _pool["workers"] if w["kind"] == _pool["kind"]}
        for key in [k for k in queues if isinstance(k, tuple) and k[1] not in live]:
            for i in queues.pop(key):
                results[i] = failed("its zygote is gone")
                packed.pop(i, None)
                pending -= 1
        pending -= _feed(jobs, results, queues, packed)
        pending -= _collect(jobs, results, queues)


def failed(error):
    """The result of a job that gave no answer of its own."""
    return {"ok": False, "error": error, "stdout": "", "values": None, "pid": 0, "cpu_s": 0.0,
            "wall_s": 0.0, "zygote": 0}


def _feed(jobs, results, queues, packed):
    """Keep each zygote up to two jobs deep, idle zygotes first (the next job waits in its pipe: no
    sleep and wake between jobs). `packed`: jobs packed already that did not fit in a pipe. -> how
    many jobs were answered here (those that do not compile)."""
    answered = 0
    # one that died idle (killed from outside) is replaced before it is given a job: a job it never
    # started must not fail as "worker died"
    for n, w in enumerate(_pool["workers"]):
        idle = not w["jobs"] and w["hello"] is not None and w["kind"] == _pool["kind"]
        if idle and w["proc"].poll() is not None:
            _replace(n, w, jobs, queues)
    rounds = []
    for depth in (1, 2):
        for worker in _pool["workers"]:
            # not one still starting (_collect reads its hello)
            if worker["kind"] == _pool["kind"] and worker["hello"] is not None:
                rounds.append((depth, worker))
    for depth, w in rounds:
        while len(w["jobs"]) < depth:
            queue = queues.get(("zygote", w["id"])) or queues[w["family"]] or queues[None]
            if not queue:
                break
            i = queue.pop()
            try:
                payload = packed.pop(i, None) or _pack(jobs[i])
            except (SyntaxError, ValueError, TypeError, OverflowError, RecursionError,
                    MemoryError) as e:
                results[i] = failed(describe(e))
                answered += 1
                continue
            # must fit in the pipe (64 KiB) beside the job before it, or the write would block
            # while the zygote runs that one
            if w["jobs"] and len(payload) > 1 << 15:
                queue.append(i)
                packed[i] = payload
                break
            if not w["jobs"]:
                w["deadline"] = _deadline(jobs[i], time.monotonic())
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
    died (EOF) or are past their deadline (the jobs behind are requeued), take the hellos of the
    replacements starting meanwhile. -> how many jobs were answered."""
    answered = 0
    busy = []
    for w in _pool["workers"]:
        if w["jobs"] or (w["hello"] is None and w["kind"] == _pool["kind"]):
            busy.append(w)
    wait = min([w["deadline"] for w in busy], default=0) - time.monotonic()
    ready = set()
    if busy:
        pipes = [w["proc"].stdout for w in busy]
        ready = set(select.select(pipes, [], [], max(0.0, wait))[0])
    now = time.monotonic()
    for n, w in enumerate(_pool["workers"]):
        data = None
        if w["hello"] is None and w["kind"] == _pool["kind"]:
            _started(w, ready, now)
            continue
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


def _started(worker, ready, now):
    """A replacement zygote starting while a run goes on (_replace): its hello once it is ready."""
    if worker["proc"].stdout in ready:
        _greet(worker)
        if b"\n" in worker["buf"]:
            _hello(worker)
    elif now >= worker["deadline"]:
        raise RuntimeError(f"sandbox worker did not start within {START_S:.0f} s")


def _answers(n, w, jobs, results, queues, now):
    """Take the complete answer lines in zygote number n's buffer, one per job, in order. -> how
    many."""
    answered = 0
    while b"\n" in w["buf"] and w["jobs"]:
        line, w["buf"] = w["buf"].split(b"\n", 1)
        i = w["jobs"].pop(0)
        values = sum(len(jobs[i].get(key, ())) for key in ("calls", "args", "packs"))
        results[i], retire = _parse_answer(line, values)
        results[i]["zygote"] = w["id"]
        answered += 1
        # its clean-up failed: it has exited; the jobs behind go elsewhere
        if retire:
            _replace(n, w, jobs, queues)
            break
        # the zygote starts the next one now
        if w["jobs"]:
            w["deadline"] = _deadline(jobs[w["jobs"][0]], now)
    return answered


def _deadline(job, now):
    """When a zygote that starts `job` at `now` must have answered: the child's wall-clock backstop
    (zygote._job) + GRACE_S."""
    return now + float(job.get("timeout", 5.0)) * WALL_FACTOR + 1.0 + GRACE_S


def _replace(n, worker, jobs, queues):
    """Requeue the jobs a zygote was given but will not answer; stop it; start another instead,
    without waiting for it (its start, ~0.35 s, overlaps the run: _collect takes its hello)."""
    for i in reversed(worker["jobs"]):
        queues.setdefault(_queue(jobs[i]), []).append(i)
    worker["jobs"] = []
    _stop(worker)
    _pool["workers"][n] = _start(worker["family"], worker["kind"])


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
           "timeout_kill": "CPU-time limit per child, the zygote SIGKILLs it at a wall backstop"}
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
    [{"pid": the process the parent started, whose group holds the zygote, "family"}]."""
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

