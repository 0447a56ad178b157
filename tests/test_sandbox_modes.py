"""Issue 16: the sandbox in the three ways researchers run it, arranged with setpriv from a root
session (as CI runs): as root; as root without CAP_SYS_ADMIN (a default Docker container); as an
unprivileged user. In each, a file of the invoking user (mode 0600) is neither read nor changed by
any route (tests/sandbox_modes_probe.py), nothing is written outside a child's own folders, and the
layer report matches what was enforced."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import ROOT
from sandbox_modes_probe import SECRET_TEXT

NOBODY = 65534
MODES = {"root": [],
         "root_without_cap_sys_admin": ["setpriv", "--bounding-set", "-sys_admin"],
         "unprivileged": ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]}


def arrangeable(mode):
    """None, or why this mode cannot be arranged on this machine."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs Linux and a root session (CI runs as root) to switch modes with setpriv"
    if MODES[mode] and not shutil.which("setpriv"):
        return "setpriv (util-linux) is not installed"
    return None


def bindings(folder):
    """Copy the pinned bindings (landlock, pyseccomp) into `folder` (a site-packages, or beside the
    code that imports them)."""
    os.makedirs(folder, exist_ok=True)
    for module in ("landlock", "pyseccomp"):
        spec = importlib.util.find_spec(module)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            shutil.copytree(spec.submodule_search_locations[0], os.path.join(folder, module))
        else:
            shutil.copy(spec.origin, folder)


@pytest.fixture(scope="module")
def tree():
    """A world-readable copy of the sandbox, verify.py (and the modules they import), the probe and
    the pinned bindings (an unprivileged user cannot read a Python installed under /root, nor this
    checkout wherever it is)."""
    base = tempfile.mkdtemp(prefix="populora-modes-", dir="/tmp")
    code = os.path.join(base, "code")
    os.mkdir(code)
    names = ("sandbox.py", "zygote.py", "isolation.py", "encoding.py", "verify.py", "screen.py",
             "prompts.py", "audithook.c", os.path.join("tests", "sandbox_modes_probe.py"))
    for name in names:
        shutil.copy(os.path.join(ROOT, name), code)
    bindings(code)
    subprocess.run(["chmod", "-R", "a+rX", base], check=True)
    os.chmod(base, 0o755)
    yield base
    subprocess.run(["rm", "-rf", base])


def python_for(mode):
    """The interpreter this mode's user can run: ours as root, else a world-readable python3."""
    if mode != "unprivileged":
        return sys.executable
    # zygotes start sys.executable again: it must run as that user too
    check = "import subprocess, sys\nassert sys.version_info >= (3, 10)\n" \
            "subprocess.run([sys.executable, '-c', 'import json'], check=True)"
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable):
        probe = subprocess.run(MODES[mode] + [candidate, "-c", check], capture_output=True, cwd="/")
        if probe.returncode == 0:
            return candidate
    return None


def secrets(base, uid):
    """Secret files of the invoking user (mode 0600, in a 0700 folder of theirs): one under /tmp,
    one in a folder the children can see (not a private tmpfs of the mount namespace)."""
    folders = [os.path.join(base, f"home-{uid}")]
    for visible in ("/var/lib", "/opt", "/srv", "/mnt"):
        if os.path.isdir(visible) and os.access(visible, os.W_OK):
            folders.append(tempfile.mkdtemp(prefix="populora-secret-", dir=visible))
            break
    paths = []
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "token")
        with open(path, "w") as fh:
            fh.write(SECRET_TEXT)
        for p, mode in ((folder, 0o700), (path, 0o600)):
            os.chown(p, uid, uid)
            os.chmod(p, mode)
        paths.append(path)
    return folders, paths


