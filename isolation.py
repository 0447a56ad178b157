"""The walls a zygote puts up before its first job (sandbox.py's layers 5-7): a private mount
namespace whose layout does not depend on where the checkout or the interpreter lives, user, PID,
network, IPC and time namespaces, a Landlock ruleset, and seccomp programs (compiled here in the
parent, entered by the zygote). Split from sandbox.py (the pool) and zygote.py (the zygote's job
loop and its children): this file is the operating-system set-up alone, run once per zygote, each
step measured and reported with why it is on or off.

Functions that make something record it in `made` (the folders hidden, the scratch tmpfs, the
interpreter folders put back inside one, the PID namespace's counter, Landlock's restrict call),
which zygote.py reads after set-up.
"""
import ctypes
import io
import os
import re
import signal
import stat
import sys
import zlib
from importlib.machinery import EXTENSION_SUFFIXES

# libc with errno, for unshare/mount/umount2 (set-up only, before any fork of a job)
_libc = ctypes.CDLL(None, use_errno=True)
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC = 1, 32, 4096, 8192, 16384
_MS_PRIVATE = 1 << 18
# what set-up made (see the docstring); seccomp programs compiled once per process
made = {"hidden": [], "scratch": [], "kept": [], "last_pid": None, "restrict": None}
_compiled = {}


def _why(e):
    """An exception -> "Type: message", at most 300 chars."""
    return f"{type(e).__name__}: {e}"[:300]


# folders every child gets a fresh, private, writable tmpfs on (emptied after each job)
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


# the shared libraries a child may load (extension modules), kept readable wherever a cover falls
LIBRARIES = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib")


def mount_setup(repo, homes):
    """Private mount namespace: every filesystem read-only; a fresh writable tmpfs on each SCRATCH
    folder; an empty read-only tmpfs over /root, /home, the homes and the checkout with its folder;
    the interpreter's folders and the shared libraries put back where they were, wherever that is
    (under /root, a home, the checkout, /tmp ...). Nothing here depends on where the checkout or the
    interpreter lives: the folders to keep are set aside (bound into a staging tmpfs) before
    anything covers them and moved back after. -> the hidden folders; raises OSError naming the step
    that failed."""
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
        made["scratch"].append(d)
    for k, stash in stashed:
        os.makedirs(k, mode=0o711, exist_ok=True)
        _check(mount(stash.encode(), k.encode(), None, _MS_MOVE, None), f"putting back {k}")
        if _inside(k, scratch):
            made["kept"].append(k)
    # the staging tmpfs goes (MNT_DETACH); its folder gets its scratch tmpfs like the others
    if staging:
        _check(_libc.umount2(staging.encode(), 2), f"unmounting the staging tmpfs {staging}")
        _check(mount(b"tmpfs", staging.encode(), b"tmpfs", 0, fresh), f"a tmpfs on {staging}")
        made["scratch"].append(staging)
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


def uid_works(uid):
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


