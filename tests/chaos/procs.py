"""The daemons of a chaos run (one cccoord, N ccworkers) and the client
processes: started in their node's namespace (or on loopback), killed,
stopped, continued and restarted on the injector's orders, and watched for
any exit nobody asked for.

Every start and exit goes to daemons.jsonl. An exit the injector did not
ask for (a crash, a fatal signal, a worker that gave up) is a failure of the
run, with the process's log tail in the report. Processes get SIGKILL when
the driver dies (PR_SET_PDEATHSIG), so an interrupted run leaves nothing
behind.
"""

import ctypes
import os
import signal
import subprocess
import threading
import time

# LocalCluster's daemon helpers: ccl is on PYTHONPATH here, as for workload.py.
from ccl.cluster import (DaemonExited, read_log_tail, wait_or_kill,
                         wait_port_file)
import history

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class Proc:
    """One process slot (a daemon or a client): the process in it changes
    when it is restarted."""

    def __init__(self, name, argv, log_dir, events, prefix=(), env=None,
                 port_file=True, nice=0):
        self.name = name
        self.argv = list(argv)
        self.prefix = list(prefix)
        self.env = env
        self.log_dir = log_dir
        self.events = events
        self.port_file = (os.path.join(log_dir, f"{name}.port")
                          if port_file else None)
        self.nice = nice
        self.popen = None
        self.incarnation = 0
        self.expected_exit = False
        self.stopped = False
        self.deaths = []       # unasked exits: (t, returncode, log tail)
        self._lock = threading.Lock()

    @property
    def pid(self):
        return self.popen.pid if self.popen else None

    @property
    def log_path(self):
        return os.path.join(self.log_dir, f"{self.name}.{self.incarnation}.log")

    def start(self, extra=()):
        with self._lock:
            self.incarnation += 1
            if self.port_file and os.path.exists(self.port_file):
                os.unlink(self.port_file)
            argv = self.prefix + self.argv + list(extra)
            if self.port_file:
                argv += ["--port-file", self.port_file]
            log = open(self.log_path, "wb")
            nice = self.nice

            def pre():
                _die_with_parent()
                if nice:
                    os.nice(nice)

            self.popen = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, preexec_fn=pre, env=self.env)
            log.close()
            self.expected_exit = False
            self.stopped = False
            self.events.write({"ev": "start", "proc": self.name,
                               "pid": self.popen.pid,
                               "incarnation": self.incarnation,
                               "t": history.now()})

    def wait_port(self, timeout=60.0):
        deadline = time.monotonic() + timeout
        try:
            return wait_port_file(self.port_file, self.popen, deadline)
        except DaemonExited as e:
            raise RuntimeError(f"{self.name} exited ({e.returncode}) "
                               f"before writing its port:"
                               f"\n{self.log_tail()}") from None
        except TimeoutError:
            raise RuntimeError(f"{self.name} wrote no port in {timeout} s"
                               f":\n{self.log_tail()}") from None

    def signal(self, sig, why):
        """Sends `sig`; a SIGKILL/SIGTERM makes the exit an expected one."""
        with self._lock:
            if self.popen is None or self.popen.poll() is not None:
                return False
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.expected_exit = True
            if sig == signal.SIGCONT and self.stopped:
                self.stopped = False
            self.popen.send_signal(sig)
            if sig == signal.SIGSTOP:
                self.stopped = True
            self.events.write({"ev": "signal", "proc": self.name,
                               "pid": self.popen.pid, "sig": int(sig),
                               "why": why, "t": history.now()})
            return True

    def kill(self, why):
        if self.stopped:
            # A stopped process dies of SIGKILL all the same.
            pass
        sent = self.signal(signal.SIGKILL, why)
        if sent:
            self.popen.wait()
        return sent

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def check(self):
        """Records an exit nobody asked for; True while it runs."""
        with self._lock:
            if self.popen is None:
                return False
            rc = self.popen.poll()
            if rc is None:
                return True
            if getattr(self.popen, "_chaos_seen", False):
                return False
            self.popen._chaos_seen = True
            self.events.write({"ev": "exit", "proc": self.name,
                               "pid": self.popen.pid, "rc": rc,
                               "expected": self.expected_exit,
                               "t": history.now()})
            if not self.expected_exit:
                self.deaths.append((history.now(), rc, self.log_tail()))
            return False

    def rss(self):
        return rss_kib(self.pid) if self.alive() else None

    def log_tail(self, chars=6000):
        return read_log_tail(self.log_path, chars)

    def terminate(self, grace=10.0):
        with self._lock:
            if self.popen is None or self.popen.poll() is not None:
                return
            self.expected_exit = True
            if self.stopped:
                self.popen.send_signal(signal.SIGCONT)
            self.popen.terminate()
        wait_or_kill(self.popen, grace)