@pytest.mark.parametrize("mode", list(MODES))
def test_no_route_reads_or_changes_a_users_file(mode, tree):
    reason = arrangeable(mode)
    if reason:
        pytest.skip(reason)
    python = python_for(mode)
    if python is None:
        pytest.skip(f"no Python 3.10+ that uid {NOBODY} can run (the one here lives under /root)")
    uid = 0
    if mode == "unprivileged":
        uid = NOBODY
    folders, paths = secrets(tree, uid)
    public = tempfile.mkdtemp(prefix="populora-public-", dir=os.path.dirname(folders[-1]))
    os.chmod(public, 0o777)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": folders[0], "LANG": "C.UTF-8"}
    try:
        command = MODES[mode] + [python, "sandbox_modes_probe.py", *paths, "--public", public]
        proc = subprocess.run(command, cwd=os.path.join(tree, "code"), env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads(proc.stdout.splitlines()[-1])
        print(mode, json.dumps(report))
        public_left = sorted(os.listdir(public))
    finally:
        for folder in folders[1:] + [public]:
            subprocess.run(["rm", "-rf", folder])
    lay = report["layers"]
    assert report["runs"] == 3 * 18 * len(paths)
    assert not report["leaked"] and report["intact"] == [True] * len(paths), report
    assert report["public"] == [] and public_left == [], report
    # the report matches what was enforced
    assert lay["filesystem_isolation"] and lay["landlock"], report["why"]
    assert lay["seccomp"] and lay["no_fork"] and lay["network_isolation"], report["why"]
    assert "not permitted" in report["net_error"], report      # seccomp: no socket at all
    # issue 22, class 6: nothing a job leaves (files where it can write, used-up inodes, its jobs
    # folder renamed) reaches the next job on its zygote, which runs
    assert report["state"] == ["honest", "0", "honest"], report
    assert len(set(report["pids"])) == 4, report
    # red team round 7: a child's prlimit on pid 1 is refused and its zygote's later children run
    # (L01); its kill(0) reaches itself alone and its zygote answers a pinned job (E05)
    assert report["reach"] == ["PermissionError: [Errno 1] Operation not permitted", 4,
                               "alive"], report
    # no capability in a child, in any mode (a user namespace's included)
    assert report["child_caps"] == "0", report
    # Landlock: nothing readable outside the interpreter's folders
    assert not report["etc_readable"]
    if lay["network_namespace"]:
        error = report["net_error"]
        assert "unreachable" in error or "not permitted" in error, report
    if mode == "root":
        assert lay["mount_namespace"] and lay["uid_drop"] and report["child_uid"] != "0"
    if mode == "root_without_cap_sys_admin":
        assert not lay["mount_namespace"] and "refused" in report["why"]["mount_namespace"]
    if mode == "unprivileged":
        assert report["euid"] == NOBODY and report["child_uid"] == str(NOBODY)
        assert not lay["uid_drop"]
        assert lay["pid_namespace"] == lay["mount_namespace"]   # both come with the user namespace


def test_start_up_refuses_without_filesystem_isolation(monkeypatch, capsys):
    import sandbox
    import verify
    layers = sandbox.layers()
    assert verify.require_isolation() is not None or not layers["filesystem_isolation"]
    bare = dict(layers, mount_namespace=False, landlock=False, filesystem_isolation=False,
                why=dict(layers["why"], mount_namespace="unshare(CLONE_NEWNS) refused (test)",
                         landlock="Landlock unavailable (test)"))
    monkeypatch.setattr(sandbox, "layers", lambda: bare)
    with pytest.raises(SystemExit) as stop:
        verify.require_isolation()
    assert "no filesystem isolation" in str(stop.value) and "refused (test)" in str(stop.value)
    assert f"--{verify.UNSAFE_FLAG}" in str(stop.value)
    assert verify.require_isolation(accept_risk=True) is bare
    assert "WARNING" in capsys.readouterr().err


def test_layers_cli_says_why_for_every_layer():
    command = [sys.executable, os.path.join(ROOT, "verify.py"), "layers"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split(None, 2) for line in out.stdout.splitlines()[:-1]]
    names = {name for _, name, _ in rows}
    assert {"landlock", "seccomp", "mount_namespace", "uid_drop", "filesystem_isolation"} <= names
    assert all(state in ("on", "OFF") and why for state, _, why in rows)
