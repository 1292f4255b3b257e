#!/usr/bin/env python3
"""The images built and the compose deployment run in Docker, for real.

  1. The engine: Docker's, if one answers; else (as root) Debian's docker.io
     installed if missing and dockerd started here, and stopped at the end.
     Whichever `docker` client comes first on PATH is used.
  2. The base: debian:12-slim, pulled if it can be, else made by
     docker/stand-in-base.sh (debootstrap --variant=minbase bookworm).
  3. The CPU image from docker/Dockerfile.cpu: size, build time, uid 10001,
     no apt lists or downloaded packages left, ldd finds every library of the
     four binaries, and each answers --help.
  4. The CUDA image from docker/Dockerfile.cuda-debian on a toolkit image
     packed from this machine's CUDA (docker/cuda-toolkit-image.sh): built
     after the CPU image, its shared build steps must come from the layer
     cache; ldd finds every library of the binaries and of libnccl. Skipped,
     with the reason printed, where no toolkit with NCCL is installed.
  5. The compose file's cpu profile, insecure as shipped: every container
     healthy; the published ports on 127.0.0.1 only; `ccctl allreduce --op
     sum` prints [3.0] on both ranks; a small `ccctl bench` has no wrong
     element; no temporary tensor is left; a worker's process killed
     (SIGKILL from the host: a crash, which the restart policy answers) and
     the world re-forms at a new generation with the survivor's tensor
     intact and the next op correct; every metrics endpoint scraped (the
     coordinator's through its published port, the workers' on the
     loopback of their own network namespace); then `stop`: every daemon
     drains and exits 0.
  6. The same profile with compose.secure.yaml on top, the secrets made by
     the shell block of docs/security.md as written there: healthy, an
     all_reduce through the ctl profile, and a client without the token
     refused.
Everything it made (containers, networks, images, the stand-in base, the
toolkit image, temporary files, the dockerd it started) is removed at the
end, on failure too; --keep keeps the images for another run.

Exit 0 passed, 1 failed, 77 skipped (no engine can run here: not root and
none answers, or no way to install one).
"""

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77
# What every image carries (docker/Dockerfile.*'s install lines).
BINARIES = ["cccoord", "cchostagent", "ccworker", "ccctl"]
ROOT_NEEDED = ("the test starts dockerd, kills a container's process from the "
               "host and reads metrics inside a container's network namespace")


class Failure(Exception):
    pass


def log(message):
    print(message, flush=True)


