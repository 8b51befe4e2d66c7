#!/bin/sh
# Build the OpenClaw plugin (dist/) and its tests (dist-test/); print the plugin folder.
#
# Used by `make openclaw-unit` and by the Python tests (tests/runtimes/test_openclaw_plugin.py),
# so both run the same compiled JavaScript. Idempotent and serialised:
# - node: the pinned Node 24 from scripts/node.sh (first on PATH, so npm's
#   scripts and tsc run on it);
# - npm ci only when package-lock.json changed since the last install
#   (node_modules/.smf-lock-sha256 records the lock's digest);
# - tsc unless the last build's record (node_modules/.smf-build-sha256: the digest
#   of every input, sources, tsconfigs and package files, and of every file it
#   wrote) matches both now: dist/ is never committed, so a stale one cannot hide a
#   change, and a build that has nothing to do rewrites nothing (tsc rewrites every
#   file, and an OpenClaw that another test process runs loads dist/ in place);
#   compiled files whose source is gone (moved or deleted) are removed first, so
#   nothing imports a module that no longer exists;
# - an exclusive flock on .build.lock: concurrent make/pytest runs wait.
# stdout carries exactly one line, the plugin folder; progress goes to stderr.
set -eu

HERE="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$("$HERE/scripts/node.sh")"
PATH="$BIN:$PATH"
export PATH

exec 8>>"$HERE/.build.lock"
flock -x 8

cd "$HERE"
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
have="$(cat node_modules/.smf-lock-sha256 2>/dev/null || true)"
if [ "$want" != "$have" ] || [ ! -d node_modules/@nats-io/transport-node ] || [ ! -x node_modules/.bin/tsc ]; then
  echo "build.sh: npm ci (package-lock.json changed or node_modules missing)" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
  echo "$want" >node_modules/.smf-lock-sha256
fi
# digest PATH...: one sha256 over the names and contents of the files under PATHs.
digest() {
  find "$@" -type f 2>/dev/null | LC_ALL=C sort | xargs -r sha256sum | sha256sum | cut -d' ' -f1
}
built() {
  echo "$(digest src test tsconfig.json tsconfig.test.json package.json package-lock.json) $(digest dist dist-test)"
}
if [ -f dist/index.js ] && [ "$(built)" = "$(cat node_modules/.smf-build-sha256 2>/dev/null || true)" ]; then
  echo "$HERE"
  exit 0
fi
# prune OUT SRC: drop OUT's compiled .js/.d.ts files that no SRC .ts file produces.
prune() {
  [ -d "$1" ] || return 0
  find "$1" -type f \( -name '*.js' -o -name '*.d.ts' \) | while IFS= read -r out; do
    stem="${out#"$1"/}"
    stem="${stem%.d.ts}"
    stem="${stem%.js}"
    [ -e "$2/$stem.ts" ] || rm -f "$out"
  done
}
prune dist src
prune dist-test test
node node_modules/typescript/bin/tsc -p tsconfig.json >&2
node node_modules/typescript/bin/tsc -p tsconfig.test.json >&2
built >node_modules/.smf-build-sha256
echo "$HERE"
