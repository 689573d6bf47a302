"""Loads held at the start until the test lets them go: the "still loading" states (a 503
"loading", a cancel that lands before the load ends) without racing a real load."""

from __future__ import annotations

import threading


def held_loads(monkeypatch) -> threading.Event:
    """Every model load (the engine's, the console's: both call engine.models.load_model) waits
    until the returned event is set, then loads for real; a cancel while it waits ends it as
    the real loader's cancel does."""
    from npu_console.engine import models

    real = models.load_model
    release = threading.Event()

    def held(*args, cancel=None, **kwargs):
        while not release.wait(0.02):
            if cancel is not None and cancel.is_set():
                raise models.LoadCancelled("loading cancelled")
        return real(*args, cancel=cancel, **kwargs)

    monkeypatch.setattr(models, "load_model", held)
    return release
