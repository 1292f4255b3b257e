#!/usr/bin/env bash
# ctest console_browser_test: installs puppeteer-core (pinned by
# package-lock.json, from npm; no browser download) into the build tree once,
# then drives Debian's chromium against `ccctl console` (console_test.mjs).
# Usage: run.sh CCCTL_BINARY WORK_DIR   (screenshots land in WORK_DIR/screenshots)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ccctl=$1
work=$2
mkdir -p "$work"
# ESM resolves imports next to the script: the script, its package files
# and node_modules live together in the build tree.
if ! cmp -s "$here/package-lock.json" "$work/package-lock.json" ||
    [[ ! -d $work/node_modules/puppeteer-core ]]; then
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
cp "$here/console_test.mjs" "$work/"
exec node "$work/console_test.mjs" "$ccctl" "$work/screenshots"
