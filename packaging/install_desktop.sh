#!/usr/bin/env bash
# Put NPU Console in the desktop's application menu: the .desktop entry plus the icon in the
# hicolor theme (SVG and 48/128/256 PNGs).
#
#   install_desktop.sh [--exec /opt/npu-console/bin/npu-console] [--system] [--uninstall]
#
# Per user (~/.local/share) by default; --system writes /usr/share (needs root). --exec is the
# npu-console to launch (default: the one on PATH, else /opt/npu-console/bin/npu-console).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec_path=""
data="${XDG_DATA_HOME:-$HOME/.local/share}"
uninstall=0

die() { echo "install_desktop.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --exec) [ $# -ge 2 ] || die "--exec needs a path"; exec_path="$2"; shift 2 ;;
    --system) data=/usr/share; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

# In the repository the icons are in assets/icons; in a bundle, next to this script
icons=""
for cand in "$here/icons" "$here/../assets/icons"; do
  if [ -f "$cand/app.svg" ]; then icons="$(cd "$cand" && pwd)"; break; fi
done
entry="$here/npu-console.desktop"
[ -f "$entry" ] || die "$entry is missing"

apps="$data/applications"
hicolor="$data/icons/hicolor"
if [ "$uninstall" = 1 ]; then
  rm -f "$apps/npu-console.desktop" "$hicolor/scalable/apps/npu-console.svg"
  for size in 48 128 256; do rm -f "$hicolor/${size}x${size}/apps/npu-console.png"; done
  echo "removed the NPU Console menu entry from $data"
  exit 0
fi

[ -n "$icons" ] || die "no icons found (looked in $here/icons and $here/../assets/icons)"
if [ -z "$exec_path" ]; then
  exec_path="$(command -v npu-console || true)"
  [ -n "$exec_path" ] || exec_path=/opt/npu-console/bin/npu-console
fi
[ -x "$exec_path" ] || die "$exec_path is not an executable npu-console (pass --exec)"
case "$exec_path" in
  *[[:space:]\"\'\\\$\`]*) die "--exec path must not contain spaces or quotes: $exec_path" ;;
esac

mkdir -p "$apps" "$hicolor/scalable/apps"
install -m 644 "$icons/app.svg" "$hicolor/scalable/apps/npu-console.svg"
for size in 48 128 256; do
  if [ -f "$icons/app-$size.png" ]; then
    mkdir -p "$hicolor/${size}x${size}/apps"
    install -m 644 "$icons/app-$size.png" "$hicolor/${size}x${size}/apps/npu-console.png"
  fi
done
# The menu does not search PATH the way a shell does: point Exec and TryExec at the real file
sed -e "s#^Exec=npu-console #Exec=$exec_path #" -e "s#^TryExec=npu-console\$#TryExec=$exec_path#" \
  "$entry" > "$apps/npu-console.desktop.tmp"
chmod 644 "$apps/npu-console.desktop.tmp"
mv "$apps/npu-console.desktop.tmp" "$apps/npu-console.desktop"

# Refresh the caches where the tools exist; menus also notice new files on their own
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$apps" || true
command -v gtk-update-icon-cache >/dev/null 2>&1 && [ -f "$hicolor/index.theme" ] \
  && gtk-update-icon-cache -q -t "$hicolor" || true
echo "installed $apps/npu-console.desktop (runs $exec_path gui)"
