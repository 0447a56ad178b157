"""tinyworld.cached_folder: processes asking for the same built folder at once build it once (a lock), and a build
that fails leaves nothing behind that looks built."""
import multiprocessing
import os
import time

import pytest

import tinyworld


def slow_build(folder, log):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(1.0)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write("{}")


def ask(cache, log):
    return tinyworld.cached_folder(cache, "thing", [1, 2], lambda folder: slow_build(folder, log))


def test_concurrent_builders_build_once(tmp_path):
    cache, log = str(tmp_path / "cache"), str(tmp_path / "builds.log")
    with multiprocessing.get_context("fork").Pool(3) as pool:
        paths = pool.starmap(ask, [(cache, log)] * 3)
    assert len(set(paths)) == 1 and os.path.isfile(os.path.join(paths[0], "config.json"))
    assert len(open(log).read().split()) == 1


def test_a_failed_build_leaves_nothing(tmp_path):
    def broken(folder):
        open(os.path.join(folder, "half"), "w").close()
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        tinyworld.cached_folder(str(tmp_path), "thing", [3], broken)
    assert [n for n in os.listdir(tmp_path) if not n.endswith(".lock")] == []
