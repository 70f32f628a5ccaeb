"""The official Python `openai` package against a running `webart serve`.

Usage: python3 openai_sdk.py BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8000/v1)

Runs each check, asserting in Python; prints one JSON line per check ({"check", "ok", "error"?}) and
exits 1 if any failed. Run by packages/webart/src/cli/serve/python-sdk.test.ts.
"""

import base64
import json
import sys
import traceback
from typing import Literal

import openai
from pydantic import BaseModel, Field

BASE_URL, MODEL = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=300)
MESSAGES = [
    {"role": "system", "content": "You play tic-tac-toe."},
    {"role": "user", "content": "  1 2 3\nA . . .\nB . x .\nC . . .\nYour move?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "place_mark",
            "description": "Place your mark on a cell",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"cell": {"type": "string", "enum": ["A1", "A2", "B2"]}},
                "required": ["cell"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "resign",
            "strict": True,
            "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
        },
    },
]


def check_chat():
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, seed=1)
    c = r.choices[0]
    assert r.object == "chat.completion", r.object
    assert r.model == MODEL, r.model
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content, c.message
    assert c.finish_reason in ("stop", "length"), c.finish_reason
    assert 1 <= r.usage.completion_tokens <= 8, r.usage
    assert r.usage.prompt_tokens > 20, r.usage


def check_stream_logprobs():
    req = dict(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=1.2, seed=5, logprobs=True, top_logprobs=2)
    whole = client.chat.completions.create(**req)
    text, logprobs, finish, usage = "", [], None, None
    stream = client.chat.completions.create(**req, stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.delta.content or ""
            if ch.logprobs and ch.logprobs.content:
                logprobs += ch.logprobs.content
            finish = ch.finish_reason or finish
    expected = whole.choices[0]
    assert text == expected.message.content, (text, expected.message.content)
    assert finish == expected.finish_reason, finish
    got = [(t.token, t.logprob, [x.token for x in t.top_logprobs]) for t in logprobs]
    want = [(t.token, t.logprob, [x.token for x in t.top_logprobs]) for t in expected.logprobs.content]
    assert got == want, (got, want)
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens, usage


def check_tools_required():
    r = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=200, seed=4
    )
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c.finish_reason
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.id, call
    args = json.loads(call.function.arguments)
    assert call.function.name in ("place_mark", "resign"), call.function.name
    if call.function.name == "place_mark":
        assert args["cell"] in ("A1", "A2", "B2"), args
    # The same call streamed, put back together by the SDK's stream helper (strict tools are parsed).
    with client.chat.completions.stream(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=200, seed=4
    ) as stream:
        final = stream.get_final_completion()
    streamed = final.choices[0].message.tool_calls[0]
    assert final.choices[0].finish_reason == "tool_calls"
    assert (streamed.function.name, streamed.function.arguments) == (call.function.name, call.function.arguments)
    assert streamed.function.parsed_arguments == args, streamed.function.parsed_arguments


class Move(BaseModel):
    cell: Literal["A1", "B2", "C3"]
    confidence: float = Field(ge=0, le=1)
    row: int = Field(ge=1, le=3)


def check_json_schema():
    # A pydantic model through parse(): the strict schema it sends has titles, enums and numeric bounds.
    r = client.chat.completions.parse(
        model=MODEL, messages=MESSAGES, response_format=Move, max_tokens=200, temperature=1.0, seed=9
    )
    move = r.choices[0].message.parsed
    assert isinstance(move, Move), r.choices[0].message
    assert 0 <= move.confidence <= 1 and 1 <= move.row <= 3, move
    schema = {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}}
    try:
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema}},
        )
        raise AssertionError("a schema with format was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and '"format" at #/properties/at' in e.message, e.message


def check_n():
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=1.5, seed=3, n=2)
    assert [c.index for c in r.choices] == [0, 1], r.choices
    assert all(c.message.content is not None for c in r.choices)


def check_guided_choice():
    # vLLM's guided_choice, as Python users send it: through extra_body.
    choices = ["<move>A1</move>", "<move>B2</move>", "<move>C3</move>"]
    r = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=12,
        temperature=1.5,
        seed=5,
        n=4,
        extra_body={"guided_choice": choices},
    )
    assert all(c.message.content in choices for c in r.choices), [c.message.content for c in r.choices]
    # webart's extensions ride along as extra fields: the sampled ids, and the set each was drawn from (base64
    # bitmasks, one index per token), which the move's tokens must be in.
    for c in r.choices:
        extra = c.model_extra
        ids, allowed = extra["token_ids"], extra["token_allowed"]
        assert len(allowed["of"]) == len(ids), (len(allowed["of"]), len(ids))
        for tid, k in zip(ids, allowed["of"]):
            mask = base64.b64decode(allowed["sets"][k])
            assert mask[tid >> 3] >> (tid & 7) & 1, (tid, k)


def check_errors():
    try:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=4)
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.code == "model_not_found", (e.status_code, e.code)
    try:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=5)
        raise AssertionError("temperature 5 was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.param == "temperature", (e.status_code, e.param)
        assert "temperature: 5 is out of range" in e.message, e.message


CHECKS = [
    check_chat,
    check_stream_logprobs,
    check_tools_required,
    check_json_schema,
    check_guided_choice,
    check_n,
    check_errors,
]

failed = 0
for check in CHECKS:
    try:
        check()
        print(json.dumps({"check": check.__name__, "ok": True}), flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported, then the exit code says so
        failed += 1
        detail = "".join(traceback.format_exception(e))
        print(json.dumps({"check": check.__name__, "ok": False, "error": detail}), flush=True)
sys.exit(1 if failed else 0)
