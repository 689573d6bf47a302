"""Fault injection through a real engine's real parts.

Each variant's runner and scheduler stay the engine's own; these helpers wrap one of their
methods on the instance (never the class), so a test sees every scheduled sequence before the
step runs and can delay it or make it fail, and everything is put back afterwards.
"""

from __future__ import annotations

import contextlib


class InjectedFault(RuntimeError):
    pass


def _variants(engine):
    return list(engine._variants.values())


@contextlib.contextmanager
def _wrapping(objs, name, wrap):
    """Each of `objs` gets its method `name` replaced, on the instance, by wrap(original);
    the class's own comes back afterwards."""
    for o in objs:
        setattr(o, name, wrap(getattr(o, name)))
    try:
        yield
    finally:
        for o in objs:
            o.__dict__.pop(name, None)


def _failing_for(when, message):
    """A wrapper whose method raises InjectedFault(message) for the sequences `when` picks."""
    def wrap(original):
        def method(seq):
            if when(seq):
                raise InjectedFault(message)
            return original(seq)
        return method
    return wrap


@contextlib.contextmanager
def before_each_sequence(engine, fn):
    """Call fn(seq) for every sequence of every step, before the runner computes it."""
    def wrap(original):
        def execute(items, decode_count):
            for it in items:
                fn(it.seq)
            return original(items, decode_count)
        return execute
    with _wrapping([v.runner for v in _variants(engine)], "execute", wrap):
        yield


class EngineKilled(BaseException):
    """What no `except Exception` contains: the step, and with it the engine loop, dies."""


@contextlib.contextmanager
def fatal_fault(engine, when=lambda seq: True):
    """The runner raises EngineKilled for the sequences `when` picks: a fault that escapes
    every per-request containment and kills the engine loop."""
    def check(seq):
        if when(seq):
            raise EngineKilled("injected: the engine thread was killed")
    with before_each_sequence(engine, check):
        yield


@contextlib.contextmanager
def failing_release(engine, when=lambda seq: True):
    """Releasing the sequences `when` picks fails in the runner (its cleanup is broken)."""
    with _wrapping([v.runner for v in _variants(engine)], "release",
                   _failing_for(when, "injected: releasing the sequence failed")):
        yield


@contextlib.contextmanager
def failing_submit_command(engine, when=lambda seq: True):
    """The engine thread's "submit" command fails for the sequences `when` picks (the
    scheduler refuses them), as a broken command handler would."""
    with _wrapping([v.scheduler for v in _variants(engine)], "add",
                   _failing_for(when, "injected: the scheduler refused the request")):
        yield


@contextlib.contextmanager
def breaking_handles(engine, after: int = 2):
    """Requests submitted meanwhile get their real handle, whose event stream raises once it
    has handed out `after` events (a failure inside the server after the answer began)."""
    original = engine.submit

    def submit(request):
        handle = original(request)
        real_next, real_drain = handle.next_events, handle.drain
        seen = {"n": 0}

        def check(events):
            if seen["n"] >= after:
                raise InjectedFault("injected: the event stream broke")
            seen["n"] += len(events)
            return events

        async def next_events():
            check([])
            return check(await real_next())

        def drain():
            check([])
            return check(real_drain())
        handle.next_events, handle.drain = next_events, drain
        return handle
    engine.submit = submit
    try:
        yield
    finally:
        engine.__dict__.pop("submit", None)


@contextlib.contextmanager
def recording_encoders(engine):
    """Note the name of every thread that renders or tokenizes a prompt (each variant's real
    PromptEncoder, wrapped on the instance); yields the list of names."""
    import threading

    seen: list[str] = []

    def wrap(original):
        def _encode(req, *args):
            seen.append(threading.current_thread().name)
            return original(req, *args)
        return _encode
    with _wrapping([v.encoder for v in _variants(engine)], "_encode", wrap):
        yield seen
