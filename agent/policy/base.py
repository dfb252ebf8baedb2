"""The one policy-client interface (docs/architecture.md, "Policy").

Every model-backed policy speaks token ids: `generate` samples a continuation with the
log-prob of every sampled token; `score` returns the log-probs of given ids under the model
(prefill only, for teachers). `SGLangClient` implements it over SGLang's native HTTP API; the
embedded engine serves the same routes, so one client talks to both.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

from agent.policy.jsonhttp import ServerError


class PolicyUnavailable(ServerError):
    """The policy server is gone and could not be brought back: the run cannot go on (the
    runner lets this one through instead of recording a lost episode)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


@dataclasses.dataclass
class SamplingParams:
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: list[int] = dataclasses.field(default_factory=list)
    seed: int | None = None

    def to_sglang(self) -> dict[str, Any]:
        """The `sampling_params` object of SGLang's /generate."""
        d: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
        }
        if self.stop_token_ids:
            d["stop_token_ids"] = list(self.stop_token_ids)
        if self.seed is not None:
            d["sampling_seed"] = self.seed
        return d


@dataclasses.dataclass
class GenerateResult:
    output_ids: list[int]
    logprobs: list[float]  # one per output id: log p(token | prefix) under the serving weights
    finish_reason: str  # "stop" (a stop token was sampled) or "length"
    weight_version: int = 0  # the policy version that sampled this (bumped on each weight update)
    text: str = ""


@runtime_checkable
class PolicyClient(Protocol):
    async def generate(self, input_ids: list[int], sampling: SamplingParams) -> GenerateResult: ...

    async def score(self, input_ids: list[int], start: int) -> list[float]:
        """Log-probs of input_ids[start:] given everything before each (prefill only)."""
        ...

    async def update_weights(self, model_path: str, weight_version: int | None = None) -> int:
        """Load new weights from a folder; returns the new weight version."""
        ...

    async def health(self) -> bool: ...

    async def aclose(self) -> None: ...
