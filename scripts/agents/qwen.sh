#!/usr/bin/env bash
# Installs qwen-code (@qwen-code/qwen-code, pinned) under Node 22 into
# $ASSAY_AGENTS_DIR/qwen-<version>, once per version, and prints the CLI's path on its last line.
# Node 22 is required: under the system Node 20 npm resolves an older release (0.15.10).
# The CLI is a node script; run it with the Node 22 from `ensure_node22` first on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

QWEN_VERSION=0.24.4
prefix=$(npm_install qwen @qwen-code/qwen-code "$QWEN_VERSION")
bin="$prefix/node_modules/.bin/qwen"
[ -x "$bin" ] || { echo "qwen.sh: no executable at $bin" >&2; exit 1; }
echo "$bin"
