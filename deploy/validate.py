#!/usr/bin/env python3
"""Offline validation of everything under deploy/ and docker/.

No Docker engine and no cluster: the manifests are checked with the tools
that work without one, and with a schema check of our own.

  compose   docker-compose config -q (for each profile), then structure:
            GPU workers reserve one nvidia device each, every daemon has a
            healthcheck, the cpu profile is a coordinator plus workers,
            every daemon can start under the security defaults.
  k8s       kubectl kustomize renders both overlays; every rendered object
            (and the Job example) is checked against a per-kind schema of
            the fields these manifests use: unknown keys are errors (what
            kubectl apply would reject or, worse, silently drop), required
            fields and value types are checked. Then the wiring: selectors
            match, probes hit a declared port, the world size equals the
            StatefulSet's replicas, the headless service publishes
            not-ready addresses, the GPU overlay asks for one GPU per pod,
            every daemon can start under the security defaults (TLS or an
            explicit CCL_INSECURE on a non-loopback bind), token and
            certificate files lie in a mounted volume, and a TLS server is
            probed with `ccctl health` (exec), never the plaintext-only
            kubelet gRPC probe.
  docker    Dockerfiles parsed and linted (rules in lint_dockerfile, after
            hadolint's), every RUN body and the helper scripts through
            shellcheck; COPY sources exist and are not excluded by
            .dockerignore.

A missing tool is a failure, never a skip. Exit 0 when all pass.
Usage: deploy/validate.py [--root DIR] [--only compose|k8s|docker]   (env KUBECTL, DOCKER_COMPOSE,
SHELLCHECK override the tools' paths)
"""

import argparse
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import yaml

FAILURES = []


def fail(where, message):
    FAILURES.append(f"{where}: {message}")


def tool(env, name):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        sys.exit(f"validate: '{name}' not found (install the Debian package; "
                 f"see .ci/run) -- refusing to skip")
    return path


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


# ------------------------------------------------------------- env names ---

# The sources that read CCL_* / CCCTL_* variables (daemon_flags.cc: the
# flags both daemons share; credentials.cc: the
# security variables every binary shares).
ENV_SOURCES = ("server/main.cc", "coordinator/main.cc", "common/daemon_flags.cc",
               "client/ccctl/common.cc", "common/credentials.cc")


def known_env_names(root):
    """The CCL_* / CCCTL_* variables the binaries read, from their sources:
    a misspelt variable in a manifest is silently ignored by the binary, so
    it is caught here."""
    names = set()
    for path in ENV_SOURCES:
        with open(os.path.join(root, path)) as f:
            names.update(re.findall(r'"((?:CCL|CCCTL)_[A-Z_]+)"', f.read()))
    # credentials.cc reads every token variable X also as X_FILE.
    names.update(f"{n}_FILE" for n in list(names) if n.endswith("_TOKEN"))
    return names


def check_env_names(root, where, env):
    known = known_env_names(root)
    for name in env:
        if re.match(r"^(CCL|CCCTL)_", name) and name not in known:
            fail(where, f"{name} is not read by any binary")


# -------------------------------------------------------------- security ---
# A daemon on a non-loopback address without TLS refuses to start unless
# plaintext is asked for (common/credentials.h: MakeServerCredentials).

LISTEN_ENV = {"cccoord": "CCL_COORDINATOR_LISTEN", "ccworker": "CCL_LISTEN"}
LOOPBACK = re.compile(r"^(127\.[0-9.]+|localhost|\[::1\]|::1)(:|$)")


def truthy(value):
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def check_starts_secure(where, argv, env):
    """argv: the command and args of a container; env: its variables."""
    binary = os.path.basename(argv[0]) if argv else None
    if binary not in LISTEN_ENV:
        return
    def flag(name):
        for i, arg in enumerate(argv):
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        return None
    listen = flag("--listen") or env.get(LISTEN_ENV[binary]) or "127.0.0.1"
    if LOOPBACK.match(str(listen)):
        return
    tls = flag("--tls-cert") or env.get("CCL_TLS_CERT")
    insecure = "--insecure" in argv or truthy(env.get("CCL_INSECURE", ""))
    if not tls and not insecure:
        fail(where, f"{binary} listens on {listen} without TLS or "
             "CCL_INSECURE=1: it refuses to start (docs/security.md)")