class Runner:
    def __init__(self, args):
        self.args = args
        self.root = os.path.abspath(args.root)
        self.compose_dir = os.path.join(self.root, "deploy", "compose")
        self.id = secrets.token_hex(4)
        self.tag = f"ccl-test-{self.id}"
        self.images = []           # images this run made, removed at the end
        self.layers = []           # image ids its builds printed
        self.before = set()        # image ids there before it ran
        self.projects = []         # compose projects brought up
        self.dockerd = None        # the dockerd this run started
        self.workdir = tempfile.mkdtemp(prefix="docker_test.")
        self.timings = []
        self.docker = None
        self.compose = None
        self.cpu = self.cuda = None
        self.env = dict(os.environ, DOCKER_BUILDKIT="0",
                        COMPOSE_DOCKER_CLI_BUILD="0")

    # ------------------------------------------------------------ helpers --

    def run(self, argv, timeout=120, check=True, env=None, capture=True,
            input_text=None, cwd=None):
        result = subprocess.run(argv, env=env or self.env, cwd=cwd,
                                capture_output=capture, text=True,
                                timeout=timeout, input=input_text)
        if check and result.returncode != 0:
            raise Failure(f"{' '.join(argv)} exited {result.returncode}:\n"
                          f"{(result.stdout or '')[-3000:]}"
                          f"{(result.stderr or '')[-3000:]}")
        return result

    def timed(self, what, function, *args):
        start = time.monotonic()
        log(f"\n== {what}")
        try:
            return function(*args)
        finally:
            seconds = time.monotonic() - start
            self.timings.append((what, seconds))
            log(f"== {what}: {seconds:.0f} s")

    def docker_cmd(self, *args, **kwargs):
        return self.run([self.docker, *args], **kwargs)

    def compose_cmd(self, project, files, *args, env=None, **kwargs):
        argv = [self.compose, "-p", project]
        for f in files:
            argv += ["-f", os.path.join(self.compose_dir, f)]
        return self.run(argv + list(args), env=env, cwd=self.compose_dir,
                        **kwargs)

    def image_size_mb(self, image):
        size = self.docker_cmd("image", "inspect", "-f", "{{.Size}}",
                               image).stdout.strip()
        return int(size) / 1e6

    # ------------------------------------------------------------- engine --

    def engine(self):
        self.docker = shutil.which("docker") or "/usr/bin/docker"
        self.compose = shutil.which("docker-compose")
        if self.answers():
            log(f"engine: one answers already ({self.docker})")
        elif os.geteuid() != 0:
            raise SystemExit(self.skip("no Docker engine answers and this is "
                                       "not root, so none can be started"))
        else:
            self.install_and_start()
        if os.geteuid() != 0:
            raise SystemExit(self.skip(f"not root: {ROOT_NEEDED}"))
        for tool in ("debootstrap", "docker-compose"):
            if not shutil.which(tool):
                self.apt_install([tool])
        self.compose = shutil.which("docker-compose")
        client = self.docker_cmd("version", "-f",
                                 "client {{.Client.Version}}, engine "
                                 "{{.Server.Version}}").stdout.strip()
        compose = self.run([self.compose, "version", "--short"]).stdout.strip()
        log(f"docker: {self.docker}: {client}; docker-compose {compose}")

    def answers(self):
        if not os.path.exists(self.docker):
            return False
        return subprocess.run([self.docker, "info"], capture_output=True,
                              timeout=30).returncode == 0

    def apt_install(self, packages):
        if not shutil.which("apt-get"):
            raise SystemExit(self.skip(f"{' '.join(packages)} missing and no "
                                       "apt-get to install it"))
        log(f"engine: apt-get install {' '.join(packages)}")
        env = dict(self.env, DEBIAN_FRONTEND="noninteractive")
        self.run(["apt-get", "update", "-q"], timeout=300, env=env)
        self.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                  *packages], timeout=600, env=env)

    def install_and_start(self):
        if not shutil.which("dockerd"):
            self.apt_install(["docker.io"])
        if not os.path.exists(self.docker):
            self.docker = "/usr/bin/docker"
        log_path = os.path.join(self.workdir, "dockerd.log")
        self.dockerd_log = open(log_path, "w")
        # Its own process group, so that stopping it never signals ours.
        self.dockerd = subprocess.Popen(["dockerd"], stdout=self.dockerd_log,
                                        stderr=subprocess.STDOUT,
                                        start_new_session=True)
        log(f"engine: started dockerd (pid {self.dockerd.pid})")
        deadline = time.monotonic() + 60
        while not self.answers():
            if self.dockerd.poll() is not None or time.monotonic() > deadline:
                with open(log_path) as f:
                    raise Failure("dockerd did not come up:\n" + f.read()[-3000:])
            time.sleep(0.5)

    def skip(self, reason):
        # CI is a machine where an engine can run: a skip there would hide
        # a broken install, so it fails instead.
        if os.environ.get("CI") == "true":
            log(f"FAIL (CI=true, where this must not skip): {reason}")
            return 1
        log(f"SKIPPED: {reason}")
        return SKIP

    # --------------------------------------------------------------- base --

    def base(self):
        self.before = set(self.docker_cmd("images", "-a", "-q").stdout.split())
        if self.docker_cmd("image", "inspect", "debian:12-slim",
                           check=False).returncode == 0:
            log("base: debian:12-slim present")
            return
        pulled = self.docker_cmd("pull", "debian:12-slim", check=False,
                                 timeout=120)
        if pulled.returncode == 0:
            log("base: pulled debian:12-slim")
            self.images.append("debian:12-slim")
            return
        log("base: cannot be pulled; making the stand-in")
        self.run(["sh", os.path.join(self.root, "docker", "stand-in-base.sh"),
                  "debian:12-slim"], timeout=900,
                 env=dict(self.env, DOCKER=self.docker))
        self.images.append("debian:12-slim")

    # ------------------------------------------------------------- images --

    def build(self, dockerfile, image, *build_args):
        argv = [self.docker, "build", "--force-rm", "-f",
                os.path.join(self.root, "docker", dockerfile), "-t", image]
        for arg in build_args:
            argv += ["--build-arg", arg]
        path = os.path.join(self.workdir, f"build-{dockerfile}.log")
        self.images.append(image)
        with open(path, "w") as out:
            result = subprocess.run(argv + [self.root], env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    timeout=self.args.build_timeout)
        with open(path) as f:
            text = f.read()
        # The legacy builder keeps every stage's image (the build stage is
        # not a parent of the final one): cleanup removes those it made.
        self.layers += re.findall(r"^ ---> ([0-9a-f]{12})$", text, re.M)
        if result.returncode != 0:
            raise Failure(f"docker build {dockerfile} failed:\n{text[-6000:]}")
        return text

    def check_image(self, image, libraries_of=()):
        script = (
            "set -e; id -u; "
            "ls /var/lib/apt/lists | grep -v '^partial$' | sed 's/^/LIST /' || true; "
            "ls /var/cache/apt/archives | grep '\\.deb$' | sed 's/^/DEB /' || true; "
            "for b in " + " ".join(BINARIES + list(libraries_of)) + "; do "
            "  p=$(command -v $b || echo $b); echo \"LDD $p\"; ldd $p; done; "
            "for b in " + " ".join(BINARIES) + "; do $b --help >/dev/null; "
            "echo HELP $b ok; done")
        out = self.docker_cmd("run", "--rm", "--entrypoint", "sh", image, "-c",
                              script).stdout
        lines = out.splitlines()
        if lines[0] != "10001":
            raise Failure(f"{image} runs as uid {lines[0]}, not 10001")
        leftovers = [l for l in lines if l.startswith(("LIST ", "DEB "))]
        if leftovers:
            raise Failure(f"{image} keeps apt caches: {leftovers[:5]}")
        missing = [l for l in lines if "not found" in l]
        if missing:
            raise Failure(f"{image}: ldd finds no {missing}")
        if sum(l.startswith("HELP ") for l in lines) != len(BINARIES):
            raise Failure(f"{image}: --help failed:\n{out}")
        ldd = sum(l.startswith("LDD ") for l in lines)
        log(f"{image}: uid 10001, no apt caches, ldd resolves every library "
            f"of {ldd} files, --help of the {len(BINARIES)} binaries works, "
            f"{self.image_size_mb(image):.0f} MB")
        return out

    def cpu_image(self):
        self.cpu = f"{self.tag}:cpu"
        text = self.build("Dockerfile.cpu", self.cpu)
        log(f"built {self.cpu}: {len(re.findall('Building CXX', text))} "
            "C++ files compiled")
        self.check_image(self.cpu)

    def cuda_toolkit(self):
        home = os.path.realpath(self.args.cuda_home)
        needed = ["bin/nvcc", "include/nccl.h"]
        lacking = [n for n in needed if not os.path.exists(os.path.join(home, n))]
        if lacking:
            return f"no CUDA toolkit with NCCL at {self.args.cuda_home} " \
                   f"(lacks {', '.join(lacking)})"
        return None

    def cuda_image(self):
        toolkit = f"{self.tag}-toolkit:cuda"
        self.images.append(toolkit)
        self.run(["sh", os.path.join(self.root, "docker",
                                     "cuda-toolkit-image.sh"),
                  self.args.cuda_home, toolkit], timeout=600,
                 env=dict(self.env, DOCKER=self.docker))
        log(f"toolkit image {toolkit}: {self.image_size_mb(toolkit):.0f} MB")
        self.cuda = f"{self.tag}:cuda"
        text = self.build("Dockerfile.cuda-debian", self.cuda,
                          f"CUDA_TOOLKIT_IMAGE={toolkit}")
        # The apt, COPY and first cmake steps are those of the CPU image.
        steps = re.split(r"\nStep \d+/\d+ : ", text)
        shared = [s for s in steps if s.startswith("RUN cmake -S . -B /build "
                                                   "-DCMAKE_BUILD_TYPE=Release")]
        if not shared or "Using cache" not in shared[0]:
            raise Failure("the CUDA build compiled the part it shares with "
                          "the CPU image again (no 'Using cache' on its "
                          "first cmake step): are the two Dockerfiles' shared "
                          "instructions still identical?")
        compiled = re.findall(r"Building (?:CXX|CUDA) object (\S+)", text)
        log(f"built {self.cuda}: shared steps from the cache, "
            f"{len(compiled)} files compiled for CUDA")
        if any("ccctl.dir" in c or "cccoord.dir" in c or "ccl_proto" in c
               or "cchostagent.dir" in c
               for c in compiled):
            raise Failure(f"the CUDA build recompiled CUDA-independent "
                          f"files: {compiled}")
        self.check_image(self.cuda, ["/usr/local/lib/ccl/libnccl.so.2"])
        nccl = self.docker_cmd("run", "--rm", "--entrypoint", "sh", self.cuda,
                               "-c", "ldd /usr/local/bin/ccworker").stdout
        if "libnccl.so.2 => /usr/local/lib/ccl/" not in nccl:
            raise Failure(f"ccworker does not load the image's NCCL:\n{nccl}")

    # ------------------------------------------------------------ compose --

    def compose_env(self, extra=None):
        env = dict(self.env, CCL_IMAGE_CPU=self.cpu, CCL_WORLD_SIZE="2",
                   CCL_COORDINATOR_HOST_PORT=str(self.free_port()),
                   CCL_METRICS_HOST_PORT=str(self.free_port()))
        env.pop("CCL_PUBLISH_ADDRESS", None)
        env.update(extra or {})
        return env

    @staticmethod
    def free_port():
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def containers(self, project):
        out = self.docker_cmd("ps", "-a", "--filter",
                              f"label=com.docker.compose.project={project}",
                              "--format", "{{.Names}}").stdout.split()
        return sorted(out)

    def container_of(self, project, service):
        for name in self.containers(project):
            if name.startswith(f"{project}_{service}_"):
                return name
        raise Failure(f"no container of {service} in {project}")

    def wait_healthy(self, project, services, timeout=180):
        deadline = time.monotonic() + timeout
        while True:
            states = {}
            for service in services:
                name = self.container_of(project, service)
                states[service] = self.docker_cmd(
                    "inspect", "-f", "{{.State.Health.Status}}",
                    name).stdout.strip()
            if all(s == "healthy" for s in states.values()):
                log(f"healthy: {', '.join(services)}")
                return
            if time.monotonic() > deadline:
                raise Failure(f"not healthy after {timeout} s: {states}")
            time.sleep(1)

    def ctl(self, project, files, env, *args, check=True, quiet=False):
        # `docker-compose run --rm ccctl ...` as docs/deploy.md writes it.
        result = self.compose_cmd(project, files, "run", "--rm", "-T", "ccctl",
                                  *args, env=env, check=False, timeout=180)
        if not quiet or result.returncode != 0:
            log(f"$ docker-compose run --rm ccctl {' '.join(args)}  (exit "
                f"{result.returncode})\n{result.stdout}{result.stderr}".rstrip())
        if check and result.returncode != 0:
            raise Failure(f"ccctl {' '.join(args)} failed")
        return result

    def status(self, project, files, env):
        out = self.ctl(project, files, env, "-o", "json", "status",
                       check=False, quiet=True)
        if out.returncode != 0:
            return None
        try:
            return json.loads(out.stdout)
        except ValueError:
            return None

    def scrape_inside(self, container, port=9400):
        """GET /metrics on the loopback of the container's own network
        namespace: the workers publish no port, and nothing here touches an
        address outside this machine's loopback."""
        pid = self.docker_cmd("inspect", "-f", "{{.State.Pid}}",
                              container).stdout.strip()
        code = ("import urllib.request as u;"
                "print(u.build_opener(u.ProxyHandler({})).open("
                f"'http://127.0.0.1:{port}/metrics', timeout=5).read().decode())")
        return self.run(["nsenter", "-t", pid, "-n", sys.executable, "-c",
                         code]).stdout

    def cpu_profile(self):
        project = f"ccltest{self.id}"
        self.projects.append((project, ["compose.yaml"]))
        files = ["compose.yaml"]
        env = self.compose_env()
        self.compose_cmd(project, files, "--profile", "cpu", "up", "-d",
                         env=env, timeout=300)
        services = ["coordinator", "cpu-worker-0", "cpu-worker-1"]
        self.wait_healthy(project, services)

        # Published ports: the host's loopback only.
        coordinator = self.container_of(project, "coordinator")
        ports = self.docker_cmd("port", coordinator).stdout.split("\n")
        ports = [p for p in ports if p.strip()]
        if len(ports) != 2 or any("-> 127.0.0.1:" not in p for p in ports):
            raise Failure(f"published ports are not on 127.0.0.1 only: {ports}")
        log(f"published: {'; '.join(ports)}")

        result = self.ctl(project, files, env, "allreduce", "--op", "sum")
        if result.stdout.count("[3.0]") != 2:
            raise Failure("allreduce --op sum did not print [3.0] on 2 ranks")
        bench = self.ctl(project, files, env, "-o", "json", "bench",
                         "all_reduce", "-b", "8", "-e", "4K", "-f", "8",
                         "-n", "3", "-w", "1", "-c", "1")
        rows = json.loads(bench.stdout)["rows"]
        if len(rows) != 4 or any(r["wrong"] != 0 for r in rows):
            raise Failure(f"bench: expected 4 sizes, no wrong element: {rows}")
        log(f"bench: {len(rows)} sizes, 0 wrong")
        self.no_temporaries(project, files, env)

        # A crash of worker 1's process; worker 0 keeps its tensor.
        self.ctl(project, files, env, "tensor", "alloc", "kept", "--shape",
                 "4", "--fill", "rank+1")
        before = self.status(project, files, env)
        generation = int(before["generation"])
        victim = self.container_of(project, "cpu-worker-1")
        pid = int(self.docker_cmd("inspect", "-f", "{{.State.Pid}}",
                                  victim).stdout)
        log(f"kill -9 {pid} (ccworker of {victim}, from the host)")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while True:
            now = self.status(project, files, env)
            # Proto JSON: int64 as a string, enums by name.
            if (now and int(now["generation"]) > generation and
                    now.get("state") == "WORLD_STATE_COMPLETE" and
                    len(now.get("workers", [])) == 2 and
                    all(w.get("state") == "ready" and
                        int(w.get("generation", 0)) == int(now["generation"])
                        for w in now["workers"])):
                break
            if time.monotonic() > deadline:
                raise Failure(f"the world did not re-form: {now}")
            time.sleep(2)
        restarts = self.docker_cmd("inspect", "-f", "{{.RestartCount}}",
                                   victim).stdout.strip()
        log(f"re-formed at generation {now['generation']} (was {generation}); "
            f"{victim} restarted {restarts} time(s)")
        if restarts == "0":
            raise Failure("the restart policy did not restart the worker")
        self.wait_healthy(project, services)
        kept = self.ctl(project, files, env, "-o", "json", "tensor", "read",
                        "kept", "--rank", "0")
        values = json.loads(kept.stdout)[0]["values"]
        if values != [1.0, 1.0, 1.0, 1.0]:
            raise Failure(f"rank 0's tensor changed across the re-formation: "
                          f"{values}")
        result = self.ctl(project, files, env, "allreduce", "--op", "sum")
        if result.stdout.count("[3.0]") != 2:
            raise Failure("the op after the re-formation is wrong")
        self.ctl(project, files, env, "tensor", "free", "kept", "--ranks", "0")
        self.no_temporaries(project, files, env)

        # Every metrics endpoint: the coordinator's through the published
        # port, the workers' inside their network namespace.
        url = f"http://127.0.0.1:{env['CCL_METRICS_HOST_PORT']}/metrics"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        text = opener.open(url, timeout=5).read().decode()
        if not re.search(r"^ccl_coordinator_world_size 2(\.0)?$", text, re.M):
            raise Failure(f"{url}: no ccl_coordinator_world_size 2")
        match = re.search(r"^ccl_coordinator_generation (\d+)", text, re.M)
        if not match or int(match.group(1)) <= generation:
            raise Failure(f"{url}: generation did not advance")
        log(f"scraped coordinator at {url}")
        for worker in ("cpu-worker-0", "cpu-worker-1"):
            text = self.scrape_inside(self.container_of(project, worker))
            want = 'ccl_ops_total{op="all_reduce",backend="gloo",status="OK"}'
            if want not in text:
                raise Failure(f"{worker}: metrics lack {want}")
            log(f"scraped {worker} on its own loopback: has {want}")

        # Stop: SIGTERM, drain, exit 0 for every daemon.
        self.compose_cmd(project, files, "--profile", "cpu", "stop", env=env,
                         timeout=180)
        for service in services:
            name = self.container_of(project, service)
            code = self.docker_cmd("inspect", "-f", "{{.State.ExitCode}}",
                                   name).stdout.strip()
            logs = self.docker_cmd("logs", "--tail", "20", name).stderr + \
                self.docker_cmd("logs", "--tail", "20", name).stdout
            if code != "0":
                raise Failure(f"{service} exited {code}:\n{logs}")
            # The worker logs its drain; the coordinator its shutdown after
            # its own drain delay.
            want = "draining" if "worker" in service else "shutting down"
            if want not in logs:
                raise Failure(f"{service} logged no '{want}':\n{logs}")
        log("stopped: every daemon drained and exited 0")
        self.compose_cmd(project, files, "--profile", "cpu", "--profile", "ctl",
                         "down", "--remove-orphans", env=env, timeout=180)
        self.projects.remove((project, files))

    def no_temporaries(self, project, files, env):
        ls = self.ctl(project, files, env, "-o", "json", "tensor", "ls")
        left = [t["spec"]["name"] for rank in json.loads(ls.stdout)
                for t in rank.get("tensors", [])
                if t["spec"]["name"].startswith("ccctl.")]
        if left:
            raise Failure(f"temporaries left on the workers: {left}")

    def secure_profile(self):
        secrets_dir = os.path.join(self.workdir, "compose")
        os.makedirs(secrets_dir)
        with open(os.path.join(self.root, "docs", "security.md")) as f:
            page = f.read()
        match = re.search(r"### Make the secrets\s+```sh\n(.*?)```", page,
                          re.S)
        if not match:
            raise Failure("docs/security.md has no 'Make the secrets' block")
        # As written; sudo, where it is not installed, is root running it.
        shim = os.path.join(self.workdir, "bin")
        os.makedirs(shim, exist_ok=True)
        if not shutil.which("sudo"):
            with open(os.path.join(shim, "sudo"), "w") as f:
                f.write('#!/bin/sh\nexec "$@"\n')
            os.chmod(os.path.join(shim, "sudo"), 0o755)
        env = dict(self.env, PATH=shim + os.pathsep + self.env["PATH"])
        self.run(["bash", "-euo", "pipefail", "-c", match.group(1)],
                 cwd=secrets_dir, env=env)
        project = f"ccltest{self.id}s"
        files = ["compose.yaml", "compose.secure.yaml"]
        self.projects.append((project, files))
        env = self.compose_env({
            "CCL_SECRETS_DIR": os.path.join(secrets_dir, "secrets")})
        self.compose_cmd(project, files, "--profile", "cpu", "up", "-d",
                         env=env, timeout=300)
        self.wait_healthy(project, ["coordinator", "cpu-worker-0",
                                    "cpu-worker-1"])
        result = self.ctl(project, files, env, "allreduce", "--op", "sum")
        if result.stdout.count("[3.0]") != 2:
            raise Failure("secure: allreduce --op sum did not print [3.0]")
        refused = self.compose_cmd(
            project, files, "run", "--rm", "-T", "-e", "CCL_TOKEN_FILE=",
            "ccctl", "status", env=env, check=False, timeout=120)
        if refused.returncode == 0 or "UNAUTHENTICATED" not in refused.stderr:
            raise Failure("secure: a client without the token was not "
                          f"refused:\n{refused.stdout}{refused.stderr}")
        log("secure: a client without the token is refused UNAUTHENTICATED")
        self.compose_cmd(project, files, "--profile", "cpu", "--profile", "ctl",
                         "down", "--remove-orphans", env=env, timeout=180)
        self.projects.remove((project, files))

    # ------------------------------------------------------------ cleanup --

    def cleanup(self, failed):
        if self.docker is None or not self.answers():
            self.stop_dockerd()
            shutil.rmtree(self.workdir, ignore_errors=True)
            return
        for project, files in self.projects:
            if failed:
                for name in self.containers(project):
                    logs = self.docker_cmd("logs", "--tail", "40", name,
                                           check=False)
                    log(f"---- {name}\n{logs.stdout}{logs.stderr}")
            self.compose_cmd(project, files, "--profile", "cpu", "--profile",
                             "ctl", "down", "--remove-orphans",
                             env=self.compose_env({"CCL_SECRETS_DIR": "/"}),
                             check=False, timeout=180)
        # Containers that compose no longer knows (a run container whose
        # client died), by the project label.
        for project, _ in self.projects:
            for name in self.containers(project):
                self.docker_cmd("rm", "-f", name, check=False)
        if not self.args.keep and self.docker:
            for image in reversed(self.images):
                self.docker_cmd("rmi", image, check=False, timeout=300)
            # Without -f: an image another one still builds on stays.
            for layer in reversed(self.layers):
                if layer not in self.before:
                    self.docker_cmd("rmi", layer, check=False, timeout=300)
        self.stop_dockerd()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def stop_dockerd(self):
        if self.dockerd is not None:
            self.dockerd.send_signal(signal.SIGTERM)
            try:
                self.dockerd.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.dockerd.kill()
                self.dockerd.wait()
            log("engine: stopped the dockerd this test started")
            self.dockerd = None

    def main(self):
        failed = True
        try:
            self.timed("engine", self.engine)
            self.timed("base image", self.base)
            self.timed("CPU image build", self.cpu_image)
            reason = self.cuda_toolkit()
            if reason:
                log(f"\nSKIPPED the CUDA image: {reason}")
            else:
                self.timed("CUDA image build", self.cuda_image)
            self.timed("compose cpu profile", self.cpu_profile)
            self.timed("compose cpu profile, secure", self.secure_profile)
            failed = False
        except Failure as error:
            log(f"\nFAIL: {error}")
        except subprocess.TimeoutExpired as error:
            log(f"\nFAIL: timed out: {error}")
        finally:
            self.timed("cleanup", self.cleanup, failed)
        log("\ntimings:")
        for what, seconds in self.timings:
            log(f"  {what:32s} {seconds:6.0f} s")
        log(f"  {'total':32s} {sum(s for _, s in self.timings):6.0f} s")
        log("docker deployment: " + ("FAIL" if failed else "PASS"))
        return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    parser.add_argument("--cuda-home", default="/usr/local/cuda")
    parser.add_argument("--build-timeout", type=int, default=2400)
    parser.add_argument("--keep", action="store_true",
                        help="keep the images (and the stand-in base)")
    args = parser.parse_args()
    return Runner(args).main()


if __name__ == "__main__":
    sys.exit(main())
