"""scripts/install-python.sh, the README's one command: it installs a
package that imports with nothing but the target directory on the path."""

import os
import subprocess
import sys

from conftest import SOURCE_DIR

SCRIPT = os.path.join(SOURCE_DIR, "scripts", "install-python.sh")


def run(*args, env=None):
    return subprocess.run(list(args), capture_output=True, text=True,
                          timeout=120, env=env)


def test_install_into_a_directory_twice(tmp_path):
    target = tmp_path / "site"
    env = dict(os.environ, CCL_PYTHON=sys.executable)
    env.pop("PYTHONPATH", None)
    for _ in range(2):  # a second install replaces the first
        done = run(SCRIPT, "--no-apt", "--target", str(target), env=env)
        assert done.returncode == 0, done.stderr
        assert f"installed in {target}/ccl" in done.stdout
    for name in ("common_pb2.py", "coordinator_pb2_grpc.py",
                 "worker_pb2_grpc.py"):
        assert (target / "ccl" / "v1" / name).exists()
    check = run(sys.executable, "-c",
                "import ccl; print(ccl.__file__, ccl.ReduceOp.AVG.name)",
                env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert check.returncode == 0, check.stderr
    assert check.stdout.split() == [str(target / "ccl" / "__init__.py"),
                                    "AVG"]


def test_missing_plugin_is_named(tmp_path):
    env = dict(os.environ, GRPC_PYTHON_PLUGIN=str(tmp_path / "none"))
    done = run(os.path.join(SOURCE_DIR, "client", "python", "stage.sh"),
               str(tmp_path / "out"), env=env)
    assert done.returncode == 1
    assert "protobuf-compiler-grpc" in done.stderr
    assert not (tmp_path / "out" / "ccl").exists()


def test_bad_argument():
    done = run(SCRIPT, "--frobnicate")
    assert done.returncode == 2
    assert "unknown argument" in done.stderr
