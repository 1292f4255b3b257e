#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need, only if any
# is missing.
# Usage: scripts/setup.sh [--build|--bench|--python]
#   --build   only what configuring and building needs (scripts/quickstart.sh)
#   --bench   adds python3-torch for bench/peers
#   --python  only what the Python client needs (scripts/install-python.sh)
set -euo pipefail

# The Python client (client/python, scripts/install-python.sh) and its tests.
python_packages=(
  python3 python3-grpcio python3-protobuf python3-numpy python3-pytest
  protobuf-compiler protobuf-compiler-grpc
)
packages=(
  build-essential cmake pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev
  libgloo-dev libcli11-dev libcpp-httplib-dev libspdlog-dev libyaml-cpp-dev nlohmann-json3-dev
)
if [[ "${1:-}" != "--build" ]]; then
  packages+=(
    libbenchmark-dev python3-yaml
    # Offline checks of deploy/ and docker/, promtool for the metrics test,
    # openssl for the TLS tests' certificates, ip and iptables for the chaos
    # tests' network namespaces and link cuts (without them those tests skip
    # their partitions).
    docker-compose prometheus shellcheck openssl iproute2 iptables
    "${python_packages[@]}"
  )
fi
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch python3-matplotlib)
elif [[ "${1:-}" == "--python" ]]; then
  packages=("${python_packages[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian's kubectl is in kubernetes-client; any kubectl already installed
# (it would conflict on /usr/bin/kubectl) does as well.
if [[ "${1:-}" != "--build" && "${1:-}" != "--python" ]]; then
  command -v kubectl >/dev/null || missing+=(kubernetes-client)
  # The console's browser test: Debian's chromium, driven by puppeteer-core
  # from npm under node. A node from elsewhere (NodeSource's carries its own
  # npm, and conflicts with Debian's npm) does as well.
  dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed" ||
    missing+=(chromium)
  command -v node >/dev/null || missing+=(nodejs)
  command -v npm >/dev/null || missing+=(npm)
fi
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
