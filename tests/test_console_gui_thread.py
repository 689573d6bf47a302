"""console.gui_thread.post: the one route from worker threads to the GUI thread. Calls run on
the GUI thread, in the order each thread posted them; a failing call, or one whose object was
deleted while it waited, is logged and the calls after it still run."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from npu_console.console.gui_thread import post
from PySide6.QtCore import QObject


def test_posted_calls_run_on_the_gui_thread_in_each_threads_order(qtbot):
    got: list[tuple[int, int, bool]] = []

    def record(worker: int, i: int) -> None:
        got.append((worker, i, threading.current_thread() is threading.main_thread()))

    def work(worker: int) -> None:
        for i in range(50):
            post(record, worker, i)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not got  # nothing runs until the GUI thread's loop turns
    qtbot.waitUntil(lambda: len(got) == 200, timeout=5000)
    assert all(on_gui for _w, _i, on_gui in got)
    for w in range(4):
        assert [i for worker, i, _ in got if worker == w] == list(range(50))


def test_a_failing_call_or_a_deleted_object_does_not_stop_the_next(qtbot, caplog):
    done = []

    class Gone(QObject):
        def name(self):
            return self.objectName()  # raises RuntimeError once the C++ object is deleted

    gone = Gone()
    gone_name = gone.name
    import shiboken6

    shiboken6.delete(gone)

    def boom():
        raise ValueError("a page's bug")

    threading.Thread(target=lambda: (post(boom), post(gone_name), post(done.append, 1))).start()
    qtbot.waitUntil(lambda: done == [1], timeout=5000)
    assert "a page's bug" in caplog.text
