"""Every script in examples/python/ runs against a 2-rank cluster and prints
exactly the output written at its end ("# Expected output (2 ranks):")."""

import glob
import os
import subprocess
import sys

import pytest

from conftest import SOURCE_DIR, start_cluster

EXAMPLES = sorted(glob.glob(os.path.join(SOURCE_DIR, "examples", "python",
                                         "*.py")))


def expected_output(path):
    lines, inside = [], False
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# Expected output (2 ranks):"):
                inside = True
                continue
            if inside:
                if not line.startswith("#"):
                    break
                lines.append(line[2:] if line.startswith("# ") else "")
    assert lines, f"{path} has no '# Expected output (2 ranks):' block"
    return lines


@pytest.fixture(scope="module")
def two_ranks():
    c = start_cluster(workers=2)
    yield c
    c.stop()


def test_every_tutorial_example_is_here():
    names = {os.path.basename(p) for p in EXAMPLES}
    assert {"send_recv.py", "isend_irecv.py", "broadcast.py",
            "all_reduce.py", "reduce.py", "scatter.py", "gather.py",
            "all_gather.py", "all_gather_into_tensor.py",
            "reduce_scatter.py", "unmatched_recv.py",
            "distributed_hello.py", "walkthrough.py"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_example_output(two_ranks, path):
    env = dict(os.environ, CCCTL_COORDINATOR=two_ranks.coordinator)
    run = subprocess.run([sys.executable, path], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0, (
        f"{path} failed:\n{run.stderr}\n{two_ranks.logs()}")
    assert run.stdout.rstrip("\n").split("\n") == expected_output(path), \
        run.stdout
