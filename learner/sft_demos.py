"""Demonstrations as training samples, token for token as a rollout would produce them.

A demonstration is a chat: an oracle episode of an env (run through the Runner) or a transcript
from a JSONL file (`{"messages": [...], "tools": [...]}` per line, OpenAI format). Both are
rendered by `DemoActor`, which keeps the token context as `ModelActor` does (the prompt rendered
once, then grows by the response ids and the observation delta) with the demonstrated text in
place of a sample: its tokens plus the token that closes an assistant turn, so the model also
learns to stop where the sampler would.

One sample per demonstration: prompt = the first prompt, response = everything after it, loss
mask 1 on the assistant tokens only. Each turn's prompt is a prefix of the next one, so under
causal attention the logits at the assistant positions are exactly those of one sample per
turn, for one forward pass over the transcript instead of one per turn (quadratic in turns).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agent.actors import Action, Actor
from agent.chat import ChatRenderer
from agent.rollout import EpisodeJob, Runner
from agent.turn import Turn
from envs.base import AgentEnv, NextState
from envs.tool_calls import render_tool_call
from learner.samples import Sample

ROLES = ("system", "user", "assistant", "tool")


class DemoError(ValueError):
    """A demonstration file that cannot be used; the message names the file and line."""


class DemoActor:
    """Acts out `source`'s text (an oracle, a script) with the exact ids a model's turn would have."""

    def __init__(self, renderer: ChatRenderer, source: Actor) -> None:
        self.renderer = renderer
        self.source = source
        self.ids: list[int] = []
        delta = renderer.observation_delta({"role": "user", "content": ""}, [])
        # the template's text after an assistant message starts with the token that ends it
        self.close = delta[:1] if delta and delta[0] in renderer.stop_token_ids else []

    def begin(self, env: AgentEnv | None, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        self.source.begin(env, messages, tools)
        self.ids = self.renderer.render_prompt(messages, tools)

    async def act(self) -> Action:
        text = (await self.source.act()).text
        response = self.renderer.encode(text) + self.close
        return Action(text=text, prompt_ids=list(self.ids), response_ids=response, rollout_logprobs=[0.0] * len(response))

    def observe(self, action: Action, next_state: NextState) -> None:
        self.source.observe(action, next_state)
        delta = self.renderer.observation_delta({"role": next_state.role, "content": next_state.content}, action.response_ids)
        self.ids = action.prompt_ids + action.response_ids + delta

    async def end(self) -> None:
        await self.source.end()


class ScriptActor:
    """Says the given texts in order (a transcript's assistant messages)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = iter(texts)

    def begin(self, env: AgentEnv | None, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        pass

    async def act(self) -> Action:
        return Action(text=next(self.texts))

    def observe(self, action: Action, next_state: NextState) -> None:
        pass

    async def end(self) -> None:
        pass


def demo_sample(turns: Sequence[Turn | Action], meta: dict[str, Any]) -> Sample:
    """One sample over a demonstration's turns: loss on the response ids of each turn only."""
    prompt = list(turns[0].prompt_ids)
    ids, mask = list(prompt), []
    for t in turns:
        if t.prompt_ids[: len(ids)] != ids:
            raise ValueError("a turn's prompt does not extend the previous turn's context")
        mask += [0] * (len(t.prompt_ids) - len(ids)) + [1] * len(t.response_ids)
        ids = list(t.prompt_ids) + list(t.response_ids)
    n = len(ids) - len(prompt)
    return Sample(prompt, ids[len(prompt):], [0.0] * n, [0.0] * n, mask, meta)


# ---- oracle episodes ---------------------------------------------------------------------
def pick_tasks(task_ids: list[str], n: int, seed: int) -> list[str]:
    """`n` task ids drawn with a seed (without repeats while there are enough)."""
    if not task_ids or n <= 0:
        return []
    rng = np.random.default_rng(seed)
    return [task_ids[int(k)] for k in rng.choice(len(task_ids), size=n, replace=n > len(task_ids))]


async def oracle_demos(runner: Runner, task_ids: list[str], tag: str, seed: int) -> tuple[list[Sample], dict[str, Any]]:
    """Oracle episodes of `task_ids` (the runner's actors are DemoActors around the oracle);
    the successful ones (outcome > 0) become samples. Returns them and a record of what ran."""
    rng = np.random.default_rng(seed)
    jobs = [EpisodeJob(f"{tag}-{i}", tid, f"{tag}-{i}", seed=int(rng.integers(2**31))) for i, tid in enumerate(task_ids)]
    episodes = await runner.run(jobs)
    kept = [e for e in episodes if e.turns and e.outcome is not None and e.outcome > 0]
    samples = [demo_sample(e.turns, {"task_id": e.job.task_id, "episode_id": e.job.episode_id, "source": "oracle"})
               for e in kept]
    failed = {e.job.episode_id: {"task_id": e.job.task_id, "outcome": e.outcome, "status": e.status}
              for e in episodes if not any(e is k for k in kept)}
    return samples, {"task_ids": [s.meta["task_id"] for s in samples], "failed": failed}


# ---- JSONL transcripts -------------------------------------------------------------------
@dataclasses.dataclass
class Transcript:
    messages: list[dict[str, str]]  # role + content, tool calls rendered into the text
    tools: list[dict[str, Any]]
    line: int
    task_id: str | None = None


def read_transcripts(path: str | Path, limit: int | None = None) -> list[Transcript]:
    """The first `limit` transcripts of a JSONL file (all when None); a bad line raises one
    DemoError naming it."""
    p = Path(path)
    if not p.is_file():
        raise DemoError(f"demonstrations file {p} does not exist (mode.demos takes oracle or a JSONL path)")
    out: list[Transcript] = []
    with p.open() as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                out.append(_transcript(json.loads(line), lineno))
            except (json.JSONDecodeError, ValueError, TypeError, KeyError) as e:
                raise DemoError(f"{p}:{lineno}: {e}") from None
    if not out:
        raise DemoError(f"{p} holds no transcripts")
    return out


def _transcript(obj: Any, lineno: int) -> Transcript:
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
        raise ValueError('expected an object with a "messages" list')
    messages = [_message(m, i) for i, m in enumerate(obj["messages"])]
    roles = [m["role"] for m in messages]
    if "assistant" not in roles:
        raise ValueError("no assistant message: nothing to learn from")
    first, last = roles.index("assistant"), len(roles) - 1 - roles[::-1].index("assistant")
    for i in range(first, last):  # a rollout alternates: action, one next state, action, ...
        if (roles[i] == "assistant") == (roles[i + 1] == "assistant"):
            what = "assistant" if roles[i] == "assistant" else "non-assistant"
            raise ValueError(f"messages {i} and {i + 1} are both {what} messages; between its first and last assistant "
                             "message a transcript must alternate assistant and one other message (merge them)")
    tools = obj.get("tools") or []
    if not isinstance(tools, list):
        raise ValueError('"tools" must be a list of tool schemas')
    task_id = obj.get("task_id")
    return Transcript(messages, tools, lineno, None if task_id is None else str(task_id))


def _message(m: Any, i: int) -> dict[str, str]:
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise ValueError(f"message {i} needs a role among {', '.join(ROLES)}")
    content = m.get("content")
    if isinstance(content, list):  # OpenAI content parts: only text can be rendered
        if not all(isinstance(part, dict) and part.get("type") == "text" for part in content):
            raise ValueError(f"message {i}: only text content parts are supported")
        content = "".join(str(part.get("text", "")) for part in content)
    if content is not None and not isinstance(content, str):
        raise ValueError(f"message {i}: content must be a string, a list of text parts or null")
    text = content or ""
    calls = m.get("tool_calls") or []
    if calls and m["role"] != "assistant":
        raise ValueError(f"message {i}: only assistant messages carry tool_calls")
    rendered = []
    for c in calls:  # the text a model writes for a call, as the envs parse it
        fn = c["function"]
        args = json.loads(fn["arguments"]) if isinstance(fn.get("arguments"), str) else fn.get("arguments", {})
        rendered.append(render_tool_call(str(fn["name"]), args))
    text = "\n".join([text, *rendered] if text else rendered)
    if not text and m["role"] == "assistant":
        raise ValueError(f"message {i}: an assistant message without content or tool calls")
    return {"role": m["role"], "content": text}


async def replay(renderer: ChatRenderer, t: Transcript) -> Sample:
    """A transcript rendered as a rollout of it would have been: one sample, loss on assistant text."""
    first = next(i for i, m in enumerate(t.messages) if m["role"] == "assistant")
    last = max(i for i, m in enumerate(t.messages) if m["role"] == "assistant")
    actor = DemoActor(renderer, ScriptActor([m["content"] for m in t.messages[first:] if m["role"] == "assistant"]))
    actor.begin(None, t.messages[:first], t.tools)
    actions: list[Action] = []
    for i in range(first, last + 1):
        m = t.messages[i]
        if m["role"] == "assistant":
            actions.append(await actor.act())
        else:
            actor.observe(actions[-1], NextState(m["role"], m["content"], "demo"))
    return demo_sample(actions, {"line": t.line, "task_id": t.task_id, "source": "jsonl"})
