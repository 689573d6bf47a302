#!/usr/bin/env bash
# Install an unpacked npu-console offline bundle into a virtual environment. No network is used:
# pip reads only this bundle's wheels/ (--no-index) and ignores every pip config on the machine.
#
#   ./install.sh [--prefix /opt/npu-console] [--python /usr/bin/python3.11] [--ascend-root DIR]
#                [--check] [--force] [--no-compile]
#
# --check only runs the preflight checks; --force installs even when a check says MISSING;
# --no-compile skips byte-compiling (faster install, slower first start of each process).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="/opt/npu-console"
python=""
ascend_root=""
check_only=0
force=0
compile_flag=""

usage() { sed -n '2,9s/^# \{0,1\}//p' "$0"; }
die() { echo "install.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix="$2"; shift 2 ;;
    --python) [ $# -ge 2 ] || die "--python needs an interpreter"; python="$2"; shift 2 ;;
    --ascend-root) [ $# -ge 2 ] || die "--ascend-root needs a directory"; ascend_root="$2"; shift 2 ;;
    --check) check_only=1; shift ;;
    --force) force=1; shift ;;
    --no-compile) compile_flag="--no-compile"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

[ -f "$here/bundle.json" ] || die "$here/bundle.json is missing: run install.sh from an unpacked bundle"
want="$(grep -o '"python": *"[0-9.]*"' "$here/bundle.json" | head -n 1 | sed 's/.*"\([0-9.]*\)"$/\1/')"
[ -n "$want" ] || die "bundle.json names no Python version"

# The interpreter: --python, then $PYTHON, then python3.X on PATH, then python3
if [ -z "$python" ]; then
  python="${PYTHON:-}"
fi
if [ -z "$python" ]; then
  for cand in "python$want" python3; do
    if command -v "$cand" >/dev/null 2>&1; then python="$(command -v "$cand")"; break; fi
  done
fi
[ -n "$python" ] || die "no python$want found: install CPython $want (with its venv module) or pass --python"
command -v "$python" >/dev/null 2>&1 || die "--python $python: not found"
# preflight.py needs 3.7+; anything older cannot be the bundle's Python anyway
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 7) else 1)' 2>/dev/null \
  || die "$python is too old to run the checks; the wheels need CPython $want (pass --python)"

echo "== checking this server for $(basename "$here")"
preflight=("$python" "$here/preflight.py" --bundle "$here" --prefix "$prefix")
[ -n "$ascend_root" ] && preflight+=(--ascend-root "$ascend_root")
status=0
"${preflight[@]}" || status=$?
if [ "$check_only" = 1 ]; then exit "$status"; fi
if [ "$status" != 0 ]; then
  if [ "$force" = 1 ]; then
    echo "== continuing despite the problems above (--force)" >&2
  else
    echo "install.sh: fix the MISSING items above, or rerun with --force" >&2
    exit 1
  fi
fi

# Only this bundle's wheels: drop every pip setting inherited from the environment and config files
while IFS= read -r var; do unset "$var"; done < <(env | sed -n 's/^\(PIP_[A-Za-z0-9_]*\)=.*/\1/p')
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

existing=0
if [ -x "$prefix/bin/python" ]; then
  existing=1
  echo "== upgrading the environment in $prefix"
else
  echo "== creating $prefix"
  "$python" -m venv "$prefix"
fi
pip=("$prefix/bin/python" -m pip install -q --no-index --find-links "$here/wheels" --no-cache-dir
     --progress-bar off ${compile_flag:+"$compile_flag"})
echo "== installing $(tr '\n' ' ' < "$here/requirements.txt")(this takes a minute: torch is large)"
"${pip[@]}" --upgrade -r "$here/requirements.txt"
if [ "$existing" = 1 ]; then
  # same version number, newer build: replace the project itself, leave the dependencies
  "${pip[@]}" --no-deps --force-reinstall "$here"/wheels/npu_console-*.whl
fi

echo "== installed: $("$prefix/bin/npu-console" --version)"
cat <<EOF
Next:
  $prefix/bin/npu-console doctor          # what the console sees on this server
  $prefix/bin/npu-console serve           # the OpenAI-compatible API
EOF
if [ -d "$here/desktop" ]; then
  echo "Service (systemd) and desktop menu entry: see README.md in this bundle (systemd/ and desktop/)."
else
  echo "A server bundle (no Qt): run the console on a workstation and connect to this server"
  echo "(File > Connect to server; docs/remote-serving.md). Service: README.md in this bundle (systemd/)."
fi
