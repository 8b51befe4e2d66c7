#!/bin/sh
# Build the OpenClaw plugin (dist/) and its tests (dist-test/); print the plugin folder.
#
# Used by `make openclaw-unit` and by the Python tests (tests/runtimes/test_openclaw_plugin.py),
# so both run the same compiled JavaScript. Idempotent and serialised:
# - node: the pinned Node 24 from scripts/node.sh (first on PATH, so npm's
#   scripts and tsc run on it);
# - npm ci only when package-lock.json changed since the last install
#   (node_modules/.smf-lock-sha256 records the lock's digest);
# - tsc always (a few seconds): dist/ is never committed, so a stale one
#   cannot hide a change; compiled files whose source is gone (moved or
#   deleted) are removed first, so nothing imports a module that no longer exists;
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
echo "$HERE"
