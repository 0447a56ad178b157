"""Issue 20, "clone anywhere": the sandbox works wherever the checkout and the interpreter live. A
copy of the repository's tracked files (`git ls-files`) is put in each place below and
`verify.py layers`, one `validate` and one `grade` run from there, with the place's interpreter, as
root and as an unprivileged user (setpriv). What `verify.py layers` reported in each place is
printed, one line each (`pytest -s`).

Places: directly under /tmp and /var/tmp, a path with spaces and non-ASCII characters, a venv
inside the checkout (also one under /tmp: the interpreter's folder inside a folder every child gets
a fresh tmpfs on), a read-only checkout (a read-only bind mount in a private mount namespace),
HOME unset, HOME pointing elsewhere (a folder of its own, and "/"), and the interpreter under /root
(pyenv, as on this machine), under /usr (the distribution's python with the bindings in the user
site, as `pip install --user` puts them) and under a conda-style prefix in /opt (a relocated copy
of the distribution's python with its own site-packages).

The unprivileged user (uid 65534) cannot run the interpreter under /root (/root is mode 0700 and
that is where pyenv lives here): its places use the conda-style prefix instead, and its "under
/root" place is an interpreter under its own HOME (what /root is to root)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import ROOT
from test_sandbox_modes import bindings

pytestmark = pytest.mark.slow

NOBODY = 65534
USERS = {"root": [], "unprivileged": ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                      "--clear-groups"]}
PLACES = ["tmp", "var_tmp", "spaces_non_ascii", "venv_in_checkout", "venv_in_checkout_under_tmp",
          "read_only", "home_unset",
          "home_elsewhere", "home_is_root_folder", "python_under_root", "python_under_usr",
          "python_conda_prefix"]
SYSTEM_PYTHON = "/usr/bin/python3.11"
SYSTEM_HEADERS = "/usr/include/python3.11"
PROPOSAL = {"program": "def f(x):\n    return [x * 2, 'é']", "input": "21"}


def arrangeable():
    """None, or why the places cannot be arranged here."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs Linux and a root session (CI runs as root) to make places and switch users"
    for tool in ("setpriv", "unshare", "git"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


def readable(path):
    """Make `path` and every folder above it traversable and readable by everyone."""
    subprocess.run(["chmod", "-R", "a+rX", path], check=True)
    while path != "/":
        os.chmod(path, os.stat(path).st_mode | 0o555)
        path = os.path.dirname(path)


def checkout(parent, name="repo"):
    """A copy of the repository's tracked files at parent/name -> its path."""
    path = os.path.join(parent, name)
    os.makedirs(path)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in files:
        if not name or not os.path.isfile(os.path.join(ROOT, name)):
            continue
        os.makedirs(os.path.dirname(os.path.join(path, name)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, name), os.path.join(path, name))
    readable(path)
    return path


@pytest.fixture(scope="module")
def world():
    """Shared pieces: a neutral folder (/srv or /opt), a conda-style prefix under /opt (a copy of
    the distribution's python with the bindings in its own site-packages), a HOME for the
    unprivileged user. Removed afterwards."""
    reason = arrangeable()
    if reason:
        pytest.skip(reason)
    made = []
    neutral = tempfile.mkdtemp(prefix="populora-places-", dir="/srv")
    made.append(neutral)
    conda = None
    if os.path.exists(SYSTEM_PYTHON) and os.path.exists(SYSTEM_HEADERS):
        conda = tempfile.mkdtemp(prefix="populora-conda-", dir="/opt")
        made.append(conda)
        os.makedirs(os.path.join(conda, "bin"))
        shutil.copy2(SYSTEM_PYTHON, os.path.join(conda, "bin", "python3.11"))
        os.makedirs(os.path.join(conda, "lib"))
        shutil.copytree("/usr/lib/python3.11", os.path.join(conda, "lib", "python3.11"),
                        symlinks=True)
        # a conda prefix ships Python's headers (the sandbox compiles audithook.c against them)
        shutil.copytree(SYSTEM_HEADERS, os.path.join(conda, "include", "python3.11"))
        # Debian's site.py names a prefix's site-packages dist-packages
        bindings(os.path.join(conda, "lib", "python3.11", "dist-packages"))
        readable(conda)
    yield {"neutral": neutral, "conda": conda}
    for path in made:
        subprocess.run(["chmod", "-R", "u+w", path])
        subprocess.run(["rm", "-rf", path])


def arrange(place, user, world, made):
    """-> (checkout path, python, env, command prefix) for one place and user. Folders it makes
    are added to `made` (removed by the caller)."""
    unprivileged = user == "unprivileged"
    python = sys.executable
    if unprivileged:
        python = world["conda"] and os.path.join(world["conda"], "bin", "python3.11")
    home = tempfile.mkdtemp(prefix="home-", dir=world["neutral"])
    made.append(home)
    if unprivileged:
        os.chown(home, NOBODY, NOBODY)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home}
    prefix = list(USERS[user])
    parent = tempfile.mkdtemp(prefix="place-", dir=world["neutral"])
    made.append(parent)
    name = "repo"
    if place in ("tmp", "venv_in_checkout_under_tmp"):
        parent = "/tmp"
        name = os.path.basename(tempfile.mkdtemp(prefix="populora-clone-", dir="/tmp"))
        os.rmdir(os.path.join(parent, name))
    elif place == "var_tmp":
        parent = "/var/tmp"
        name = os.path.basename(tempfile.mkdtemp(prefix="populora-clone-", dir="/var/tmp"))
        os.rmdir(os.path.join(parent, name))
    elif place == "spaces_non_ascii":
        parent = os.path.join(parent, "my projects", "naïve ü — 実験")
        os.makedirs(parent)
    repo = checkout(parent, name)
    made.append(repo)
    if place in ("venv_in_checkout", "venv_in_checkout_under_tmp"):
        base = python
        subprocess.run([base, "-m", "venv", "--system-site-packages", "--without-pip",
                        os.path.join(repo, ".venv")], check=True)
        readable(os.path.join(repo, ".venv"))
        python = os.path.join(repo, ".venv", "bin", "python")
    elif place == "read_only":
        subprocess.run(["chmod", "-R", "a-w", repo], check=True)
        # root writes through mode bits: a read-only bind mount in a namespace of the command's own
        script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
        prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, repo] + prefix
    elif place == "home_unset":
        del env["HOME"]
    elif place == "home_elsewhere":
        env["HOME"] = tempfile.mkdtemp(prefix="elsewhere-", dir=world["neutral"])
        made.append(env["HOME"])
        readable(env["HOME"])
    elif place == "home_is_root_folder":
        env["HOME"] = "/"
    elif place == "python_under_root":
        # root: pyenv's interpreter (sys.executable, under /root); the unprivileged user: a prefix
        # in its own HOME (it cannot enter /root)
        if unprivileged:
            shutil.copytree(world["conda"], os.path.join(home, "conda"), symlinks=True)
            subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", home], check=True)
            python = os.path.join(home, "conda", "bin", "python3.11")
        elif not sys.executable.startswith("/root/"):
            pytest.skip(f"this interpreter ({sys.executable}) does not live under /root")
    elif place == "python_under_usr":
        python = SYSTEM_PYTHON
        # `pip install --user`: the bindings in the user site of HOME
        bindings(os.path.join(home, ".local", "lib", "python3.11", "site-packages"))
        owner = 0
        if unprivileged:
            owner = NOBODY
        subprocess.run(["chown", "-R", f"{owner}:{owner}", home], check=True)
    elif place == "python_conda_prefix":
        python = os.path.join(world["conda"], "bin", "python3.11")
    readable(home)
    return repo, python, env, prefix


