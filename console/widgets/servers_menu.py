"""File > Connect to server… and File > Servers (the remembered ones: connect again,
disconnect, forget), and the status-bar line that says how a connection went."""

from __future__ import annotations

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QMenu

from ..engines import host_label


def add_server_actions(file_menu: QMenu, window):
    """Add both to `file_menu`; returns (the Connect action, the Servers submenu)."""
    ctx = window.ctx
    connect = file_menu.addAction("Connect to server…")
    connect.setShortcut(QKeySequence("Ctrl+Shift+K"))
    connect.triggered.connect(lambda: open_connect_dialog(window))
    servers = file_menu.addMenu("Servers")
    servers.aboutToShow.connect(lambda: fill_servers_menu(servers, ctx))
    fill_servers_menu(servers, ctx)
    # briefly when it worked: a message hides the status bar's "engine: host" while it shows
    ctx.remote.connected.connect(lambda url, error: window.statusBar().showMessage(
        f"⚠ {host_label(url)}: {error}" if error else
        f"Connected to {host_label(url)}: its models are in Chat and Benchmark",
        15_000 if error else 4_000))
    return connect, servers


def open_connect_dialog(window):
    from .connect_dialog import ConnectDialog

    dialog = ConnectDialog(window.ctx, window)
    window.connect_dialog = dialog  # kept: tests and screenshots drive it
    dialog.open()
    return dialog


def fill_servers_menu(menu: QMenu, ctx) -> None:
    """One submenu per remembered server, most recent first; a ✓ marks the connected ones."""
    menu.clear()
    remote = ctx.remote
    saved = remote.servers.list()
    if not saved:
        menu.addAction("No remembered servers").setEnabled(False)
        return
    for s in saved:
        on = remote.is_connected(s.url)
        title = f"{s.name} ({host_label(s.url)})" if s.name else host_label(s.url)
        sub = menu.addMenu(("✓ " if on else "") + title)
        sub.setToolTip(s.url)
        sub.addAction("Connect again" if on else "Connect").triggered.connect(
            lambda _c=False, url=s.url: remote.reconnect(url))
        if on:
            sub.addAction("Disconnect").triggered.connect(
                lambda _c=False, url=s.url: remote.disconnect(url))
        sub.addAction("Forget (and its key)").triggered.connect(
            lambda _c=False, url=s.url: remote.forget(url))
