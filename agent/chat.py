"""Chat rendering for token-in/token-out rollouts.

The initial prompt is rendered once with the model's own chat template. After that the
context only grows: the sampled response ids are appended exactly as sampled, then the
observation is appended as a *token delta*, the tokens the template puts between the end of an
assistant turn and the start of the next generation. A conversation is never re-tokenized, so
turn t+1's prompt ids always start with turn t's prompt ids + response ids.

Templates without tool support get the tool schemas in the system message, in the
Hermes/Qwen convention that `envs.tool_calls` parses.
"""
from __future__ import annotations

import json
from typing import Any

_USER = "\u2402USER_PLACEHOLDER\u2403"
_ASSISTANT = "\u2402ASSISTANT_PLACEHOLDER\u2403"


def tools_system_text(tools: list[dict[str, Any]]) -> str:
    """Hermes-style tool instructions for templates that cannot render `tools` themselves."""
    schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{schemas}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


class ChatRenderer:
    """Renders prompts and observation deltas with one tokenizer's chat template."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; token-exact rollouts need one")
        self.tok = tokenizer
        self.native_tools = self._template_renders_tools()
        stops = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        for name in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
            tid = tokenizer.convert_tokens_to_ids(name)
            if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
                stops.add(tid)
        self.stop_token_ids: list[int] = sorted(stops)
        self._delta_cache: dict[str, str] = {}  # role -> template text between turns

    # ---- text level --------------------------------------------------------------------
    def _apply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool) -> str:
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": gen}
        if tools and self.native_tools:
            kwargs["tools"] = tools
        return self.tok.apply_chat_template(messages, **kwargs)

    def _template_renders_tools(self) -> bool:
        probe = [{"role": "user", "content": "x"}]
        tool = [{"type": "function", "function": {"name": "zz_probe_tool", "parameters": {"type": "object"}}}]
        try:
            return "zz_probe_tool" in self.tok.apply_chat_template(probe, tools=tool, tokenize=False)
        except Exception:
            return False

    def prepare_messages(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """Messages as the template will see them (tool text merged into the system message)."""
        msgs = [dict(m) for m in messages]
        if tools and not self.native_tools:
            text = tools_system_text(tools)
            if msgs and msgs[0]["role"] == "system":
                msgs[0]["content"] = f"{msgs[0]['content']}\n\n{text}"
            else:
                msgs.insert(0, {"role": "system", "content": text})
        return msgs

    def prompt_text(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        return self._apply(self.prepare_messages(messages, tools), tools, gen=True)

    # ---- token level -------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Token ids of the whole conversation plus the generation prompt (rendered once)."""
        return self.encode(self.prompt_text(messages, tools))

    def observation_delta(self, message: dict[str, Any], response_ids: list[int]) -> list[int]:
        """Tokens that close the sampled assistant turn, add `message`, and open a new one."""
        role = message["role"]
        content = message["content"] if isinstance(message["content"], str) else json.dumps(message["content"])
        between = self._between(role)
        # `between` starts with whatever closes an assistant turn (e.g. "<|im_end|>\n"); if the
        # sampler already produced that closing token, do not add it twice.
        if response_ids and response_ids[-1] in self.stop_token_ids:
            closing = self.tok.decode([response_ids[-1]])
            if closing and between.startswith(closing):
                between = between[len(closing):]
        return self.encode(between.replace(_USER, content))

    def _between(self, role: str) -> str:
        """Template text from the end of an assistant message to the next generation prompt,
        with the observation content as a placeholder (computed once per role)."""
        if role not in self._delta_cache:
            base = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _ASSISTANT}]
            full = self._apply(base + [{"role": role, "content": _USER}], None, gen=True)
            head = self._apply(base, None, gen=False)
            cut = head.index(_ASSISTANT) + len(_ASSISTANT)
            if not full.startswith(head[:cut]):
                raise ValueError("chat template is not prefix-preserving; token deltas are not possible")
            between = full[cut:]
            if between.count(_USER) != 1:
                raise ValueError(f"chat template did not render a {role!r} message once")
            self._delta_cache[role] = between
        return self._delta_cache[role]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)

    def response_text(self, response_ids: list[int]) -> str:
        """The action text of a sampled response: everything before a final stop token."""
        ids = response_ids[:-1] if response_ids and response_ids[-1] in self.stop_token_ids else response_ids
        return self.decode(ids)
