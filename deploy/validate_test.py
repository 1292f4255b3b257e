#!/usr/bin/env python3
"""Shows that deploy/validate.py catches what it claims to: each case breaks
one thing in a copy of docker/ and deploy/ and expects validate.py to fail
with a message naming it. The unbroken copy must pass first."""

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (file, old text, new text, expected fragment of the failure)
CASES = [
    ("deploy/k8s/base/worker.yaml", "          readinessProbe:",
     "          readinesProbe:", "readinesProbe: unknown field"),
    ("deploy/k8s/base/coordinator.yaml", "          image: ccl-service\n",
     "", "missing required field 'image'"),
    ("deploy/k8s/base/worker.yaml", "periodSeconds: 2",
     "periodSeconds: two", "is not a valid int"),
    ("deploy/k8s/base/worker.yaml", "podManagementPolicy: Parallel",
     "podManagementPolicy: OrderedReady", "must be Parallel"),
    ("deploy/k8s/base/worker.yaml", "publishNotReadyAddresses: true",
     "publishNotReadyAddresses: false", "not-ready addresses"),
    ("deploy/k8s/overlays/cpu/world-size.yaml", "replicas: 4", "replicas: 3",
     "!= coordinator CCL_WORLD_SIZE"),
    ("deploy/k8s/overlays/gpu/gpu-worker.yaml", "nvidia.com/gpu: 1",
     "nvidia.com/gpu: 2", "nvidia.com/gpu: 1"),
    ("deploy/compose/compose.yaml", "driver: nvidia", "driver: nvidiaa",
     "exactly one nvidia GPU"),
    ("deploy/compose/compose.yaml", "      CCL_RANK: \"1\"\n      CCL_ADVERTISE_HOST: cpu-worker-1",
     "      CCL_RANK: \"2\"\n      CCL_ADVERTISE_HOST: cpu-worker-1",
     "are not 0..N-1"),
    ("deploy/compose/compose.yaml", "services:", "services:\n  bad: [",
     "compose"),
    ("deploy/k8s/base/worker.yaml", "- name: CCL_METRICS_PORT",
     "- name: CCL_METRIC_PORT", "CCL_METRIC_PORT is not read"),
    ("deploy/compose/compose.yaml", "  CCL_DRAIN_MS:", "  CCL_DRAIN:",
     "CCL_DRAIN is not read"),
    ("deploy/compose/compose.yaml", "  CCL_INSECURE: \"1\"",
     "  CCL_INSECURE: \"0\"", "refuses to start"),
    ("deploy/k8s/base/worker.yaml",
     "            - name: CCL_INSECURE\n              value: \"1\"\n", "",
     "refuses to start"),
    ("deploy/k8s/base/coordinator.yaml", "secretName: ccl-tokens",
     "name: ccl-tokens", "missing required field 'secretName'"),
    ("deploy/k8s/base/worker.yaml", "mountPath: /etc/ccl/tokens",
     "mountPath: /etc/ccl/secrets", "is not under a volumeMount"),
    ("deploy/k8s/base/worker.yaml", "            - name: CCL_INSECURE\n",
     "            - name: CCL_TLS_CERT\n              value: "
     "/etc/ccl/tokens/tls.crt\n            - name: CCL_INSECURE\n",
     "gRPC probe is plaintext only"),
    ("deploy/k8s/jobs/ccctl-experiment.yaml", "- name: CCL_TOKEN_FILE",
     "- name: CCL_TOKENFILE", "CCL_TOKENFILE is not read"),
    ("docker/Dockerfile.cpu", "USER 10001:10001", "USER root",
     "non-root USER"),
    ("docker/Dockerfile.cpu", "COPY --from=build /out/bin/",
     "COPY --from=builder /out/bin/", "no such stage"),
    ("docker/Dockerfile.cpu", "FROM debian:12-slim AS build",
     "FROM debian AS build", "pin a tag"),
    ("docker/Dockerfile.cpu", "USER 10001:10001",
     "RUN test $UNQUOTED = 1\nUSER 10001:10001", "shellcheck"),
    ("docker/Dockerfile.cuda", "CMD [\"ccworker\", \"--help\"]",
     "CMD ccworker --help", "exec (JSON) form"),
    ("docker/Dockerfile.cuda-debian", "--target cccoord cchostagent ccctl\n",
     "--target cccoord ccctl\n", "no longer starts with Dockerfile.cpu's"),
    ("docker/Dockerfile.cuda-debian", "ARG CUDA_TOOLKIT_IMAGE=ccl-cuda-toolkit:13.0",
     "ARG CUDA_TOOLKIT_IMAGE=ccl-cuda-toolkit", "pin a tag"),
    ("deploy/compose/compose.yaml", "${CCL_PUBLISH_ADDRESS:-127.0.0.1}:${CCL_METRICS",
     "${CCL_METRICS", "published beyond 127.0.0.1"),
    ("deploy/compose/compose.secure.yaml", "  CCL_TLS_CERT: /run/secrets/ccl_cert\n",
     "", "a daemon without TLS"),
]


def copy_tree(dest):
    for name in ("deploy", "docker"):
        shutil.copytree(os.path.join(ROOT, name), os.path.join(dest, name))
    for path in ("server/main.cc", "coordinator/main.cc",
                 "common/daemon_flags.cc", "client/ccctl/common.cc",
                 "common/credentials.cc"):
        os.makedirs(os.path.dirname(os.path.join(dest, path)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, path), os.path.join(dest, path))
    shutil.copy(os.path.join(ROOT, ".dockerignore"), dest)
    shutil.copy(os.path.join(ROOT, "CMakeLists.txt"), dest)


def validate(root, only=None):
    args = [sys.executable, os.path.join(root, "deploy", "validate.py"),
            "--root", root]
    return subprocess.run(args + (["--only", only] if only else []),
                          capture_output=True, text=True)


def part_of(path):
    return ("compose" if "/compose/" in path else
            "k8s" if "/k8s/" in path else "docker")


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        clean = os.path.join(work, "clean")
        copy_tree(clean)
        result = validate(clean)
        if result.returncode != 0:
            print(f"the unbroken copy fails:\n{result.stderr}")
            return 1
        for i, (path, old, new, expect) in enumerate(CASES):
            root = os.path.join(work, f"case{i}")
            copy_tree(root)
            target = os.path.join(root, path)
            with open(target) as f:
                text = f.read()
            if old not in text:
                print(f"case {i}: '{old}' not in {path} (update the case)")
                failures += 1
                continue
            with open(target, "w") as f:
                f.write(text.replace(old, new, 1))
            result = validate(root, part_of(path))
            caught = result.returncode != 0 and expect in result.stderr
            print(f"{'caught' if caught else 'MISSED'}: {path}: "
                  f"{old.strip()!r} -> {new.strip()!r}")
            if not caught:
                failures += 1
                print(result.stdout + result.stderr)
    print(f"{len(CASES) - failures} caught, {failures} missed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
