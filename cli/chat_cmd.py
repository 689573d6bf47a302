"""`npu-console chat`: an interactive terminal chat streamed through the engine.

Ctrl-C stops the reply being written, not the program; /reset forgets the conversation;
/exit (or Ctrl-D) quits.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .common import (
    add_model_args,
    add_reasoning_arg,
    add_sampling_args,
    load_for_cli,
)
from .errors import CliError

HELP = "commands: /reset (forget the conversation), /exit (quit); Ctrl-C stops a reply"


def register(sub) -> None:
    p = sub.add_parser("chat", help="chat with a model in the terminal (streaming)")
    add_model_args(p)
    p.add_argument("--system", default=None, help="system prompt")
    add_sampling_args(p, max_tokens=256, temperature=0.7, top_p=0.95)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    add_reasoning_arg(p)
    p.add_argument("--remote", default=None, metavar="URL",
                   help="chat with an OpenAI-compatible server (npu-console, vLLM, MindIE) "
                        "instead of a local model; --model is then the served model id")
    p.add_argument("--api-key", default=os.environ.get("NPU_CONSOLE_API_KEY"),
                   help="bearer key for --remote (or set NPU_CONSOLE_API_KEY)")
    p.set_defaults(func=run)


def _check_demo_model(args) -> None:
    """The default --model is the built-in demo model; an install without it says so in one line
    (the product never reaches outside its own files for a model)."""
    from ..engine.paths import DEMO_MODEL_DIR

    if Path(args.model) == DEMO_MODEL_DIR and not (DEMO_MODEL_DIR / "config.json").exists():
        raise CliError(f"the built-in demo model is missing from {DEMO_MODEL_DIR} (a broken "
                       "install?); pass --model FOLDER")


def run(args) -> int:
    from ..engine.runtime import EngineConfig, LocalEngine
    from ..engine.runtime.types import (
        EngineError,
        GenerationRequest,
        SamplingParams,
        TokenEvent,
    )

    if getattr(args, "remote", None):
        engine, banner = _connect_remote(args)
    else:
        _check_demo_model(args)
        loaded = load_for_cli(args)
        engine = LocalEngine(EngineConfig(max_running=1, num_threads=args.threads,
                                          reasoning_parser=args.reasoning_parser))
        banner = None
    try:
        if banner is None:
            info = engine.add_model(loaded).result()
            banner = f"{info.name} ({info.architecture}, {info.dtype}, context {info.max_context})"
        print(f"{banner}. {HELP}", file=sys.stderr)
        history: list[dict] = []
        if args.system:
            history.append({"role": "system", "content": args.system})
        base = len(history)
        while True:
            try:
                line = input("you> ")
            except EOFError:
                print()
                return 0
            except KeyboardInterrupt:
                print("\n(type /exit to quit)")
                continue
            cmd = line.strip()
            if not cmd:
                continue
            if cmd in ("/exit", "/quit"):
                return 0
            if cmd == "/reset":
                del history[base:]
                print("(conversation cleared)")
                continue
            if cmd.startswith("/"):
                print(f"unknown command {cmd}; {HELP}")
                continue
            history.append({"role": "user", "content": line})
            params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                                    top_p=args.top_p, seed=args.seed)
            handle = _submit_trimmed(engine, history, base, params, GenerationRequest,
                                     EngineError)
            if handle is None:
                history.pop()
                continue
            reply: list[str] = []
            shown = _ReplyPrinter(sys.stdout)
            print("bot> ", end="", flush=True)
            try:
                for ev in handle:
                    if isinstance(ev, TokenEvent):
                        reply.append(ev.text)
                        shown.write(ev.reasoning, ev.text)
                    elif ev.finish_reason == "error":
                        print(f"\n(error: {ev.error})", end="")
            except KeyboardInterrupt:
                handle.cancel()
                handle.result(10)
                print(" [stopped]", end="")
            shown.end()
            print()
            history.append({"role": "assistant", "content": "".join(reply)})
    finally:
        engine.shutdown()


class _ReplyPrinter:
    """Writes a reply as it streams: a reasoning model's thinking first, dimmed on a terminal
    (in brackets otherwise), then the answer on a line of its own."""

    def __init__(self, out):
        self.out = out
        self.tty = getattr(out, "isatty", lambda: False)()
        self.thinking = False

    def write(self, reasoning: str, text: str) -> None:
        if reasoning:
            if not self.thinking:
                self.thinking = True
                self.out.write("\x1b[2m(thinking) " if self.tty else "[thinking] ")
            self.out.write(reasoning)
        if text:
            self.end("\n")
            self.out.write(text)
        self.out.flush()

    def end(self, after: str = "") -> None:
        """Close the thinking part if it is open."""
        if self.thinking:
            self.thinking = False
            self.out.write(("\x1b[0m" if self.tty else " [/thinking]") + after)


def _connect_remote(args):
    """--remote URL: the same chat through RemoteEngine (the EngineClient of a remote server)."""
    from ..engine.paths import DEMO_MODEL_DIR
    from ..engine.remote import RemoteEngine
    from ..engine.runtime.types import EngineError

    model = None if Path(args.model) == DEMO_MODEL_DIR else args.model
    try:
        engine = RemoteEngine(args.remote, api_key=args.api_key, model=model,
                              poll_interval_s=None)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        names = [m.name for m in engine.models()]
    except EngineError as exc:
        engine.shutdown()
        raise CliError(exc.message) from None
    if model is not None and names and model not in names:
        engine.shutdown()
        raise CliError(f"model {model!r} is not served at {args.remote} "
                       f"(served: {', '.join(names)})")
    engine.model = model or (names[0] if names else None)
    return engine, f"{engine.model or 'the default model'} at {engine.base_url}"


def _submit_trimmed(engine, history, base, params, GenerationRequest, EngineError):
    """Submit the conversation, dropping the oldest turns while it does not fit the context."""
    from ..engine.runtime.types import ContextLengthError

    while True:
        try:
            return engine.submit(GenerationRequest(messages=list(history), params=params))
        except ContextLengthError as exc:
            if len(history) - base <= 1:
                print(f"(message too long: {exc.message})")
                return None
            del history[base:base + 2]  # forget the oldest exchange
        except EngineError as exc:
            raise CliError(exc.message) from None