def namespaces(repo, homes):
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
        hidden = mount_setup(repo, homes)
        what = f"read-only filesystems, private tmpfs, {len(hidden)} folders hidden{via}"
        out["mount_namespace"] = [True, what]
        made["hidden"].extend(hidden)
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
    can signal nothing but itself and us (and kill(0) itself alone: zygote._child makes it a group
    of its own), and init ignores signals it has no handler for (SIGINT is set to be ignored). The
    process the parent started stays outside, waiting for us, holding no pipe. -> [active, why]."""
    # CLONE_NEWPID: our next child is the namespace's init
    if _libc.unshare(0x20000000) != 0:
        return [False, f"unshare(CLONE_NEWPID) refused ({os.strerror(ctypes.get_errno())})"]
    pid = os.fork()
    if pid:
        # the parent sees EOF when the zygote goes, not when we do
        os.closerange(0, 1 << 16)
        os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) & 0xFF)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the namespace's pid counter, set at random before each fork (_job): children's pids are as
    # different from one zygote to the next as the host's are
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            top = int(fh.read()) - 2
        made["last_pid"] = (os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY), top)
    except (OSError, ValueError):
        made["last_pid"] = None
    return [True, "children see and can signal only themselves and their zygote (the init); "
                  "pids random per job"]


def landlock_setup(landlock, read_paths, write_paths):
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
        made["restrict"] = plumbing.get_restrict_self()
    except ImportError as e:
        return None, f"the landlock binding is not installed ({e}); pip install -r requirements.txt"
    # old kernel, Landlock not enabled at boot, ...
    except Exception as e:
        return None, f"Landlock unavailable: {_why(e)}"
    return fd, f"ABI {abi}: read {len(read_paths)} interpreter folders, write the job's folder only"


def seccomp_programs():
    """Layer 7's BPF, compiled here in the parent by libseccomp (its Python binding; zygotes do not
    load it: 1.4 MB more in every fork) -> {"zygote": hex, "signals": hex, "why"} ("" where
    unavailable). "zygote": the filter a zygote enters before its first job, so its children inherit
    it (a filter attached per child costs ~0.2 ms: the kernel compiles it each time), an allowlist:
    ALLOWED_SYSCALLS, a clone with no namespace flag, a prlimit64 on pid 0 and futex but for its
    timed waits (_futex_rules) pass; DENIED_SYSCALLS and a prlimit64 on any other pid fail with
    EPERM;
    everything else, including every syscall newer than this list (or than libseccomp), fails with
    ENOSYS, which the C library takes for "not in this kernel" and falls back from where it can
    (clone3 -> clone, faccessat2 -> faccessat, ...). "signals": EPERM for SIGNAL_SYSCALLS, entered
    by each child where children keep the zygote's uid and no PID namespace hides other
    processes."""
    if "programs" in _compiled:
        return _compiled["programs"]
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
        # resource limits of the caller only (pid 0: the C library's getrlimit and setrlimit): a
        # child that keeps the zygote's uid could lower the zygote's hard limits, which every
        # later child inherits (red team round 7, L01)
        zygote.add_rule(pyseccomp.ALLOW, "prlimit64", pyseccomp.Arg(0, pyseccomp.EQ, 0))
        zygote.add_rule(pyseccomp.ERRNO(1), "prlimit64", pyseccomp.Arg(0, pyseccomp.NE, 0))
        _futex_rules(pyseccomp, zygote)
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
        out = {"zygote": "", "signals": "", "why": f"seccomp unavailable: {_why(e)}"}
    _compiled["programs"] = out
    return out


def _futex_rules(pyseccomp, rules):
    """futex, the one wait a child can reach (every lock of _thread, queue and threading waits in
    it): a child has one thread (RLIMIT_NPROC = 0, or the signal filter's clone), so nothing can
    wake it. A wait with a timeout fails at once with ETIMEDOUT, as if the time had passed: the C
    lock's acquire(timeout=t) is False, SimpleQueue.get(timeout=t) raises Empty, and no program
    holds its zygote asleep (red team round 21, A03: waits of 0.1 s with a little work between
    them held a child and its zygote 16 s). A program sees the difference only through a clock or
    its own speed, and a model child reads none (zygote._no_clock: round 20 counted the Python
    loops above waits that failed at once). A wait with no timeout (NULL: a deadlock, which hangs
    stock Python too) does wait, until the zygote ends a model child (zygote.IDLE_S) or the wall
    backstop ends any other. The rest of futex (wakes, requeues) passes."""
    # the command: the op without FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME (the C library sets
    # either); WAIT, LOCK_PI, WAIT_BITSET, WAIT_REQUEUE_PI and LOCK_PI2 take a timeout (argument 3)
    mask = 0xffffffff & ~(128 | 256)
    for command in range(14):
        op = pyseccomp.Arg(1, pyseccomp.MASKED_EQ, mask, command)
        if command in (0, 6, 9, 11, 13):
            rules.add_rule(pyseccomp.ERRNO(110), "futex", op, pyseccomp.Arg(3, pyseccomp.NE, 0))
            rules.add_rule(pyseccomp.ALLOW, "futex", op, pyseccomp.Arg(3, pyseccomp.EQ, 0))
        else:
            rules.add_rule(pyseccomp.ALLOW, "futex", op)


def _add_rules(pyseccomp, rules, action, names):
    """Add `action` for each syscall of `names` this architecture and libseccomp know -> how
    many."""
    added = 0
    for name in names.split():
        try:
            rules.add_rule(action, name)
            added += 1
        except (OSError, ValueError, RuntimeError):
            # a syscall this architecture (or this libseccomp) does not have
            pass
    return added


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
    "set_tid_address set_robust_list get_robust_list rseq sched_yield sched_getaffinity "
    "sched_getparam sched_getscheduler sched_get_priority_max sched_get_priority_min getcpu "
    "getpriority uname sysinfo getrandom getrlimit setrlimit "
    # a child's own process group and session, before any user code (zygote._child)
    "setsid")


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
                   "ipc execve execveat pidfd_open pidfd_getfd pidfd_send_signal setpgid")


# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
NAMESPACE_FLAGS = (0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


# fork too: a child that stays root is exempt from NPROC
SIGNAL_SYSCALLS = ("kill tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo pidfd_open "
                   "pidfd_send_signal pidfd_getfd fork vfork clone")


def audit_hook_path():
    """Where the calling process builds audithook.c (the C half of a model zygote's audit hook): a
    folder of this user's alone in the temporary folder (never the checkout, which may be read-only
    or another user's), under a name that changes with the source and the interpreter."""
    import tempfile
    with open(os.path.join(os.path.dirname(os.path.realpath(__file__)), "audithook.c"), "rb") as fh:
        key = zlib.crc32(fh.read() + sys.version.encode())
    return os.path.join(tempfile.gettempdir(), f"populora-{os.getuid()}",
                        f"audithook-{key:08x}{EXTENSION_SUFFIXES[0]}")


def _private_folder(folder):
    """Make `folder` if need be; RuntimeError unless it is a folder of this user's that no one else
    can write in or read (a module another user could plant there would run as this one)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise RuntimeError(f"{folder} is not a private folder of uid {os.getuid()} (mode 0700): "
                           "remove it, or point TMPDIR elsewhere")


def build_audit_hook():
    """Compile audithook.c once per source and interpreter (cc and Python's C headers, ~1 s), in
    the calling process: zygotes run no compiler. -> the built module's path (audit_hook_path());
    RuntimeError saying what is missing."""
    import shlex
    import subprocess
    import sysconfig
    import tempfile
    path = audit_hook_path()
    _private_folder(os.path.dirname(path))
    if os.path.exists(path):
        return path
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise RuntimeError(f"the sandbox compiles audithook.c, which needs Python's C headers: no "
                           f"Python.h in {include} (Debian/Ubuntu: apt install python3-dev)")
    # built beside its place and renamed into it: processes starting at once build it side by side
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    source = os.path.join(os.path.dirname(os.path.realpath(__file__)), "audithook.c")
    argv = [*shlex.split(os.environ.get("CC") or "cc"), "-shared", "-fPIC", "-O2", "-I", include,
            source, "-o", tmp]
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"compiling audithook.c failed: {' '.join(argv)}\n{done.stderr}")
        os.replace(tmp, path)
    except FileNotFoundError as e:
        raise RuntimeError(f"the sandbox compiles audithook.c and needs a C compiler ({e}; "
                           "Debian/Ubuntu: apt install gcc, or set CC)") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_audit_hook(path):
    """The audithook module built at `path` (a model zygote, before it hides the folders)."""
    import importlib.util
    if not os.path.exists(path):
        raise RuntimeError(f"{path} is missing: isolation.build_audit_hook() builds it")
    spec = importlib.util.spec_from_file_location("audithook", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readable(repo):
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


def is_tmpfs(path):
    """Is `path` the mount point of a tmpfs (and a folder we may write in)?"""
    with open("/proc/self/mountinfo", "rb") as fh:
        for line in fh:
            fields = line.split(b" - ")
            if fields[0].split()[4] == path.encode() and fields[1].split()[0] == b"tmpfs":
                return os.access(path, os.W_OK)
    return False
