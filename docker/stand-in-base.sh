#!/bin/sh
# Makes a stand-in for the debian:12-slim base image where it cannot be
# pulled: a minbase Debian 12 (bookworm) from Debian's archive, imported
# under that tag, with the package sources and the apt cleaning of the
# official image, so that the Dockerfiles build on it unchanged.
#
#   docker/stand-in-base.sh [TAG]        (default debian:12-slim; as root)
#
# DEBIAN_MIRROR overrides the archive (default http://deb.debian.org/debian).
set -eu
tag=${1:-debian:12-slim}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
docker=${DOCKER:-docker}
root=$(mktemp -d /tmp/stand-in-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  cat "$root.log" >&2
  rm -f "$root.log"
  exit 1
}
rm -f "$root.log"
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
# As in the official image: downloaded packages are deleted after every
# install, so an image layer never keeps them.
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'CLEAN'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
CLEAN
# And, as there, no documentation or translations, now or from later installs
# (the copyright files stay).
cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'EXCLUDE'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EXCLUDE
find "$root/usr/share/doc" -type f ! -name copyright -delete
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/locale/* "$root"/usr/share/lintian/*
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
  "$root"/var/lib/apt/lists/* "$root"/var/log/* "$root"/tmp/*
tar -C "$root" --numeric-owner -c . |
  "$docker" import --change 'CMD ["bash"]' - "$tag" >/dev/null
echo "stand-in-base: $tag from debootstrap --variant=minbase bookworm"
