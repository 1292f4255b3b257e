#!/usr/bin/env python3
"""Fails when an #include points the wrong way between the project's rooms,
or when a logic room includes gRPC, generated protos or CUDA.

The rooms and what each may include (DESIGN.md: every include points down,
rpc -> core -> comm -> cuda/common; logic targets carry no gRPC; only the
CUDA rooms see CUDA):

  python3 scripts/check_layers.py [ROOT]     # the tree at ROOT (default: .)
  python3 scripts/check_layers.py --self-test
"""
import os
import re
import sys
import tempfile

# Room (path prefix, most specific first) -> project include prefixes it
# may use. Includes of other libraries are checked by FORBIDDEN below.
ALLOWED = [
    ("server/main.cc", ["common/", "server/", "coordinator/client/",
                        "ccl/v1/", "CLI/", "spdlog/"]),
    ("server/rpc/", ["common/", "server/rpc/", "server/core/", "server/comm/",
                     "coordinator/client/", "coordinator/heartbeat_policy.h",
                     "ccl/v1/", "spdlog/"]),
    # Membership staggers its first heartbeat as the coordinator's policy
    # says (a header of constants and arithmetic).
    ("server/core/", ["common/", "server/core/", "server/check/",
                      "server/comm/", "server/cuda/", "spdlog/",
                      "coordinator/heartbeat_policy.h"]),
    ("server/check/", ["common/", "server/check/", "server/comm/",
                       "server/cuda/"]),
    ("server/comm/", ["common/", "server/comm/", "server/cuda/", "gloo/"]),
    ("server/cuda/", ["common/", "server/cuda/"]),
    ("coordinator/client/", ["common/", "coordinator/client/", "ccl/v1/"]),
    ("coordinator/", ["common/", "coordinator/", "ccl/v1/", "CLI/",
                      "spdlog/"]),
    # The client library's public headers speak plain types; its internal/
    # room holds the gRPC side; ccctl uses the public headers alone (only
    # `ccctl health` speaks gRPC itself, to any daemon's health service).
    ("client/cluster_client.h", ["common/", "client/types.h"]),
    ("client/types.", ["common/", "client/types.h"]),
    ("client/internal/", ["common/", "client/", "coordinator/client/",
                          "ccl/v1/"]),
    ("client/ccctl/health.cc", ["common/", "client/ccctl/", "client/types.h",
                                "client/cluster_client.h", "grpc/health/",
                                "CLI/", "nlohmann/"]),
    ("client/ccctl/", ["common/", "client/ccctl/", "client/types.h",
                       "client/cluster_client.h", "CLI/", "nlohmann/",
                       "yaml-cpp/"]),
    ("client/", ["common/", "client/", "coordinator/client/", "ccl/v1/",
                 "grpc/health/", "CLI/", "nlohmann/", "yaml-cpp/",
                 "google/protobuf/"]),
    ("common/", ["common/", "ccl/v1/", "CLI/", "spdlog/"]),
]

GRPC = re.compile(r'^(grpcpp?/|grpc/|ccl/v1/|google/protobuf/)')
CUDA = re.compile(r'^(cuda_[a-z0-9_]*\.h|cuda\.h|nccl\.h|cuda/)')

# Rooms whose files may not include gRPC or generated protos: the logic,
# unit-tested without a server. The adapters and clients are named apart.
NO_GRPC = ["server/core/", "server/comm/", "server/check/", "server/cuda/",
           "coordinator/", "client/cluster_client.h", "client/types.",
           "client/ccctl/"]
# coordinator/request_limits validates the adapter's proto requests before
# the core sees them (as server/rpc/request_limits does): adapter code. The
# host agent's service and daemon are its adapter; its batcher is logic.
GRPC_OK = ["coordinator/client/", "coordinator/coordinator_service.",
           "coordinator/request_limits.", "coordinator/main.cc",
           "coordinator/host_agent/host_agent_service.",
           "coordinator/host_agent/main.cc", "client/ccctl/health.cc"]
# Only these see CUDA or NCCL headers.
CUDA_OK = ["server/cuda/", "server/comm/nccl/", "server/check/device_check_",
           "server/core/memory_cuda.cc"]
# common/ files that are logic (no gRPC) rather than gRPC plumbing.
COMMON_LOGIC = ["common/types.", "common/dtype.h", "common/element.",
                "common/timer_queue.", "common/metrics.", "common/logging.",
                "common/hostname_rank.", "common/process_safety.",
                "common/status_macros.h", "common/daemon_flags.",
                "common/unique_id_plan.h", "common/world_keys.h",
                "common/membership_types.h"]

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')
SOURCES = (".h", ".cc", ".cu")


def room_of(path):
    for prefix, allowed in ALLOWED:
        if path == prefix or path.startswith(prefix):
            return prefix, allowed
    return None, None


def check_file(root, path):
    room, allowed = room_of(path)
    if room is None:
        return []
    problems = []
    with open(os.path.join(root, path), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = match.group(1)
            where = f"{path}:{number}: #include {match.group(0).split(None, 1)[-1].strip()}"
            project = target.split("/")[0] in (
                "common", "server", "client", "coordinator")
            if project and not any(target.startswith(a) for a in allowed):
                problems.append(f"{where}: {room} may not include it "
                                f"(allowed: {', '.join(allowed)})")
            logic = any(path.startswith(r) for r in NO_GRPC) and not any(
                path.startswith(r) for r in GRPC_OK)
            logic = logic or any(path.startswith(c) for c in COMMON_LOGIC)
            if logic and GRPC.match(target):
                problems.append(f"{where}: logic code includes gRPC or a "
                                f"generated proto; that belongs in an adapter")
            if CUDA.match(target) and not any(
                    path.startswith(c) for c in CUDA_OK):
                problems.append(f"{where}: only {', '.join(CUDA_OK)} may "
                                f"include CUDA or NCCL")
    return problems


def check_tree(root):
    problems = []
    for top in ("common", "coordinator", "server", "client"):
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith(SOURCES):
                    rel = os.path.relpath(os.path.join(directory, name), root)
                    problems += check_file(root, rel)
    return problems


def self_test():
    """The check must be able to fail: a core file including the RPC room,
    a comm file including gRPC, a core file including CUDA, the client's
    public header including a proto, and ccctl reaching the client's
    internals."""
    cases = {
        "server/core/bad.cc": '#include "server/rpc/worker_service.h"\n',
        "server/comm/bad.cc": "#include <grpcpp/grpcpp.h>\n",
        "server/core/bad2.cc": "#include <cuda_runtime.h>\n",
        "server/core/good.cc": '#include "server/comm/communicator.h"\n',
        "client/types.h": '#include "ccl/v1/worker.pb.h"\n',
        "client/ccctl/bad.cc": '#include "client/internal/convert.h"\n',
        "client/ccctl/good.cc": '#include "client/cluster_client.h"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in cases.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)),
                        exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        problems = check_tree(root)
    flagged = {p.split(":")[0] for p in problems}
    expected = {"server/core/bad.cc", "server/comm/bad.cc",
                "server/core/bad2.cc", "client/types.h",
                "client/ccctl/bad.cc"}
    if flagged != expected:
        print(f"self-test: flagged {sorted(flagged)}, expected "
              f"{sorted(expected)}")
        return 1
    print("self-test: every planted violation caught, the clean file passed")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else "."
    problems = check_tree(root)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} include(s) break the layering")
        return 1
    print("layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
