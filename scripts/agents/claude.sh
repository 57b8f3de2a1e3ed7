#!/usr/bin/env bash
# Installs the pinned Claude Code CLI (@anthropic-ai/claude-code) once per version under
# ASSAY_AGENTS_DIR and prints the path of its executable on the last line.
#
# Why the native binary and not the npm shim: the package's postinstall places a native build
# (~384 MB, about a minute to install) that runs without Node, so the sandbox needs only this
# prefix mounted. If a newer npm declines the postinstall, the same binary sits in the platform
# package, which we fall back to.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

CLAUDE_CODE_VERSION=2.1.332

prefix=$(npm_install claude-code @anthropic-ai/claude-code "$CLAUDE_CODE_VERSION")
native="$prefix/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
shim="$prefix/node_modules/.bin/claude"
if [ -x "$native" ]; then
  echo "$native"
elif [ -x "$shim" ]; then
  echo "$shim"
else
  echo "claude.sh: no claude executable under $prefix" >&2
  exit 1
fi
