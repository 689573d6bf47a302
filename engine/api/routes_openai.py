"""POST /v1/chat/completions, POST /v1/completions and the original console's POST /chat."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from ..runtime.types import (
    FinishEvent,
    GenerationRequest,
    SamplingParams,
    TokenEvent,
    new_request_id,
)
from .batch import Batch, ChoiceResult, ClientGone, RequestTimedOut
from .context import ApiContext
from .errors import ApiError
from .middleware import request_info
from .openai_format import (
    ChunkWriter,
    chat_response,
    completion_response,
    usage_dict,
)
from .request_log import RequestInfo
from .schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    LegacyChatRequest,
)
from .sse import DONE, SSEResponse

router = APIRouter()
log = logging.getLogger("npu_console.engine.api")

CLIENT_CLOSED = 499  # nginx's code for "client closed request": only ever seen in the log


def context(request: Request) -> ApiContext:
    return request.app.state.ctx


def served_model(ctx: ApiContext, batch: Batch, requested: str | None) -> str:
    """The id the answer reports: what the engine resolved (a default when none was named)."""
    name = getattr(batch.handles[0], "model", None) if batch.handles else None
    if name:
        return name
    if requested:
        return requested
    models = ctx.engine.models()
    return models[0].name if models else "unknown"


def check_choices(n: int, prompts: int, limit: int) -> None:
    if n * prompts > limit:
        what = f"n={n}" if prompts == 1 else f"n={n} x {prompts} prompts"
        raise ApiError(400, f"{what} asks for {n * prompts} choices; this server allows at most "
                            f"{limit} per request", param="n")


def _fill_info(info: RequestInfo, results: list[ChoiceResult]) -> None:
    finished = [r for r in results if r.finish is not None]
    if not finished:
        return
    usage = usage_dict(results)
    info.prompt_tokens = usage["prompt_tokens"]
    info.completion_tokens = usage["completion_tokens"]
    info.ttft_s = finished[0].finish.timings.ttft_s
    info.finish_reason = finished[0].finish.finish_reason
    errors = [r.finish.error for r in finished if r.finish.finish_reason == "error"]
    if errors:
        info.error = errors[0]


def _raise_engine_failure(results: list[ChoiceResult]) -> None:
    for r in results:
        if r.finish is not None and r.finish.finish_reason == "error":
            raise ApiError(500, f"generation failed: {r.finish.error or 'engine error'}",
                           code="engine_error", error_type="server_error")


def _delta(writer: ChunkWriter, index: int, reasoning: str, text: str) -> bytes:
    """One chunk: the answer text, or reasoning_content (with any answer text after it)."""
    if reasoning and writer.chat:
        return writer.reasoning(index, reasoning, text)
    return writer.text(index, text)


async def _stream(batch: Batch, writer: ChunkWriter, info: RequestInfo,
                  echo_prompts: list[str] | None = None) -> AsyncIterator[bytes]:
    results = [ChoiceResult(index=i, prompt_index=i // batch.n) for i in range(len(batch.handles))]
    try:
        for r in results:
            if writer.chat:
                yield writer.role(r.index)
            elif echo_prompts:
                yield writer.text(r.index, echo_prompts[r.prompt_index])
        interval = batch.ctx.settings.stream_interval_ms / 1000.0
        async for group in batch.event_groups(interval):
            # one write per group; with an interval, the tokens of a choice that arrived
            # together become one delta, without one each keeps its own chunk
            out: list[bytes] = []
            pending: dict[int, tuple[list[str], list[str]]] = {}  # reasoning, answer pieces
            for i, ev in group:
                if isinstance(ev, TokenEvent):
                    if (ev.text or ev.reasoning) and not interval:
                        out.append(_delta(writer, i, ev.reasoning, ev.text))
                    elif ev.text or ev.reasoning:
                        reasoning, text = pending.setdefault(i, ([], []))
                        reasoning.append(ev.reasoning)
                        text.append(ev.text)
                elif isinstance(ev, FinishEvent):
                    if i in pending:
                        reasoning, text = pending.pop(i)
                        out.append(_delta(writer, i, "".join(reasoning), "".join(text)))
                    results[i].finish = ev
                    if ev.finish_reason == "error":
                        out.append(writer.error(f"generation failed: {ev.error or 'engine error'}",
                                                code="engine_error"))
                    out.append(writer.finish(i, ev))
            out.extend(_delta(writer, i, "".join(r), "".join(t)) for i, (r, t) in pending.items())
            if out:
                yield b"".join(out)
        if writer.include_usage:
            yield writer.usage(results)
        yield DONE
    except Exception as exc:  # the 200 is out: end the stream as OpenAI does
        if isinstance(exc, RequestTimedOut):
            info.error = message = exc.message
            yield writer.error(message, exc.error_type, code=exc.code)
        else:
            log.exception("stream failed after its first bytes")
            info.error = message = f"internal error ({type(exc).__name__})"
            yield writer.error(f"the stream failed: {message}", code="internal_error")
        yield DONE
    finally:
        batch.close()  # a client that left mid-stream lands here: its requests are cancelled
        _fill_info(info, results)


async def _answer(request: Request, batch: Batch, info: RequestInfo, stream: bool,
                  writer: ChunkWriter, build, echo_prompts: list[str] | None = None) -> Response:
    if stream:
        return SSEResponse(_stream(batch, writer, info, echo_prompts),
                           write_timeout_s=batch.ctx.settings.stream_write_timeout_s)
    return await _json_answer(request, batch, info, build)


async def _json_answer(request: Request, batch: Batch, info: RequestInfo, build) -> Response:
    """The one non-streaming answer: wait for every choice (a client that leaves cancels them),
    log it, turn an engine failure into its error, else `build(results)` as JSON."""
    try:
        results = await batch.collect_unless_gone(request.receive)
    except ClientGone:
        info.error = "client disconnected"
        return Response(status_code=CLIENT_CLOSED)
    _fill_info(info, results)
    _raise_engine_failure(results)
    return JSONResponse(build(results))


def _begin(body: ChatCompletionRequest | CompletionRequest,
           request: Request) -> tuple[ApiContext, RequestInfo]:
    """What both OpenAI routes do first: their context, the request's log entry, and a 400 for
    fields the engine does not support."""
    ctx = context(request)
    info = request_info(request.state)
    info.stream = body.stream
    body.refuse_unsupported()
    return ctx, info


@router.post("/v1/chat/completions", tags=["openai"])
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    ctx, info = _begin(body, request)
    messages = body.engine_messages()
    check_choices(body.n, 1, ctx.settings.max_n)
    if ctx.settings.log_prompts:
        info.prompt = json.dumps(messages, ensure_ascii=False)
    rid = new_request_id("chatcmpl")
    reqs = [GenerationRequest(
        messages=messages, model=body.model or None,
        request_id=f"{rid}-{j}" if body.n > 1 else rid,
        params=body.sampling(ctx.settings.default_max_tokens, body.completion_budget(), j,
                             ctx.settings.model_defaults))
        for j in range(body.n)]
    batch = Batch(ctx, reqs, body.n, {"prompt": "messages", "prompt_token_ids": "messages"})
    await batch.submit_async()
    model = info.model = served_model(ctx, batch, body.model)
    writer = ChunkWriter(rid, model, chat=True, include_usage=body.include_usage())
    return await _answer(request, batch, info, body.stream, writer,
                         lambda results: chat_response(rid, model, results))


@router.post("/v1/completions", tags=["openai"])
async def completions(body: CompletionRequest, request: Request) -> Response:
    ctx, info = _begin(body, request)
    prompts = body.prompts()
    if body.echo and not all(isinstance(p, str) for p in prompts):
        raise ApiError(400, "echo is only supported for text prompts", param="echo")
    check_choices(body.n, len(prompts), ctx.settings.max_n)
    if ctx.settings.log_prompts:
        info.prompt = json.dumps(prompts, ensure_ascii=False)
    rid = new_request_id("cmpl")
    reqs = []
    for p_idx, p in enumerate(prompts):
        for j in range(body.n):
            k = p_idx * body.n + j
            reqs.append(GenerationRequest(
                prompt=p if isinstance(p, str) else None,
                prompt_token_ids=None if isinstance(p, str) else p,
                model=body.model or None,
                request_id=f"{rid}-{k}" if len(prompts) * body.n > 1 else rid,
                params=body.sampling(ctx.settings.default_max_tokens, None, j,
                                     ctx.settings.model_defaults)))
    batch = Batch(ctx, reqs, body.n, {"prompt_token_ids": "prompt"})
    await batch.submit_async()
    model = info.model = served_model(ctx, batch, body.model)
    echo = list(prompts) if body.echo else None
    writer = ChunkWriter(rid, model, chat=False, include_usage=body.include_usage())
    return await _answer(request, batch, info, body.stream, writer,
                         lambda results: completion_response(rid, model, results, echo), echo)


@router.post("/chat", tags=["console"])
async def legacy_chat(body: LegacyChatRequest, request: Request) -> Response:
    """The original console's endpoint: raw prompt in, {response, usage} out."""
    ctx = context(request)
    info = request_info(request.state)
    if ctx.settings.log_prompts:
        info.prompt = body.prompt
    req = GenerationRequest(prompt=body.prompt, model=body.model or None,
                            request_id=new_request_id("chat"),
                            params=SamplingParams(max_tokens=body.max_length,
                                                  temperature=body.temperature, top_p=body.top_p))
    batch = Batch(ctx, [req], 1)
    await batch.submit_async()
    info.model = served_model(ctx, batch, body.model)

    def build(results: list[ChoiceResult]) -> dict:
        usage = usage_dict(results)
        usage.pop("prompt_tokens_details", None)
        return {"response": results[0].text, "usage": usage}
    return await _json_answer(request, batch, info, build)