def summary(layers):
    """One line: the layers that are on, those that are off, and what is hidden."""
    flags = {k: v for k, v in layers.items() if isinstance(v, bool)}
    on = " ".join(sorted(k for k, v in flags.items() if v))
    off = " ".join(sorted(k for k, v in flags.items() if not v)) or "-"
    hidden = ", ".join(layers["hidden_dirs"]) or "nothing"
    return f"on: {on} | OFF: {off} | hidden: {hidden}"


@pytest.mark.parametrize("user", list(USERS))
@pytest.mark.parametrize("place", PLACES)
def test_layers_validate_and_grade_work_here(place, user, world):
    if world["conda"] is None:
        pytest.skip(f"{SYSTEM_PYTHON} (the distribution's python) or its headers ({SYSTEM_HEADERS}:"
                    " python3.11-dev) are not installed")
    made = []
    try:
        repo, python, env, prefix = arrange(place, user, world, made)
        before = set(os.listdir(repo)) | {"__pycache__"}

        def verify(*args, stdin=""):
            command = prefix + [python, "verify.py", *args]
            out = subprocess.run(command, cwd=repo, env=env, input=stdin, capture_output=True,
                                 text=True, timeout=180)
            assert out.returncode == 0, (place, user, out.stderr[-3000:])
            return out.stdout

        layers = json.loads(verify("layers", "--json"))
        print(f"\n{place:20} {user:12} {summary(layers)}")
        validated = json.loads(verify("validate", "--task", "code_o",
                                      stdin=json.dumps(PROPOSAL) + "\n"))
        assert validated["valid"] and validated["output"] == "[42, 'é']", validated
        attempts = [dict(PROPOSAL, output=validated["output"], gold=validated["gold"], answer=a)
                    for a in ("[42, 'é']", "[42, 'e']")]
        lines = "".join(json.dumps(a) + "\n" for a in attempts)
        graded = [json.loads(line) for line in verify("grade", "--task", "code_o",
                                                      stdin=lines).splitlines()]
        assert [g["correct"] for g in graded] == [True, False], graded
        # every layer the bindings give is on, wherever the interpreter found them
        for layer in ("filesystem_isolation", "mount_namespace", "landlock", "seccomp"):
            assert layers[layer], (layer, layers["why"])
        if user == "root":
            assert layers["uid_drop"], layers["why"]
        else:
            assert layers["pid_namespace"], layers["why"]
        real = os.path.realpath(repo)
        assert any(real == d or real.startswith(d + "/") for d in layers["hidden_dirs"]), layers
        # nothing the sandbox made was left in the checkout (Python's bytecode cache aside)
        assert set(os.listdir(repo)) <= before, sorted(set(os.listdir(repo)) - before)
    finally:
        for path in reversed(made):
            subprocess.run(["chmod", "-R", "u+w", path])
            subprocess.run(["rm", "-rf", path])