# ---------------------------------------------------------------- schema ---
# A spec is: a type name ("str", "int", "bool", "intstr", "quantity",
# "strmap" for string-to-string maps, "quantitymap" for resource lists), a
# dict of fields (a leading "!" marks a required one), or ["list", spec].

STRMAP = "strmap"

OBJECT_META = {
    "!name": "str", "namespace": "str", "labels": STRMAP,
    "annotations": STRMAP,
}
TEMPLATE_META = {"labels": STRMAP, "annotations": STRMAP}
LABEL_SELECTOR = {"matchLabels": STRMAP}
PROBE = {
    "grpc": {"!port": "int", "service": "str"},
    "httpGet": {"!port": "intstr", "path": "str", "scheme": "str"},
    "tcpSocket": {"!port": "intstr"},
    "exec": {"command": ["list", "str"]},
    "initialDelaySeconds": "int", "periodSeconds": "int",
    "timeoutSeconds": "int", "failureThreshold": "int",
    "successThreshold": "int", "terminationGracePeriodSeconds": "int",
}
ENV_VAR = {
    "!name": "str", "value": "str",
    "valueFrom": {
        "fieldRef": {"!fieldPath": "str", "apiVersion": "str"},
        "configMapKeyRef": {"!name": "str", "!key": "str", "optional": "bool"},
        "secretKeyRef": {"!name": "str", "!key": "str", "optional": "bool"},
    },
}
RESOURCES = {"limits": "quantitymap", "requests": "quantitymap"}
CONTAINER = {
    "!name": "str", "!image": "str", "imagePullPolicy": "str",
    "command": ["list", "str"], "args": ["list", "str"],
    "env": ["list", ENV_VAR],
    "ports": ["list", {"!containerPort": "int", "name": "str",
                       "protocol": "str"}],
    "readinessProbe": PROBE, "livenessProbe": PROBE, "startupProbe": PROBE,
    "resources": RESOURCES,
    "securityContext": {
        "allowPrivilegeEscalation": "bool", "readOnlyRootFilesystem": "bool",
        "runAsNonRoot": "bool", "runAsUser": "int", "runAsGroup": "int",
        "capabilities": {"drop": ["list", "str"], "add": ["list", "str"]},
    },
    "volumeMounts": ["list", {"!name": "str", "!mountPath": "str",
                              "readOnly": "bool", "subPath": "str"}],
    "lifecycle": {"preStop": {"exec": {"command": ["list", "str"]}}},
}
VOLUME = {
    "!name": "str",
    "emptyDir": {"medium": "str", "sizeLimit": "quantity"},
    "configMap": {"!name": "str", "defaultMode": "int",
                  "items": ["list", {"!key": "str", "!path": "str"}]},
    "secret": {"!secretName": "str", "defaultMode": "int",
               "optional": "bool",
               "items": ["list", {"!key": "str", "!path": "str",
                                  "mode": "int"}]},
}
POD_SPEC = {
    "!containers": ["list", CONTAINER],
    "initContainers": ["list", CONTAINER],
    "restartPolicy": "str", "terminationGracePeriodSeconds": "int",
    "serviceAccountName": "str", "nodeSelector": STRMAP,
    "hostNetwork": "bool", "dnsPolicy": "str",
    "securityContext": {"runAsNonRoot": "bool", "runAsUser": "int",
                        "runAsGroup": "int", "fsGroup": "int"},
    "tolerations": ["list", {"key": "str", "operator": "str",
                             "value": "str", "effect": "str"}],
    "volumes": ["list", VOLUME],
}
POD_TEMPLATE = {"metadata": TEMPLATE_META, "!spec": POD_SPEC}

