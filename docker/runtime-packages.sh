#!/bin/sh
# Prints the Debian packages that own the shared libraries the given binaries
# load, one per line, so that the runtime stage installs exactly those (the
# package names differ between releases, e.g. the t64 renames, so they are
# derived rather than listed by hand).
#
#   runtime-packages.sh [--copy-unowned DIR] BINARY...
#
# A library that no package owns is an error, since the runtime stage would
# lack it; with --copy-unowned DIR it is copied into DIR instead (under the
# name the binaries load), for the runtime stage to carry: the CUDA runtime
# and NCCL of a toolkit unpacked by hand (docker/cuda-toolkit-image.sh).
set -eu
copy_to=""
if [ "${1:-}" = "--copy-unowned" ]; then
  copy_to=$2
  shift 2
fi
libraries=$(for binary in "$@"; do
  ldd "$binary" | awk '/=> \// { print $3 }'
done | sort -u)
packages=""
for library in $libraries; do
  # dpkg -S wants the path as the package installed it; /lib is a link to
  # /usr/lib on merged-/usr systems, so try the real path too.
  if owner=$(dpkg -S "$library" 2>/dev/null) ||
     owner=$(dpkg -S "$(readlink -f "$library")" 2>/dev/null); then
    packages="$packages
${owner%%:*}"
  elif [ -n "$copy_to" ]; then
    mkdir -p "$copy_to"
    cp -L "$library" "$copy_to/"
    echo "runtime-packages: carrying $library (no package owns it)" >&2
  else
    echo "runtime-packages: no package owns $library" >&2
    exit 1
  fi
done
printf '%s\n' "$packages" | sed '/^$/d' | sort -u
