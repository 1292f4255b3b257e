"""A local cluster from Python: one cccoord and N ccworker processes on
127.0.0.1 with ephemeral ports, for tests, benchmarks and notebooks.

    with ccl.cluster.LocalCluster(workers=2) as cluster:
        client = ccl.connect(cluster.coordinator)

Binaries come from CCL_BINARY_CCCOORD / CCL_BINARY_CCWORKER (the names
scripts/gpu-check.sh exports), else PATH. Every process gets SIGKILL when
the Python process that started it dies (PR_SET_PDEATHSIG, set by
setpriv in front of it where util-linux has it), so an
interrupted test leaves nothing running; stop() ends them with SIGTERM
first.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time

import grpc

from ccl._errors import CclError

_PR_SET_PDEATHSIG = 1


def binary(name):
    """The path of a project binary: $CCL_BINARY_<NAME>, else PATH."""
    path = os.environ.get(f"CCL_BINARY_{name.upper()}") or shutil.which(name)
    if not path or not os.access(path, os.X_OK):
        raise CclError(grpc.StatusCode.FAILED_PRECONDITION,
                       f"no {name} binary: set CCL_BINARY_{name.upper()} or put "
                       f"it on PATH")
    return path


def _die_with_parent():
    # Runs in the child between fork and exec.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _spawn_options(argv):
    """argv and Popen's keywords for a daemon that dies with this process.

    util-linux's setpriv sets the death signal in front of the daemon, so
    Popen needs no preexec_fn and starts it with vfork, which runs no fork
    handlers. A preexec_fn forces a real fork(), and in a process whose
    grpcio has fork support on (GRPC_ENABLE_FORK_SUPPORT) and busy channels,
    fork() first waits for gRPC's threads to idle, possibly for ever (the
    chaos driver hung there under load). Without setpriv: the preexec_fn.
    """
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, "--pdeathsig", "KILL", "--"] + argv, {}
    return argv, {"preexec_fn": _die_with_parent}


# The daemon plumbing below is shared with the chaos harness
# (tests/chaos/procs.py), whose processes differ otherwise (restarts,
# namespaces, signals) and which words its own errors.


class DaemonExited(Exception):
    """wait_port_file: the daemon exited before it wrote its port."""

    def __init__(self, returncode):
        super().__init__(f"exited ({returncode}) before writing its port")
        self.returncode = returncode


def wait_port_file(path, popen, deadline):
    """The port the daemon `popen` writes to its --port-file `path`, read
    once it is there. Raises DaemonExited if the daemon exits first, and
    TimeoutError once time.monotonic() passes `deadline`: neutral errors,
    which each caller turns into its own with the daemon's log."""
    while True:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text.isdigit() and int(text) > 0:
                return int(text)
        except OSError:
            pass
        if popen.poll() is not None:
            raise DaemonExited(popen.returncode)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no port in {path}")
        time.sleep(0.02)


def read_log_tail(path, chars):
    """The last `chars` characters of the log at `path`; "" where it cannot
    be read."""
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")[-chars:]
    except OSError:
        return ""


def wait_or_kill(popen, grace):
    """Gives a process sent SIGTERM `grace` seconds to exit, then SIGKILL;
    it is reaped either way."""
    try:
        popen.wait(grace)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


class _Process:
    def __init__(self, name, argv, directory, env=None):
        self.name = name
        self.log_path = os.path.join(directory, f"{name}.log")
        self.port_file = os.path.join(directory, f"{name}.port")
        self._log = open(self.log_path, "wb")
        argv, options = _spawn_options(argv + ["--port-file", self.port_file])
        self.popen = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env, **options)

    def wait_port(self, deadline):
        try:
            return wait_port_file(self.port_file, self.popen, deadline)
        except DaemonExited as e:
            raise CclError(grpc.StatusCode.UNAVAILABLE,
                           f"{self.name} exited ({e.returncode}) before "
                           f"writing its port; log:\n{self.log()}") from None
        except TimeoutError:
            raise CclError(grpc.StatusCode.DEADLINE_EXCEEDED,
                           f"{self.name} wrote no port file in time; log:"
                           f"\n{self.log()}") from None

    def log(self, tail=4000):
        return read_log_tail(self.log_path, tail)

    def stop(self, grace=5.0):
        if self.popen.poll() is None:
            self.popen.terminate()
            wait_or_kill(self.popen, grace)
        self._log.close()

    def kill(self):
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


