#!/bin/sh
# Prints the Debian/Ubuntu packages that own the shared libraries the given
# binaries load, one per line, so that the runtime stage installs exactly
# those (the library package names differ between releases, e.g. the t64
# renames, so they are derived rather than listed by hand).
set -eu
for binary in "$@"; do
  ldd "$binary" | awk '/=> \// { print $3 }'
done | sort -u | while read -r library; do
  # dpkg -S wants the path as the package installed it; /lib is a link to
  # /usr/lib on merged-/usr systems, so try the real path too.
  dpkg -S "$library" 2>/dev/null ||
    dpkg -S "$(readlink -f "$library")" 2>/dev/null ||
    echo "runtime-packages: no package owns $library" >&2
done | cut -d: -f1 | sort -u