KINDS = {
    ("apps/v1", "Deployment"): {
        "!spec": {"replicas": "int", "!selector": LABEL_SELECTOR,
                  "!template": POD_TEMPLATE,
                  "strategy": {"type": "str"}},
    },
    ("apps/v1", "StatefulSet"): {
        "!spec": {"replicas": "int", "!selector": LABEL_SELECTOR,
                  "!serviceName": "str", "podManagementPolicy": "str",
                  "!template": POD_TEMPLATE,
                  "updateStrategy": {"type": "str"}},
    },
    ("v1", "Service"): {
        "!spec": {"selector": STRMAP, "clusterIP": "str", "type": "str",
                  "publishNotReadyAddresses": "bool",
                  "!ports": ["list", {"!port": "int", "name": "str",
                                      "targetPort": "intstr",
                                      "protocol": "str",
                                      "appProtocol": "str"}]},
    },
    ("v1", "Namespace"): {},
    ("v1", "ConfigMap"): {"data": STRMAP},
    ("batch/v1", "Job"): {
        "!spec": {"backoffLimit": "int", "activeDeadlineSeconds": "int",
                  "ttlSecondsAfterFinished": "int", "completions": "int",
                  "parallelism": "int", "!template": POD_TEMPLATE},
    },
}

QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check(where, value, spec):
    if isinstance(spec, list):
        if not isinstance(value, list):
            return fail(where, f"expected a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            check(f"{where}[{i}]", item, spec[1])
        return
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return fail(where, f"expected a mapping, got {value!r}")
        allowed = {k.lstrip("!"): v for k, v in spec.items()}
        for key in spec:
            if key.startswith("!") and key[1:] not in value:
                fail(where, f"missing required field '{key[1:]}'")
        for key, item in value.items():
            if key not in allowed:
                fail(f"{where}.{key}", "unknown field")
            else:
                check(f"{where}.{key}", item, allowed[key])
        return
    ok = {
        "str": lambda v: isinstance(v, str),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "intstr": lambda v: isinstance(v, (int, str)) and
        not isinstance(v, bool),
        "quantity": lambda v: (isinstance(v, int) and
                               not isinstance(v, bool)) or
        (isinstance(v, str) and QUANTITY.match(v)),
        STRMAP: lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
        "quantitymap": lambda v: isinstance(v, dict) and all(
            isinstance(x, int) or (isinstance(x, str) and QUANTITY.match(x))
            for x in v.values()),
    }[spec](value)
    if not ok:
        fail(where, f"{value!r} is not a valid {spec}")


def check_object(source, obj):
    if not isinstance(obj, dict):
        return fail(source, "a document is not a mapping")
    key = (obj.get("apiVersion"), obj.get("kind"))
    where = f"{source}:{key[1]}/{(obj.get('metadata') or {}).get('name')}"
    if key not in KINDS:
        return fail(where, f"unexpected apiVersion/kind {key}")
    spec = dict(KINDS[key])
    spec.update({"!apiVersion": "str", "!kind": "str",
                 "!metadata": OBJECT_META})
    check(where, obj, spec)
    name = (obj.get("metadata") or {}).get("name", "")
    if not NAME.match(str(name)):
        fail(where, f"name '{name}' is not a DNS-1123 label")


# ------------------------------------------------------------ k8s wiring ---

def containers(obj):
    return obj["spec"]["template"]["spec"]["containers"]


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def check_wiring(source, objects):
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    for kind in ("Deployment", "StatefulSet"):
        for name, obj in by_kind.get(kind, {}).items():
            where = f"{source}:{kind}/{name}"
            selector = obj["spec"]["selector"]["matchLabels"]
            labels = obj["spec"]["template"].get("metadata", {}).get(
                "labels", {})
            if any(labels.get(k) != v for k, v in selector.items()):
                fail(where, "selector does not match the pod labels")
            for c in containers(obj):
                ports = {p["containerPort"] for p in c.get("ports", [])}
                tls = bool(env_of(c).get("CCL_TLS_CERT"))
                for probe in ("readinessProbe", "livenessProbe"):
                    p = c.get(probe)
                    if tls:
                        command = (p or {}).get("exec", {}).get("command", [])
                        if not p or "health" not in command:
                            fail(where, f"{c['name']}: a TLS server needs an "
                                 f"exec {probe} running `ccctl health` (the "
                                 "kubelet's gRPC probe is plaintext only)")
                    elif not p or "grpc" not in p:
                        fail(where, f"{c['name']}: no grpc {probe}")
                    elif p["grpc"]["port"] not in ports:
                        fail(where, f"{probe} port not a container port")
                live = c.get("livenessProbe", {})
                service = live.get("grpc", {}).get("service")
                command = live.get("exec", {}).get("command", [])
                if "--service" in command[:-1]:
                    service = command[command.index("--service") + 1]
                if service != "liveness":
                    fail(where, "liveness must ask service 'liveness' (the "
                         "readiness one is NOT_SERVING while joining)")
                drain = int(env_of(c).get("CCL_DRAIN_MS") or 0)
                grace = obj["spec"]["template"]["spec"].get(
                    "terminationGracePeriodSeconds", 30)
                if drain / 1000 + 5 > grace:
                    fail(where, f"terminationGracePeriodSeconds {grace} too "
                         f"short for CCL_DRAIN_MS {drain} plus shutdown")
    for name, svc in by_kind.get("Service", {}).items():
        selected = [o for k in ("Deployment", "StatefulSet")
                    for o in by_kind.get(k, {}).values()
                    if all(o["spec"]["template"]["metadata"]["labels"].get(a)
                           == b for a, b in svc["spec"]["selector"].items())]
        if not selected:
            fail(f"{source}:Service/{name}", "selects no workload")
    sts = by_kind.get("StatefulSet", {}).get("ccworker")
    coord = by_kind.get("Deployment", {}).get("cccoord")
    if not sts or not coord:
        return fail(source, "needs StatefulSet/ccworker and Deployment/cccoord")
    where = f"{source}:StatefulSet/ccworker"
    if sts["spec"].get("podManagementPolicy") != "Parallel":
        fail(where, "podManagementPolicy must be Parallel (the world forms "
             "only when every rank is up)")
    headless = by_kind.get("Service", {}).get(sts["spec"]["serviceName"])
    if not headless or headless["spec"].get("clusterIP") != "None":
        fail(where, "serviceName must name a headless Service")
    elif not headless["spec"].get("publishNotReadyAddresses"):
        fail(where, "the headless Service must publish not-ready addresses")
    world = env_of(containers(coord)[0]).get("CCL_WORLD_SIZE")
    if str(sts["spec"].get("replicas")) != str(world):
        fail(source, f"StatefulSet replicas {sts['spec'].get('replicas')} != "
             f"coordinator CCL_WORLD_SIZE {world}")
    worker = containers(sts)[0]
    env = env_of(worker)
    if worker.get("command") != ["ccworker"]:
        fail(where, "the worker container must run ccworker")
    if env.get("CCL_RANK_FROM_HOSTNAME") != "true":
        fail(where, "rank must come from the pod ordinal")
    if not str(env.get("CCL_LISTEN", "")).startswith("0.0.0.0:"):
        fail(where, "the worker must listen on 0.0.0.0 in a pod")
    gpus = worker.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if str(env.get("CCL_DEVICE", "")).startswith("cuda"):
        if str(gpus) != "1":
            fail(where, "a cuda worker must ask for nvidia.com/gpu: 1")
    elif gpus is not None:
        fail(where, "a cpu worker asks for a GPU")


def check_container_security(where, container):
    argv = (container.get("command") or []) + (container.get("args") or [])
    env = env_of(container)
    check_starts_secure(f"{where}:{container['name']}", argv, env)
    mounts = [m["mountPath"].rstrip("/") + "/"
              for m in container.get("volumeMounts", [])]
    for name, value in env.items():
        if (name.endswith("_FILE") or name in (
                "CCL_TLS_CERT", "CCL_TLS_KEY", "CCL_TLS_CA")) and \
                name.startswith("CCL_") and value:
            if not any(value.startswith(m) for m in mounts):
                fail(f"{where}:{container['name']}", f"{name}={value} is not "
                     "under a volumeMount")


def validate_k8s(root):
    kubectl = tool("KUBECTL", "kubectl")
    k8s = os.path.join(root, "deploy", "k8s")
    rendered = {}
    for overlay in ("cpu", "gpu"):
        path = os.path.join(k8s, "overlays", overlay)
        result = run([kubectl, "kustomize", path])
        if result.returncode != 0:
            fail(f"kustomize {overlay}", result.stderr.strip())
            continue
        objects = [o for o in yaml.safe_load_all(result.stdout) if o]
        rendered[overlay] = objects
        for obj in objects:
            check_object(f"overlay {overlay}", obj)
            if obj.get("kind") in ("Deployment", "StatefulSet", "Job"):
                for c in containers(obj):
                    check_env_names(root, f"overlay {overlay}:{c['name']}",
                                    env_of(c))
                    check_container_security(f"overlay {overlay}", c)
        try:
            check_wiring(f"overlay {overlay}", objects)
        except (KeyError, TypeError, IndexError) as e:
            fail(f"overlay {overlay}", f"wiring not checkable: missing {e}")
        print(f"k8s: overlay {overlay}: {len(objects)} objects")
    gpu = rendered.get("gpu", [])
    if not any(o["kind"] == "StatefulSet" and env_of(containers(o)[0]).get(
            "CCL_DEVICE", "").startswith("cuda") for o in gpu):
        fail("overlay gpu", "workers do not use a cuda device")
    jobs = os.path.join(k8s, "jobs")
    for name in sorted(os.listdir(jobs)):
        with open(os.path.join(jobs, name)) as f:
            objects = [o for o in yaml.safe_load_all(f) if o]
        for obj in objects:
            check_object(f"jobs/{name}", obj)
            if obj.get("kind") == "Job":
                for c in containers(obj):
                    check_env_names(root, f"jobs/{name}", env_of(c))
                    check_container_security(f"jobs/{name}", c)
        print(f"k8s: jobs/{name}: {len(objects)} objects")


# --------------------------------------------------------------- compose ---

def validate_compose(root):
    compose = tool("DOCKER_COMPOSE", "docker-compose")
    path = os.path.join(root, "deploy", "compose", "compose.yaml")
    for profile in ([], ["--profile", "cpu"], ["--profile", "gpu"],
                    ["--profile", "ctl"]):
        result = run([compose, "-f", path, *profile, "config", "-q"])
        if result.returncode != 0:
            fail(f"compose {' '.join(profile)}", result.stderr.strip())
    result = run([compose, "-f", path, "config"])
    if result.returncode != 0:
        return
    services = yaml.safe_load(result.stdout)["services"]
    for name, svc in services.items():
        check_env_names(root, f"compose:{name}", svc.get("environment") or {})
        command = svc.get("command") or svc.get("entrypoint") or []
        binary = command[0] if command else None
        if binary in ("cccoord", "ccworker") and not svc.get("healthcheck"):
            fail(f"compose:{name}", "a daemon without a healthcheck")
        check_starts_secure(f"compose:{name}", command,
                            svc.get("environment") or {})
        profiles = svc.get("profiles", [])
        if "gpu" in profiles:
            devices = (svc.get("deploy", {}).get("resources", {})
                       .get("reservations", {}).get("devices", []))
            if (len(devices) != 1 or devices[0].get("driver") != "nvidia" or
                    len(devices[0].get("device_ids", [])) != 1 or
                    "gpu" not in devices[0].get("capabilities", [])):
                fail(f"compose:{name}", "a GPU worker must reserve exactly "
                     "one nvidia GPU")
            if not str(svc["environment"].get("CCL_DEVICE")).startswith("cuda"):
                fail(f"compose:{name}", "a GPU worker must use a cuda device")
    for name, svc in services.items():
        # The stack is plaintext: nothing published beyond the host's
        # loopback unless the operator opts in (CCL_PUBLISH_ADDRESS).
        for port in svc.get("ports", []):
            text = port if isinstance(port, str) else (
                f"{port.get('host_ip', '')}:{port.get('published')}")
            if not str(text).startswith("127.0.0.1:"):
                fail(f"compose:{name}", f"port {text} is published beyond "
                     "127.0.0.1 by default")
    secure = os.path.join(root, "deploy", "compose", "compose.secure.yaml")
    if os.path.exists(secure):
        result = run([compose, "-f", path, "-f", secure, "--profile", "cpu",
                      "--profile", "gpu", "--profile", "ctl", "config"])
        if result.returncode != 0:
            fail("compose.secure.yaml", result.stderr.strip())
        else:
            for name, svc in yaml.safe_load(result.stdout)["services"].items():
                env = svc.get("environment") or {}
                check_env_names(root, f"compose.secure:{name}", env)
                command = svc.get("command") or svc.get("entrypoint") or []
                if command and command[0] in ("cccoord", "ccworker"):
                    if truthy(env.get("CCL_INSECURE", "")) or \
                            not env.get("CCL_TLS_CERT"):
                        fail(f"compose.secure:{name}", "a daemon without TLS")
                    check_starts_secure(f"compose.secure:{name}", command, env)
    for profile in ("cpu", "gpu"):
        workers = [s for s in services.values()
                   if profile in s.get("profiles", [])]
        ranks = sorted(int(s["environment"]["CCL_RANK"]) for s in workers)
        if ranks != list(range(len(workers))):
            fail(f"compose profile {profile}", f"ranks {ranks} are not 0..N-1")
    print(f"compose: {len(services)} services")


# ---------------------------------------------------------------- docker ---

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY",
                "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD",
                "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def parse_dockerfile(text):
    """Returns [(line_number, INSTRUCTION, arguments)], continuations joined
    and comments dropped, as the Dockerfile frontend reads them."""
    out, pending, start = [], "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comments inside a continued instruction are dropped
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        pending += stripped
        word, _, args = pending.partition(" ")
        out.append((start, word, args.strip()))
        pending = ""
    if pending:
        out.append((start, "<eof>", pending))
    return out


def dockerignore_patterns(root):
    path = os.path.join(root, ".dockerignore")
    if not os.path.exists(path):
        fail(".dockerignore", "missing")
        return []
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")]


def ignored(relpath, patterns):
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        parts = relpath.split("/")
        hit = any(fnmatch.fnmatch("/".join(parts[:i]), pattern) or
                  fnmatch.fnmatch("/".join(parts[:i]), pattern.lstrip("*/"))
                  for i in range(1, len(parts) + 1))
        if hit:
            result = not negate
    return result


def lint_dockerfile(root, path, shellcheck, patterns):
    name = os.path.relpath(path, root)
    with open(path) as f:
        instructions = parse_dockerfile(f.read())
    stages, user, shell = [], None, ["/bin/sh", "-c"]
    build_args = {}
    for number, word, args in instructions:
        where = f"{name}:{number}"
        if word != word.upper() or word not in INSTRUCTIONS:
            fail(where, f"unknown instruction '{word}'")
            continue
        if word == "ARG":
            name_, _, default = args.partition("=")
            build_args[name_] = default.strip('"')
        elif word == "FROM":
            parts = args.split()
            image = parts[0]
            # A variable stands for its ARG default: FROM ${IMAGE} pins a
            # tag when the default does.
            resolved = re.sub(r"\$\{(\w+)\}",
                              lambda m: build_args.get(m.group(1)) or "X",
                              image)
            if image not in stages and ":" not in resolved:
                fail(where, f"FROM {image}: pin a tag (DL3006)")
            if resolved.endswith(":latest"):
                fail(where, "FROM ...:latest (DL3007)")
            for var in re.findall(r"\$\{(\w+)\}", image):
                if var not in build_args:
                    fail(where, f"FROM uses ${{{var}}} with no ARG before it")
            if len(parts) == 3 and parts[1].upper() == "AS":
                stages.append(parts[2])
            user = None
        elif word == "USER":
            user = args.split(":")[0]
        elif word == "SHELL":
            shell = json.loads(args)
        elif word in ("CMD", "ENTRYPOINT"):
            try:
                if not isinstance(json.loads(args), list):
                    raise ValueError
            except ValueError:
                fail(where, f"{word} in exec (JSON) form (DL3025)")
        elif word in ("COPY", "ADD"):
            if word == "ADD":
                fail(where, "COPY, not ADD, for local files (DL3020)")
            parts = shlex.split(args)
            flags = [p for p in parts if p.startswith("--")]
            paths = [p for p in parts if not p.startswith("--")]
            source_stage = None
            for flag in flags:
                if flag.startswith("--from="):
                    source_stage = flag.split("=", 1)[1]
                    if source_stage not in stages:
                        fail(where, f"--from={source_stage}: no such stage "
                             "before this one")
            if source_stage is None:
                for src in paths[:-1]:
                    if src == ".":
                        continue
                    if not os.path.exists(os.path.join(root, src)):
                        fail(where, f"COPY source {src} does not exist")
                    elif ignored(src, patterns):
                        fail(where, f"COPY source {src} is in .dockerignore")
        elif word == "RUN":
            body = args
            if "apt-get install" in body:
                if "-y" not in body.split():
                    fail(where, "apt-get install without -y (DL3014)")
                if "--no-install-recommends" not in body:
                    fail(where, "apt-get install without "
                         "--no-install-recommends (DL3015)")
                if "rm -rf /var/lib/apt/lists" not in body:
                    fail(where, "apt lists not removed in the same RUN "
                         "(DL3009)")
            if "apt-get upgrade" in body or "dist-upgrade" in body:
                fail(where, "apt-get upgrade in an image (DL3005)")
            if re.search(r"(^|[;&|]\s*)cd\s", body):
                fail(where, "cd in RUN; use WORKDIR (DL3003)")
            if "|" in body.replace("||", "") and "pipefail" not in " ".join(
                    shell):
                fail(where, "a pipe in RUN without SHELL pipefail (DL4006)")
            script = f"#!{shell[0]}\n{body}\n"
            shell_name = os.path.basename(shell[0])
            result = run([shellcheck, "-s",
                          "bash" if shell_name == "bash" else "sh", "-"],
                         input=script)
            if result.returncode != 0:
                fail(where, "shellcheck:\n" + result.stdout.strip())
    if not stages:
        fail(name, "not a multi-stage build")
    if user is None or user in ("root", "0"):
        fail(name, "the final stage must switch to a non-root USER (DL3002)")
    print(f"docker: {name}: {len(instructions)} instructions, "
          f"{len(stages) + 1} stages")


def shared_build_steps(path):
    """The instructions of stage `build` up to its first cmake RUN."""
    with open(path) as f:
        instructions = parse_dockerfile(f.read())
    steps, inside = [], False
    for _, word, args in instructions:
        if word == "FROM":
            if inside:
                break
            inside = args.split()[-1] == "build"
        if inside:
            steps.append((word, args))
            if word == "RUN" and args.startswith("cmake "):
                return steps
    return None


def check_shared_build(root):
    # Dockerfile.cuda-debian starts as Dockerfile.cpu does, so that the layer
    # cache compiles the CUDA-independent part once for both images.
    cpu = os.path.join(root, "docker", "Dockerfile.cpu")
    cuda = os.path.join(root, "docker", "Dockerfile.cuda-debian")
    if not os.path.exists(cuda):
        return
    a, b = shared_build_steps(cpu), shared_build_steps(cuda)
    if a is None or a != b:
        fail("docker/Dockerfile.cuda-debian", "its build stage no longer "
             "starts with Dockerfile.cpu's (FROM to the first cmake RUN, "
             "identical), so the CPU image's compile is not reused")


def validate_docker(root):
    shellcheck = tool("SHELLCHECK", "shellcheck")
    patterns = dockerignore_patterns(root)
    docker = os.path.join(root, "docker")
    files = sorted(f for f in os.listdir(docker) if f.startswith("Dockerfile"))
    if len(files) < 2:
        fail("docker/", "expected a CPU and a CUDA Dockerfile")
    for name in files:
        lint_dockerfile(root, os.path.join(docker, name), shellcheck, patterns)
    check_shared_build(root)
    for name in sorted(os.listdir(docker)):
        if name.endswith(".sh"):
            result = run([shellcheck, os.path.join(docker, name)])
            if result.returncode != 0:
                fail(f"docker/{name}", "shellcheck:\n" + result.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--only", choices=("compose", "k8s", "docker"),
                        help="check one part (all by default)")
    args = parser.parse_args()
    for part, check_part in (("compose", validate_compose),
                             ("k8s", validate_k8s),
                             ("docker", validate_docker)):
        if args.only in (None, part):
            check_part(args.root)
    if FAILURES:
        print(f"\n{len(FAILURES)} problem(s):", file=sys.stderr)
        for line in FAILURES:
            print(f"  {line}", file=sys.stderr)
        return 1
    print("deploy: all manifests valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
