#!/usr/bin/env python3
"""Runs deploy/compose/compose.yaml's cpu profile with this build's binaries.

The services' commands, environment and healthchecks come from the file as
`docker-compose config` resolves it (anchors, merges and ${VAR:-default}
interpolation included), so the file and the binaries cannot drift apart.

What this test changes, and nothing else (each change is printed):
  * argv[0]: the binary name (cccoord, ccworker, ccctl) becomes its path in
    the build tree (--binary NAME=PATH).
  * addresses: every container of the file has its own network namespace and
    all listen on the same ports; here they share 127.0.0.1. So each
    (service, container port) pair gets a free loopback port, and
      0.0.0.0:P, 127.0.0.1:P, localhost:P  in service S -> 127.0.0.1:port(S, P)
      T:P  where T is a service name       -> 127.0.0.1:port(T, P)
      a value that is exactly a service name or 0.0.0.0 -> 127.0.0.1
      an environment variable named *_PORT, value P     -> port(S, P)
Then: start the services without a profile (the coordinator) and wait until
their healthcheck passes, start the cpu profile's workers and wait until
their healthchecks pass (a worker is healthy once the world is formed), run
`ccctl allreduce --op sum` and check every rank printed the sum
1 + ... + world_size, then scrape each service's metrics endpoint at the
port its environment gives. Bounded in time; every process is killed at the
end.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

DEADLINE_S = 90


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Substitution:
    def __init__(self, services, binaries):
        self.services = set(services)
        self.binaries = binaries
        self.ports = {}
        self.log = []

    def port(self, service, port):
        key = (service, str(port))
        if key not in self.ports:
            self.ports[key] = free_port()
            self.log.append(f"{service}:{port} -> 127.0.0.1:{self.ports[key]}")
        return self.ports[key]

    def value(self, service, text, name=None):
        text = str(text)
        if name and name.endswith("_PORT") and text.isdigit():
            return str(self.port(service, text))
        if text in self.services or text == "0.0.0.0":
            return "127.0.0.1"

        def address(match):
            host, port = match.group(1), match.group(2)
            if host in ("0.0.0.0", "127.0.0.1", "localhost"):
                return f"127.0.0.1:{self.port(service, port)}"
            if host in self.services:
                return f"127.0.0.1:{self.port(host, port)}"
            return match.group(0)

        return re.sub(r"^([A-Za-z0-9_.-]+):(\d+)$", address, text)

    def argv(self, service, argv):
        if not argv:
            return []
        # argv[0] is a program, never an address (a service may share its
        # name, as ccctl does).
        return ([self.binaries.get(argv[0], argv[0])] +
                [self.value(service, a) for a in argv[1:]])

    def env(self, service, env):
        return {k: self.value(service, v, k) for k, v in (env or {}).items()}


def load_profile(compose_file, profile):
    compose = shutil.which("docker-compose")
    if not compose:
        sys.exit("compose_test: docker-compose not found (Debian package "
                 "docker-compose); refusing to skip")
    result = subprocess.run([compose, "-f", compose_file, "--profile", profile,
                             "config"], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"compose_test: docker-compose config failed:\n{result.stderr}")
    services = yaml.safe_load(result.stdout)["services"]
    always = {n: s for n, s in services.items() if not s.get("profiles")}
    profiled = {n: s for n, s in services.items()
                if profile in s.get("profiles", [])}
    return services, always, profiled


def healthcheck_argv(svc):
    test = (svc.get("healthcheck") or {}).get("test")
    if not test or test[0] not in ("CMD", "CMD-SHELL"):
        return None
    if test[0] == "CMD-SHELL":
        return ["/bin/sh", "-c", test[1]]
    return test[1:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--compose", required=True)
    parser.add_argument("--binary", action="append", default=[],
                        help="NAME=PATH")
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args()
    binaries = dict(b.split("=", 1) for b in args.binary)
    services, always, workers = load_profile(args.compose, args.profile)
    if not workers:
        sys.exit(f"compose_test: profile {args.profile} has no services")
    sub = Substitution(services, binaries)
    workdir = tempfile.mkdtemp(prefix="compose_test.")
    processes = []
    start = time.monotonic()

    def remaining():
        return max(1.0, DEADLINE_S - (time.monotonic() - start))

    def launch(name, svc):
        argv = sub.argv(name, (svc.get("entrypoint") or []) +
                        (svc.get("command") or []))
        env = dict(os.environ)
        env.update(sub.env(name, svc.get("environment")))
        # ccctl (in healthchecks) must not find a local cluster's state.
        env["CCCTL_STATE_DIR"] = os.path.join(workdir, "ccctl")
        log = open(os.path.join(workdir, f"{name}.log"), "w")
        print(f"start {name}: {' '.join(argv)}")
        print("  env: " + " ".join(f"{k}={v}" for k, v in sorted(
            sub.env(name, svc.get("environment")).items())))
        processes.append((name, subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL), log.name))
        return env

    def wait_healthy(name, svc, env):
        argv = healthcheck_argv(svc)
        if argv is None:
            raise AssertionError(f"{name} has no CMD healthcheck")
        argv = sub.argv(name, argv)
        print(f"healthcheck {name}: {' '.join(argv)}")
        while True:
            for pname, proc, _ in processes:
                if proc.poll() is not None:
                    raise AssertionError(f"{pname} exited ({proc.returncode})")
            result = subprocess.run(argv, env=env, capture_output=True,
                                    text=True, timeout=remaining())
            if result.returncode == 0:
                print(f"  healthy: {result.stdout.strip()}")
                return
            if time.monotonic() - start > DEADLINE_S:
                raise AssertionError(f"{name} never healthy: "
                                     f"{result.stdout}{result.stderr}")
            time.sleep(0.2)

    ok = False
    try:
        envs = {n: launch(n, s) for n, s in always.items()}
        for name, svc in always.items():
            wait_healthy(name, svc, envs[name])
        envs.update({n: launch(n, s) for n, s in workers.items()})
        for name, svc in workers.items():
            wait_healthy(name, svc, envs[name])
        print("substitutions: " + "; ".join(sub.log))

        coordinator = next(sub.env(n, s.get("environment"))
                           for n, s in workers.items())["CCL_COORDINATOR"]
        ctl = [binaries["ccctl"], "--coordinator", coordinator,
               "allreduce", "--op", "sum"]
        print("$ " + " ".join(ctl))
        env = dict(os.environ, CCCTL_STATE_DIR=os.path.join(workdir, "ccctl"))
        result = subprocess.run(ctl, env=env, capture_output=True, text=True,
                                timeout=remaining())
        print(result.stdout + result.stderr)
        world = len(workers)
        want = f"[{world * (world + 1) / 2:.1f}]"
        if result.returncode != 0:
            raise AssertionError(f"ccctl exited {result.returncode}")
        if result.stdout.count(want) != world:
            raise AssertionError(f"expected {want} on each of {world} ranks")
        # The metrics endpoints the file configures are served where it says.
        for name, svc in list(always.items()) + list(workers.items()):
            env = sub.env(name, svc.get("environment"))
            if "CCL_METRICS_PORT" not in env:
                continue
            url = (f"http://{env.get('CCL_METRICS_ADDRESS', '127.0.0.1')}:"
                   f"{env['CCL_METRICS_PORT']}/metrics")
            # Loopback only: never through a proxy from the environment.
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            text = opener.open(url, timeout=5).read().decode()
            want = ('ccl_ops_total{op="all_reduce",backend="gloo",'
                    'status="OK"} 1' if name in workers else
                    "ccl_coordinator_world_size")
            if want not in text:
                raise AssertionError(f"{name}: {url} lacks {want}")
            print(f"scraped {name}: {url}: has {want}")
        ok = True
    except (AssertionError, OSError, subprocess.TimeoutExpired) as error:
        print(f"FAIL: {error}", file=sys.stderr)
    finally:
        for name, proc, _ in processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + 15
        for name, proc, log in processes:
            try:
                proc.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                ok = False
                print(f"{name} ignored SIGTERM", file=sys.stderr)
            if not ok:
                with open(log) as f:
                    print(f"---- {name} log\n{f.read()}", file=sys.stderr)
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
    print("compose cpu profile: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
