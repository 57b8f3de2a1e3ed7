#!/usr/bin/env bash
# Installs the pinned mini-swe-agent CLI (`mini`) into its own venv under ASSAY_AGENTS_DIR and
# prints the path of the executable on its last line.
#
# Why a venv of the system /usr/bin/python3: the sandbox sees /usr but not the clone's .venv or
# a pyenv, so an interpreter from /usr is one the agent can run inside it once the venv prefix
# is bind-mounted read-only at the same path. ~754 MB (litellm and its dependencies), ~45 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

MINI_SWE_AGENT_VERSION=2.4.6

# venv_install NAME PACKAGE VERSION -> installs PACKAGE==VERSION into its own venv, prints the prefix
venv_install() {
  local name=$1 pkg=$2 version=$3 prefix
  prefix=$(prefix_for "$name" "$version")
  if ! is_installed "$prefix"; then
    rm -rf "$prefix" && mkdir -p "$(dirname "$prefix")"
    /usr/bin/python3 -m venv "$prefix" >&2
    "$prefix/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
      "$pkg==$version" >&2
    mark_installed "$prefix"
  fi
  echo "$prefix"
}

prefix=$(venv_install mini-swe-agent mini-swe-agent "$MINI_SWE_AGENT_VERSION")
echo "$prefix/bin/mini"
