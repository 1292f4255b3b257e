"""ccl.cluster.LocalCluster's processes are gone when the Python process
that started them dies, now that setpriv sets their death signal instead of
a preexec_fn. (What that change avoids, a fork() that waits for a busy
grpcio to idle, hung only under load and is not reproduced on demand here;
the child below makes the same conditions, so a return of it shows as a
timeout of this test.)"""

import os
import signal
import subprocess
import sys
import textwrap
import time

# The child: a cluster with a thread calling it without pause, then, with
# grpcio's fork support on, a second cluster started beside those calls
# (where a fork() would first wait for gRPC's threads to idle); it prints
# every daemon's pid and waits to be killed.
_CHILD = textwrap.dedent("""
    import os, sys, threading
    from ccl.cluster import LocalCluster
    import ccl
    first = LocalCluster(workers=1)
    client = ccl.connect(first.coordinator)
    def call():
        while True:
            client.refresh()
    threading.Thread(target=call, daemon=True).start()
    second = LocalCluster(workers=1)
    pids = [p.popen.pid for c in (first, second)
            for p in [c._coordinator, *c.workers]]
    print(" ".join(map(str, pids)), flush=True)
    sys.stdin.read()
""")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: it waits only for its parent to reap it.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_daemons_die_with_the_process_that_started_them():
    env = {**os.environ, "GRPC_ENABLE_FORK_SUPPORT": "true"}
    child = subprocess.Popen([sys.executable, "-c", _CHILD], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip(), (
            f"the child started no clusters (exit {child.poll()}): "
            f"{child.stderr.read() if child.poll() is not None else ''}")
        pids = [int(p) for p in line.split()]
        assert len(pids) == 4 and all(_alive(p) for p in pids), pids
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], (
            "daemons outlived the process that started them")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
