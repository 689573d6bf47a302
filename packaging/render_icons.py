"""Render the app icon's PNG sizes from assets/icons/app.svg (Qt's SVG renderer, no extra tools).

    QT_QPA_PLATFORM=offscreen python packaging/render_icons.py [--check]

Desktop menus and window managers that cannot read SVG use the PNGs; run this after editing the
SVG. --check renders in memory and fails if a committed PNG no longer matches the SVG.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parent.parent / "assets" / "icons"
SIZES = (48, 128, 256)


def png_path(size: int, icons: Path = ICONS) -> Path:
    return icons / f"app-{size}.png"


def render(svg: Path, size: int):
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    return image.convertToFormat(QImage.Format.Format_ARGB32)


def max_channel_difference(a, b) -> int:
    """Largest per-channel difference of two same-sized images (0 = identical)."""
    if a.size() != b.size():
        return 255
    worst = 0
    for y in range(a.height()):
        for x in range(a.width()):
            pa, pb = a.pixel(x, y), b.pixel(x, y)
            for shift in (0, 8, 16, 24):
                worst = max(worst, abs(((pa >> shift) & 255) - ((pb >> shift) & 255)))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument(
        "--icons", type=Path, default=ICONS, help="icon directory (default assets/icons)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication, QImage

    _app = QGuiApplication.instance() or QGuiApplication([])  # QPainter needs one
    svg = args.icons / "app.svg"
    if not svg.is_file():
        print(f"error: {svg} is missing", file=sys.stderr)
        return 2
    stale = []
    for size in SIZES:
        image = render(svg, size)
        target = png_path(size, args.icons)
        if args.check:
            # anti-aliasing may differ by a step between Qt builds; a changed drawing differs by far more
            if not target.is_file() or max_channel_difference(image, QImage(str(target))) > 8:
                stale.append(target.name)
        elif not image.save(str(target), "PNG"):
            print(f"error: could not write {target}", file=sys.stderr)
            return 2
    if stale:
        print(
            f"error: {', '.join(stale)} do not match app.svg: run packaging/render_icons.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
