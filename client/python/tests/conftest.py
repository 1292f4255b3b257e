"""Fixtures: real local clusters of cccoord and ccworker processes on
127.0.0.1 with ephemeral ports (ccl.cluster.LocalCluster).

Environment: CCL_BINARY_CCCOORD / CCL_BINARY_CCWORKER / CCL_BINARY_CCCTL
(ctest sets them to this build's binaries), CCL_TEST_DEVICE=cuda to run the
same suites on CUDA workers (the GPU machine: scripts/gpu-check.sh), and
CCL_TEST_WORKERS for the world size (default 3 on CPU, 2 on CUDA), and
CCL_TEST_SIMULATED_HOSTS=G to share G GPUs among more CUDA workers, each a
simulated host (ccl.cluster.LocalCluster's simulated_hosts).
"""

import os
import sys

import pytest

try:
    import ccl
    from ccl.cluster import LocalCluster
except ImportError as e:  # pragma: no cover - a setup problem, said clearly
    raise pytest.UsageError(
        f"cannot import ccl ({e}): build the ccl_python target (or run "
        f"client/python/stage.sh DIR) and put it on PYTHONPATH; ctest does "
        f"both") from None

DEVICE = os.environ.get("CCL_TEST_DEVICE", "cpu")
WORKERS = int(os.environ.get("CCL_TEST_WORKERS",
                             "2" if DEVICE == "cuda" else "3"))
SOURCE_DIR = os.environ.get(
    "CCL_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))


SIMULATED_HOSTS = int(os.environ.get("CCL_TEST_SIMULATED_HOSTS") or 0)


def start_cluster(workers=WORKERS, **kwargs):
    kwargs.setdefault("device", DEVICE)
    kwargs.setdefault("simulated_hosts", SIMULATED_HOSTS)
    return LocalCluster(workers=workers, **kwargs)


class _ClusterGuard:
    """Stops a cluster at the end, printing its logs when a test of its
    scope failed (straight to the real stderr: ctest shows it)."""

    def __init__(self, request, cluster):
        self.request, self.cluster = request, cluster
        self.failed_before = request.session.testsfailed

    def close(self):
        failed = self.request.session.testsfailed > self.failed_before
        if failed:
            sys.__stderr__.write(f"\n==== cluster logs\n{self.cluster.logs()}\n")
        self.cluster.stop(keep_logs=failed)


def _guarded_cluster(request):
    """The body of the cluster fixtures, which differ only in scope."""
    c = start_cluster()
    guard = _ClusterGuard(request, c)
    yield c
    guard.close()


@pytest.fixture(scope="module")
def cluster(request):
    """One cluster for a test module; tests leave it as they found it."""
    yield from _guarded_cluster(request)


@pytest.fixture
def fresh_cluster(request):
    """A cluster of its own, for a test that breaks the world."""
    yield from _guarded_cluster(request)


@pytest.fixture
def client(cluster):
    """A client that frees what it made when the test ends."""
    with ccl.Client(cluster.coordinator, timeout=30) as c:
        yield c
