#!/usr/bin/env bash
# Prepare this checkout on a fresh Debian 12: system packages, .venv, headgate installed
# editable with the exact dependency versions of constraints.txt. Re-running is cheap:
# each step is skipped when already done, so serve.sh and test.sh call this every time
# instead of trusting that someone ran it.
#
#   scripts/setup.sh          what `headgate serve` needs
#   scripts/setup.sh --test   also PostgreSQL, Chromium, Node.js and the test dependencies
set -euo pipefail

usage() {
    echo "usage: $0 [--test]"
}

with_test=0
for arg in "$@"; do
    case "$arg" in
        --test) with_test=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "setup.sh: unknown argument: $arg" >&2; usage >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

is_installed() {
    # dpkg -s alone also succeeds for removed packages that left config files behind.
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'
}

python_ok() {
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

pick_python() {
    local cand
    for cand in ${HG_PYTHON:-} python3.11 python3; do
        if command -v "$cand" >/dev/null 2>&1 && python_ok "$cand"; then
            command -v "$cand"
            return 0
        fi
    done
    return 1
}

venv_ok() {
    [ -x .venv/bin/python ] && python_ok .venv/bin/python
}

# --- system packages -------------------------------------------------------------
apt_pkgs=()
py="$(pick_python || true)"
if [ -z "$py" ]; then
    apt_pkgs+=(python3 python3-venv)
elif ! venv_ok && ! "$py" -m ensurepip --version >/dev/null 2>&1; then
    # Debian splits ensurepip (which venv needs) into python3-venv.
    apt_pkgs+=(python3-venv)
fi
if [ "$with_test" = 1 ]; then
    if ! is_installed postgresql && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
        apt_pkgs+=(postgresql)
    fi
    # Debian's own build: Playwright's browser download cannot work offline.
    if ! command -v chromium >/dev/null 2>&1 && ! is_installed chromium; then
        apt_pkgs+=(chromium)
    fi
    # The worker protocol's reference worker (examples/http_worker.mjs) runs on it.
    if ! command -v node >/dev/null 2>&1 && ! is_installed nodejs; then
        apt_pkgs+=(nodejs)
    fi
    # A test of the worker protocol behind TLS makes its certificate with it.
    if ! command -v openssl >/dev/null 2>&1 && ! is_installed openssl; then
        apt_pkgs+=(openssl)
    fi
fi

if [ "${#apt_pkgs[@]}" -gt 0 ]; then
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "need root or sudo to install: ${apt_pkgs[*]}"
        sudo=(sudo)
    fi
    log "installing Debian packages: ${apt_pkgs[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${apt_pkgs[@]}"
    [ -n "$py" ] || py="$(pick_python)" || die "no Python 3.11+ found after installing python3"
fi

# --- virtualenv --------------------------------------------------------------------
if ! venv_ok; then
    [ -n "$py" ] || die "no Python 3.11+ interpreter (tried python3.11, python3)"
    # Never delete it ourselves: it may just be unreadable to this user.
    [ ! -e .venv ] || die ".venv exists but its python does not run as Python 3.11+; remove it and re-run"
    log "creating .venv with $py"
    "$py" -m venv .venv
fi

# --- python packages ---------------------------------------------------------------
# The stamp records which pyproject.toml and constraints.txt were installed and whether
# with test extras; a test install also satisfies a plain one.
stamp=.venv/.headgate-setup-stamp
want=base
spec=.
if [ "$with_test" = 1 ]; then
    want=test
    spec='.[test]'
fi
hash="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
have_hash=""
have_kind=""
if [ -f "$stamp" ]; then
    read -r have_hash have_kind <"$stamp" || true
fi
if [ "$have_hash" = "$hash" ] && { [ "$have_kind" = test ] || [ "$want" = base ]; } &&
    [ -x .venv/bin/headgate ]; then
    log "python packages up to date"
else
    log "pip install -c constraints.txt -e '$spec'"
    .venv/bin/python -m pip install --disable-pip-version-check -q -c constraints.txt -e "$spec"
    printf '%s %s\n' "$hash" "$want" >"$stamp"
fi
