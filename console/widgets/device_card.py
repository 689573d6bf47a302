"""One card per chip / GPU / host CPU: health, utilisation, memory, temperature, power, processes."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, QVBoxLayout

from ..theme import repolish
from .basic import Badge, MetricBar, card_title, fmt_mb, fmt_num, muted

_HEALTH_KIND = {"ok": "ok", "warning": "warn", "alarm": "warn", "general warning": "warn",
                "critical": "bad", "critical warning": "bad", "error": "bad"}


def health_kind(health: str | None) -> str:
    if not health:
        return "none"
    return _HEALTH_KIND.get(health.strip().lower(), "warn")


class SelectableCard(QFrame):
    """A card that emits `clicked(key)` on a left click (once `clickable`) and can be shown as
    the selected one (the `selected` property, styled in the theme)."""

    clicked = Signal(str)

    def __init__(self, key: str, clickable: bool, parent=None):
        super().__init__(parent)
        self.key = key
        self.clickable = clickable

    def mouseReleaseEvent(self, event) -> None:
        if self.clickable and event.button() == Qt.LeftButton and self.rect().contains(
                event.position().toPoint()):
            self.clicked.emit(self.key)
        super().mouseReleaseEvent(event)

    def set_selected(self, selected: bool) -> None:
        if bool(self.property("selected")) != selected:
            self.setProperty("selected", selected)
            repolish(self)


class DeviceCard(SelectableCard):
    """Renders DeviceSnapshot (accelerators) or HostSnapshot (the CPU fallback). A click on an
    accelerator's card emits `clicked(key)` (the dashboard opens the chip's detail drawer)."""

    def __init__(self, key: str, parent=None):
        super().__init__(key, clickable=False, parent=parent)
        self.setObjectName("DeviceCard")
        self.setProperty("card", True)
        self.setMinimumWidth(215)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
        lay.setSpacing(6)
        head = QHBoxLayout()
        self.title = card_title(key)
        self.title.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.health = Badge("", "none")
        head.addWidget(self.title, 1)
        head.addWidget(self.health)
        lay.addLayout(head)
        self.subtitle = muted("")
        lay.addWidget(self.subtitle)
        self.util = MetricBar("AI Core", warn_at=90, bad_at=99)
        self.mem = MetricBar("HBM", warn_at=85, bad_at=95)
        lay.addWidget(self.util)
        lay.addWidget(self.mem)
        grid = QGridLayout()
        grid.setHorizontalSpacing(12)
        self.temp = QLabel("N/A")
        self.power = QLabel("N/A")
        self.procs = QLabel("none")
        self.procs.setWordWrap(True)
        self.row_labels = {}
        for row, (name, widget) in enumerate((("Temperature", self.temp), ("Power", self.power),
                                              ("Processes", self.procs))):
            label = muted(name)
            self.row_labels[name] = label
            grid.addWidget(label, row, 0, Qt.AlignTop)
            grid.addWidget(widget, row, 1)
        grid.setColumnStretch(1, 1)
        lay.addLayout(grid)

    def show_device(self, dev) -> None:
        if not self.clickable:
            self.clickable = True
            self.setCursor(Qt.PointingHandCursor)
            self.setToolTip("Click for this chip's details")
        self.title.setText(f"{dev.name}")
        sub = [dev.key]
        if dev.bus_id:
            sub.append(dev.bus_id)
        self.subtitle.setText(" · ".join(sub))
        self.health.set(dev.health or "N/A", health_kind(dev.health))
        self.util.name.setText("AI Core" if dev.kind == "npu" else "Utilisation")
        self.util.set(dev.util_pct, fmt_num(dev.util_pct, "{:.0f}", " %"))
        self.mem.name.setText(_mem_label(dev))
        if dev.mem_total_mb:
            self.mem.set(dev.mem_pct, f"{fmt_mb(dev.mem_used_mb)} / {fmt_mb(dev.mem_total_mb)}")
        else:
            self.mem.set(None, "N/A")
        self.temp.setText(fmt_num(dev.temp_c, "{:.0f}", " °C"))
        self.power.setText(fmt_num(dev.power_w, "{:.1f}", " W"))
        self.procs.setText(_procs_text(dev.processes))

    def show_host(self, host, processes=(), server: str = "") -> None:
        """`server`: the host:port of the server whose CPU this is ("" for this machine): its
        process is that server's, not this console's."""
        self.title.setText(f"Host CPU · {server}" if server else "Host CPU")
        where = "on the server" if server else "found"
        self.subtitle.setText(f"cpu · {host.cpu_count or '?'} cores · no accelerator {where}")
        self.health.set("host", "info")
        self.util.name.setText("CPU")
        self.util.set(host.cpu_pct, fmt_num(host.cpu_pct, "{:.0f}", " %"))
        self.mem.name.setText("RAM")
        self.mem.set(host.mem_pct, f"{fmt_mb(host.mem_used_mb)} / {fmt_mb(host.mem_total_mb)}")
        self.row_labels["Temperature"].setText("Load (1 min)")
        self.temp.setText(fmt_num(host.load_1m, "{:.2f}"))
        self.row_labels["Power"].setVisible(False)
        self.power.setVisible(False)
        who = "the server" if server else "this console"
        self.procs.setText(
            f"{who}: pid {host.proc_pid}, {fmt_num(host.proc_cpu_pct, '{:.0f}', ' %')} CPU, "
            f"{fmt_mb(host.proc_rss_mb)}")


def _mem_label(dev) -> str:
    if dev.kind == "gpu":
        return "VRAM"
    if dev.kind == "npu":
        # chips without HBM (310 / 310P) report their DDR pool in mem_*
        ddr_only = dev.ddr_total_mb is not None and dev.mem_total_mb == dev.ddr_total_mb
        return "Memory" if ddr_only else "HBM"
    return "Memory"


def _procs_text(procs) -> str:
    if not procs:
        return "none"
    parts = []
    for p in procs[:3]:
        name = p.name or "(other namespace)"
        parts.append(f"{p.pid} {name} {fmt_mb(p.memory_mb)}")
    if len(procs) > 3:
        parts.append(f"+{len(procs) - 3} more")
    return "\n".join(parts)