class LocalCluster:
    """`workers` ccworker processes (device "cpu", or "cuda" for cuda:i on
    worker i) and a cccoord, ready (world complete, every worker ready)
    when the constructor returns. `client_options` are what the readiness
    check connects with (TLS files, a token). `simulated_hosts=G` shares G
    GPUs among the "cuda" workers: worker i on cuda:(i mod G), each a host
    of its own to NCCL (ccworker --host-id), so NCCL joins them through its
    network transport."""

    def __init__(self, workers=2, device="cpu", worker_args=(),
                 coordinator_args=(), ready_timeout=60.0, env=None,
                 client_options=None, simulated_hosts=0):
        self.client_options = dict(client_options or {})
        self.workers = []
        self._worker_argv = []
        self._replacements = 0
        self.coordinator = None
        self._coordinator = None
        self.directory = tempfile.mkdtemp(prefix="ccl-pycluster-")
        self._env = None if env is None else {**os.environ, **env}
        deadline = time.monotonic() + ready_timeout
        try:
            self._coordinator = _Process(
                "cccoord",
                [binary("cccoord"), "--world-size", str(workers), "--listen",
                 "127.0.0.1:0", *coordinator_args], self.directory, self._env)
            port = self._coordinator.wait_port(deadline)
            self.coordinator = f"127.0.0.1:{port}"
            for i in range(workers):
                dev, host = device, []
                if device == "cuda":
                    dev = f"cuda:{i % simulated_hosts if simulated_hosts else i}"
                    if simulated_hosts:
                        host = ["--host-id", f"simhost{i}"]
                argv = [binary("ccworker"), "--coordinator", self.coordinator,
                        "--listen", "127.0.0.1:0", "--device", dev, *host,
                        *worker_args]
                self._worker_argv.append(argv)
                self.workers.append(_Process(
                    f"ccworker-{i}", argv + ["--rank", str(i)],
                    self.directory, self._env))
            for w in self.workers:
                w.wait_port(deadline)
            self.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop(keep_logs=True)
            raise

    def wait_ready(self, timeout=60.0):
        from ccl._client import Client
        options = {"timeout": 10, **self.client_options}
        with Client(self.coordinator, **options) as client:
            client.wait_ready(timeout)

    def logs(self):
        """Every process's log tail, for a failing test's report."""
        parts = [f"--- {p.name} ({p.log_path})\n{p.log()}"
                 for p in [self._coordinator, *self.workers]
                 if p is not None]
        return "\n".join(parts)

    def kill_coordinator(self):
        self._coordinator.kill()

    def replace_worker(self, i, timeout=60.0):
        """Kills worker `i` with SIGKILL and starts its replacement at once,
        as a container restart does, not naming a rank: the coordinator
        gives it the dead worker's rank once that one is declared gone.
        Returns when the replacement serves (not when the world re-formed:
        wait_ready(min_generation=...) says that)."""
        self.workers[i].kill()
        self._replacements += 1
        self.workers[i] = _Process(
            f"ccworker-{i}.{self._replacements}", list(self._worker_argv[i]),
            self.directory, self._env)
        self.workers[i].wait_port(time.monotonic() + timeout)

    def stop(self, keep_logs=False):
        for w in self.workers:
            w.stop()
        if self._coordinator is not None:
            self._coordinator.stop()
        if not keep_logs:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop(keep_logs=exc[0] is not None)
        return False
