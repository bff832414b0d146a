# Shared by scripts/demo and scripts/test: make .venv with the project installed.
# Needs only Python >= 3.11, pip and apt (for python3-venv and Debian's prometheus package).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "need root for: $*" >&2; return 1; fi
}

apt_install() {
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_venv() {
    local extras="$1"
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV" 2>/dev/null || { apt_install python3-venv; rm -rf "$VENV"; "$PYTHON" -m venv "$VENV"; }
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT$extras"
}

# buf (npm's @bufbuild/buf, which ships the buf binary): tests/api/test_buf.py runs `buf lint` and
# `buf breaking` on proto/runtimekit/v1. Installed into .tools/ (git-ignored), never globally;
# Debian's nodejs and npm are installed first when npm is missing.
BUF_VERSION=1.75.0
TOOLS="$ROOT/.tools"

ensure_buf() {
    [ "$("$TOOLS/node_modules/.bin/buf" --version 2>/dev/null)" = "$BUF_VERSION" ] && return 0
    command -v npm >/dev/null || apt_install nodejs npm
    npm install --prefix "$TOOLS" --no-audit --no-fund --loglevel=error "@bufbuild/buf@$BUF_VERSION" >/dev/null
    "$TOOLS/node_modules/.bin/buf" --version >/dev/null
}
