#!/usr/bin/env bash
# Idempotent setup for a fresh machine of this kind (run as root): Debian packages the sandbox
# and the coding suites need, then a project virtualenv with assay and its dev tools.
# Re-running is cheap: each step checks before it acts.
# ASSAY_BOOTSTRAP_BROWSER=1 (set by `make test`) also installs the registry server the tests
# start and Debian's Chromium, which the browser tests of the HTML reports drive headless;
# `make demo` needs neither and skips them.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v git >/dev/null 2>&1 || need_apt+=(git)
# Pinned environments: `assay env build` makes Debian images with mmdebstrap (its tests build one).
command -v mmdebstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
# Registry images: `assay env pull` fetches them with skopeo (no daemon). The tests (and only
# they: `make demo` needs none) push to a real registry on loopback: docker-registry, the CNCF
# distribution server.
command -v skopeo >/dev/null 2>&1 || need_apt+=(skopeo)
if [ "${ASSAY_BOOTSTRAP_BROWSER:-0}" = 1 ]; then
  command -v docker-registry >/dev/null 2>&1 || need_apt+=(docker-registry)
fi
# Task verifiers run `python3 -m pytest` with the system interpreter inside the sandbox, which
# sees /usr but not this project's virtualenv.
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || need_apt+=(python3-pytest)
if [ "${ASSAY_BOOTSTRAP_BROWSER:-0}" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    need_apt+=(chromium)
  else  # optional: without it the browser tests skip, saying why
    echo "bootstrap: chromium is not installed (apt-get install chromium); the browser tests will skip" >&2
  fi
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: missing ${need_apt[*]}; install them (apt-get install ${need_apt[*]}) or run as root" >&2
    exit 1
  fi
  echo "bootstrap: installing Debian packages: ${need_apt[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
# uv installs the project's Python packages: from its cache (hard links) a fresh clone's install
# takes about 4 s where pip's takes about 45 s, which every CI run and every new checkout pays.
# It is pinned, and kept in a small virtualenv of its own under the user's cache, made once per
# machine (or taken from PATH when it is there). Where it cannot be had (no registry, no cache),
# pip does the same install.
UV_PIN=0.13.9
uv=''
if command -v uv >/dev/null 2>&1; then
  uv=$(command -v uv)
else
  uv_home="${XDG_CACHE_HOME:-$HOME/.cache}/assay/uv-$UV_PIN"
  if [ ! -x "$uv_home/bin/uv" ]; then
    rm -rf "$uv_home.tmp"
    if "$PY" -m venv "$uv_home.tmp" >/dev/null 2>&1 &&
       "$uv_home.tmp/bin/python" -m pip install -q "uv==$UV_PIN" >/dev/null 2>&1; then
      rm -rf "$uv_home" && mv "$uv_home.tmp" "$uv_home"
    else
      rm -rf "$uv_home.tmp"
      echo "bootstrap: uv $UV_PIN could not be installed; pip installs the packages (slower)" >&2
    fi
  fi
  if [ -x "$uv_home/bin/uv" ]; then uv="$uv_home/bin/uv"; fi
fi
if [ ! -x .venv/bin/python ]; then
  if [ -n "$uv" ]; then
    "$uv" venv -q --seed --python "$PY" .venv  # --seed: pip in the venv, as python -m venv gives
  else
    "$PY" -m venv .venv
  fi
fi
# ASSAY_BOOTSTRAP_EXTRAS (make test: dev,ray,inspect) installs those extras in the same pip run:
# one resolution and one editable build instead of two (about 10 s of a fresh clone's setup).
# The stamp holds pyproject.toml's digest and the extras installed; a later run asking for fewer
# (make demo after make test) installs nothing.
extras=${ASSAY_BOOTSTRAP_EXTRAS:-dev}
stamp=.venv/.assay-installed
digest=$(sha256sum pyproject.toml | cut -d' ' -f1)
had_digest='' had_extras=''
if [ -f "$stamp" ]; then read -r had_digest had_extras < "$stamp" || true; fi
missing=0
[ "${had_digest:-}" = "$digest" ] || missing=1
for extra in ${extras//,/ }; do
  case ",${had_extras:-}," in *",$extra,"*) ;; *) missing=1 ;; esac
done
if [ "$missing" = 1 ]; then
  if [ -n "$uv" ]; then
    # no --compile-bytecode: it compiles all of Ray and Inspect (13 s of a fresh clone's setup);
    # what runs is compiled on its first import instead. Where PYTHONDONTWRITEBYTECODE is set
    # (this machine) nothing is cached that way, except by make test's processes, which cache
    # what they import (tests/conftest.py): every other run compiles what it imports again,
    # 0.3 s of each assay command's start (UV_COMPILE_BYTECODE=1 before this script avoids it)
    "$uv" pip install -q --python .venv/bin/python -e ".[$extras]"
  else
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[$extras]"
  fi
  echo "$digest $extras" > "$stamp"
fi
