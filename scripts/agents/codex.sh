#!/usr/bin/env bash
# Installs the pinned OpenAI Codex CLI (npm @openai/codex) under ASSAY_AGENTS_DIR and prints the
# path of its executable on the last line.
#
# The npm package is a small node shim in front of a static musl binary; the path printed is
# that native binary, so the sandbox needs neither Node nor the shim at run time (only the
# prefix, mounted read-only). Cold install: 424 MB in ~25 s (plus lib.sh's Node 22, 185 MB, used
# only by npm, if not cached yet); warm: nothing to do.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

CODEX_VERSION=0.171.0
prefix=$(npm_install codex @openai/codex "$CODEX_VERSION")
bin="$prefix/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
if [ ! -x "$bin" ]; then
  # the platform package moved: take the native binary wherever npm put it
  bin=$(find "$prefix/node_modules" -path '*x86_64-unknown-linux-musl/bin/codex' -type f | head -n1)
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "codex.sh: no native codex binary under $prefix" >&2; exit 1; }
echo "$bin"
