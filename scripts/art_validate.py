"""Validates trajectory files exported by `webart export --format art` the way OpenPipe ART loads them: each line a
TrajectoryGroup of Trajectories (pydantic models with ART's field types), whose messages_and_choices are plain message
dicts or OpenAI `Choice` objects. For every Choice that carries logprobs, it checks what ART's tokenizers read from it:
vLLM's `token_ids` / `prompt_token_ids` (newer ART) with one logprobs.content entry per token, and the
"token_id:N" tokens (older ART) naming the same ids. Needs only pydantic and openai; used by
packages/webart/src/cli/export.test.ts, which skips it when they are missing.

usage: python3 scripts/art_validate.py FILE.jsonl...   (prints a JSON summary; exits 1 on the first problem)
"""

import json
import math
import sys
from typing import Union

import pydantic
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.chat.chat_completion import Choice

Scalar = Union[float, int, str, bool, None]
# As ART types them: a message (OpenAI's message params) or a Choice.
MessageOrChoice = Union[ChatCompletionMessageParam, Choice]


class History(pydantic.BaseModel):
    messages_and_choices: list[MessageOrChoice]
    tools: list[ChatCompletionToolParam] | None = None


class Trajectory(pydantic.BaseModel):
    messages_and_choices: list[MessageOrChoice]
    tools: list[ChatCompletionToolParam] | None = None
    additional_histories: list[History] = []
    reward: float
    metrics: dict[str, Union[float, int, bool]] = {}
    metadata: dict[str, Scalar] = {}
    logs: list[str] = []


class CapturedException(pydantic.BaseModel):
    type: str
    message: str
    traceback: str


class TrajectoryGroup(pydantic.BaseModel):
    trajectories: list[Trajectory]
    exceptions: list[CapturedException] = []


def check_choice(c: Choice, where: str) -> int:
    """The number of trainable tokens in a Choice (0 when it carries no logprobs)."""
    if c.logprobs is None:
        return 0
    content = c.logprobs.content or []
    extra = c.model_extra or {}
    ids, prompt = extra.get("token_ids"), extra.get("prompt_token_ids")
    if not isinstance(ids, list) or not isinstance(prompt, list) or not prompt:
        raise ValueError(f"{where}: a Choice with logprobs needs token_ids and prompt_token_ids")
    if len(content) != len(ids):
        raise ValueError(f"{where}: {len(content)} logprobs for {len(ids)} token_ids")
    for k, (e, i) in enumerate(zip(content, ids)):
        if e.token != f"token_id:{i}" or int(e.token.split(":")[1]) != i:
            raise ValueError(f"{where}: token {k} is {e.token!r}, token_ids has {i}")
        if not math.isfinite(e.logprob) or e.logprob > 0:
            raise ValueError(f"{where}: token {k} has logprob {e.logprob}")
        if e.bytes is None or not all(0 <= b < 256 for b in e.bytes):
            raise ValueError(f"{where}: token {k} has bytes {e.bytes}")
    return len(ids)


def main() -> None:
    groups = trajectories = choices = tokens = 0
    for path in sys.argv[1:]:
        for n, line in enumerate(open(path), 1):
            if not line.strip():
                continue
            g = TrajectoryGroup.model_validate_json(line)
            groups += 1
            for ti, t in enumerate(g.trajectories):
                trajectories += 1
                for hi, h in enumerate([t, *t.additional_histories]):
                    for mi, m in enumerate(h.messages_and_choices):
                        if isinstance(m, Choice):
                            choices += 1
                            tokens += check_choice(m, f"{path}:{n}: trajectory {ti} history {hi} item {mi}")
                        elif "role" not in m:
                            raise ValueError(f"{path}:{n}: trajectory {ti} item {mi} is neither a message nor a Choice")
    print(json.dumps({"groups": groups, "trajectories": trajectories, "choices": choices, "tokens": tokens}))


if __name__ == "__main__":
    try:
        main()
    except (ValueError, pydantic.ValidationError) as e:
        print(str(e), file=sys.stderr)
        sys.exit(1)
