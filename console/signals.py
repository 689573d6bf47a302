"""SIGTERM and SIGINT close the console as File > Quit does: streams stopped, the API server
drained, chats and settings saved, exit status 0.

Python runs a signal handler only when the interpreter gets control, and a Qt event loop may
sit in C++ for as long as nothing happens on screen. So the handler only notes the signal;
Python's wakeup fd writes a byte to a socket pair whose other end a QSocketNotifier watches,
which wakes the Qt loop at once, and the notifier's slot asks the window to close.
"""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable

from PySide6.QtCore import QSocketNotifier

log = logging.getLogger(__name__)

QUIT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install_quit_signals(on_quit: Callable[[int], None], parent=None) -> Callable[[], None]:
    """Call `on_quit(signum)` on the Qt thread when SIGTERM or SIGINT arrives; returns a
    function that restores the previous handlers."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: received.append(signum))
                for sig in QUIT_SIGNALS}
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    notifier = QSocketNotifier(reader.fileno(), QSocketNotifier.Read, parent)

    def woken() -> None:
        try:
            while reader.recv(64):
                pass
        except BlockingIOError:
            pass
        while received:
            signum = received.pop(0)
            log.info("%s received: closing", signal.Signals(signum).name)
            on_quit(signum)

    notifier.activated.connect(woken)

    def uninstall() -> None:
        notifier.setEnabled(False)
        signal.set_wakeup_fd(old_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        reader.close()
        writer.close()

    return uninstall
