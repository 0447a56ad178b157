"""Run by tests/test_sandbox_modes.py as the user of one mode (root; root without CAP_SYS_ADMIN; an
unprivileged user), from a world-readable copy of sandbox.py and verify.py: every route we know to
read, delete or write files, tried by proposals, answers and benchmark code, with the screen off.

  python sandbox_modes_probe.py SECRET [SECRET ...] --public DIR   -> one JSON line
"""
import json
import os
import sys

import sandbox
import screen
import verify

# what the secret files hold (built, so that it is in no program's text)
SECRET_TEXT = "populora-secret-" + "token"


def routes(path, public):
    """Expressions that try to read (value: the text), delete or change the file at `path`, or write
    into `public` (a world-writable folder the children can see)."""
    read = [f"open({path!r}).read()",
            f"__import__('codecs').open({path!r}).read()",
            f"__import__('tarfile').bltn_open({path!r}).read()",
            f"''.join(__import__('fileinput').input({path!r}))",
            f"__import__('linecache').getline({path!r}, 1)",
            f"__import__('io').FileIO({path!r}).read().decode()",
            f"__import__('posix').read(__import__('posix').open({path!r}, 0), 100).decode()",
            f"open('/proc/self/root' + {path!r}).read()",
            f"(__import__('posix').symlink({path!r}, 'link'), open('link').read())[1]",
            f"(__import__('posix').symlink({path!r}, '/tmp/link'), open('/tmp/link').read())[1]"]
    change = [f"__import__('posix').unlink({path!r})",
              f"__import__('posix').rename({path!r}, 'moved')",
              f"__import__('posix').truncate({path!r}, 0)",
              f"__import__('posix').chmod({path!r}, 0o666)",
              f"__import__('posix').utime({path!r}, (0, 0))"]
    write = [f"open({public + '/file'!r}, 'w').close()",
             f"__import__('posix').mkdir({public + '/folder'!r})",
             f"__import__('posix').symlink('/etc/passwd', {public + '/link'!r})"]
    return read + change + write


# jobs that try to leave something for the next job on their zygote: files in the folder their cwd
# is in (writable to a child that keeps our uid), used-up inodes, that folder renamed
PLANT = ("import os, posix\njobs = os.path.dirname(os.getcwd())\n"
         "for d in (jobs, '/tmp', '/var/tmp', '/dev/shm'):\n"
         "    try:\n        posix.mkdir(d + '/planted')\n    except OSError:\n        pass\n"
         "n = 0\ntry:\n    while n < 100000:\n        posix.mkdir(jobs + '/fill%d' % n)\n"
         "        n += 1\nexcept OSError:\n    pass\nprint(n)")
RENAME = ("import os, posix\njobs = os.path.dirname(os.getcwd())\n"
          "try:\n    posix.rename(jobs, jobs + '-moved')\nexcept OSError as e:\n    print(e)")
LOOK = ("import os\nseen = []\n"
        "for d in (os.path.dirname(os.getcwd()), '/tmp', '/var/tmp', '/dev/shm'):\n"
        "    try:\n        names = os.listdir(d)\n    except OSError:\n        names = []\n"
        "    seen += [n for n in names if n == 'planted' or n.startswith('fill')]\n"
        "print(len(seen))")


# a child's effective, permitted and inheritable capabilities (capget)
CAPS = ("import ctypes\nlibc = ctypes.CDLL(None)\nheader = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
        "data = (ctypes.c_uint32 * 6)()\nlibc.capget(header, data)\nprint(sum(data))")


def leftovers():
    """PLANT, then an honest job and LOOK; RENAME, then an honest job: on one zygote -> what the
    three later jobs printed (or their errors)."""
    sandbox.WORKERS_PER_FAMILY = 1
    sandbox.shutdown()
    jobs = [PLANT, "print('honest')", LOOK, RENAME, "print('honest')"]
    res = sandbox.run([{"code": code, "family": 0, "timeout": 20} for code in jobs])
    sandbox.shutdown()
    out = []
    for r in (res[1], res[2], res[4]):
        out.append(r["stdout"].strip() or r["error"])
    return out


# red team round 7: a child lowers pid 1's hard memory limit (its zygote where a PID namespace
# makes it init: L01), then signals its process group (E05); what later jobs on that zygote see
PRLIMIT = "import resource\nresource.prlimit(1, resource.RLIMIT_AS, (1000 << 20, 1000 << 20))"
HONEST = "x = bytearray(400 << 20)\nprint('OK')"
KILL = ("import ctypes, signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print(ctypes.CDLL(None).kill(0, signal.SIGTERM))")


def reach():
    """On one zygote: PRLIMIT then 4 honest jobs; KILL then a job pinned to its zygote -> [the
    PRLIMIT error, how many honest jobs printed OK, what the pinned job printed or its error]."""
    sandbox.WORKERS_PER_FAMILY = 1
    sandbox.shutdown()
    jobs = [{"code": code, "family": 0} for code in [PRLIMIT] + [HONEST] * 4 + [KILL]]
    res = sandbox.run(jobs)
    pinned = sandbox.run([{"code": "print('alive')", "zygote": res[-1]["zygote"]}])[0]
    sandbox.shutdown()
    ok = sum(r["stdout"] == "OK\n" for r in res[1:5])
    return [res[0]["error"], ok, pinned["stdout"].strip() or pinned["error"]]


def main():
    args = sys.argv[1:]
    public = args[args.index("--public") + 1]
    secrets = args[:args.index("--public")]
    lay = sandbox.layers()
    screen.check = screen.nodes                # the screen off: only the runtime layers stand
    expressions = [e for path in secrets for e in routes(path, public)]
    proposals = [{"program": f"def f(x):\n    return {e}", "input": "1"} for e in expressions]
    problem = {"program": "def f(x):\n    return x", "input": "1", "output": "1",
               "gold": ["int", "1"]}
    answers = [dict(problem, answer=e) for e in expressions]
    jobs = [{"code": f"print({e})"} for e in expressions]
    results = verify.validate("code_o", proposals) + verify.grade("code_o", answers)
    results += verify.execute(jobs)
    text = json.dumps(results)
    intact = []
    for path in secrets:
        try:
            with open(path) as fh:
                intact.append(fh.read() == SECRET_TEXT and os.stat(path).st_mode & 0o777 == 0o600)
        except OSError:
            intact.append(False)
    checks = verify.execute([{"code": "print(open('/etc/hostname').read())"},
                             {"code": "import _socket\ns = _socket.socket()\ns.settimeout(1)\n"
                                      "s.connect(('127.0.0.1', 1))"},
                             {"code": "import os\nprint(os.getuid())"},
                             {"code": CAPS}])
    state = leftovers()
    reached = reach()
    # issue 22, class 3: a validity check's two runs see different pids (a PID namespace per
    # zygote counts from its own random start each job)
    pids = [r["stdout"] for r in sandbox.run([{"code": "import os\nprint(os.getpid())",
                                               "family": family} for family in (0, 1, 0, 1)])]
    flags = {k: v for k, v in lay.items() if isinstance(v, bool)}
    print(json.dumps({"euid": os.geteuid(), "layers": flags,
                      "why": lay["why"], "leaked": SECRET_TEXT in text, "intact": intact,
                      "public": sorted(os.listdir(public)), "runs": len(results),
                      "etc_readable": checks[0]["ok"], "net_error": checks[1]["error"],
                      "child_uid": checks[2]["stdout"].strip(),
                      "child_caps": checks[3]["stdout"].strip() or checks[3]["error"],
                      "state": state, "pids": pids, "reach": reached}))


if __name__ == "__main__":
    main()
