"""The interface the run drives a learner through (learner/training.py, experiments/factories.py);
`learner=torch` (learner/torch_learner.py) and `learner=megatron` (learner/megatron_learner.py)
implement it. Both write the same checkpoint folder (learner/checkpoints.py), so either resumes
the other's."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from learner.samples import Sample


class Learner(Protocol):
    tokenizer: Any
    step: int  # optimizer steps taken

    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        """One PPO optimizer step on `samples`; returns the step's figures."""
        ...

    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """Current-policy log-probs of each sample's loss tokens (in loss-mask order)."""
        ...

    def save_weights(self, path: str | os.PathLike) -> Path:
        """An HF folder the serving engine loads (/update_weights_from_disk)."""
        ...

    def save_checkpoint(self, directory: str | os.PathLike, step: int, policy_version: int) -> Path:
        """Weights, optimizer and RNG state and counters, written atomically to `directory`."""
        ...

    def load_checkpoint(self, directory: str | os.PathLike) -> dict[str, Any]:
        """Restore what save_checkpoint wrote; returns {"step", "policy_version"}."""
        ...

    def close(self) -> None:
        """Release what the learner holds beyond memory (megatron: the other ranks)."""
        ...
