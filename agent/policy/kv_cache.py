"""The engine's batch KV cache: transformers' DynamicCache with room to grow.

DynamicCache appends each step's keys and values with `torch.cat`, so every decode step copies
the whole cache of every layer (and, on a CPU, page-faults a fresh allocation of it): a third of a
bf16 decode step of SmolLM2-135M at 8 x 800 tokens went there. Here each full-attention layer
keeps spare columns and a step writes only its new ones; `keys` and `values` stay views of the
filled columns, so code that reads them or replaces them (the engine merges batches and drops
rows by assigning new tensors) works unchanged: a replaced tensor moves into fresh room at the
next update. Other layer kinds (sliding windows) keep transformers' own behaviour.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedConfig
from transformers.cache_utils import DynamicLayer

SPARE_MIN = 64  # columns of room added at least, so short decodes never reallocate
SPARE_FRACTION = 0.25  # and at least this share of the filled length, so reallocations stay rare


class RoomyLayer(DynamicLayer):
    """A full-attention layer that appends into preallocated columns instead of concatenating."""

    def __init__(self) -> None:
        super().__init__()
        self._room: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args,
               **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, t = self.get_seq_length(), key_states.shape[-2]
        if not self._fits(n + t):
            self._regrow(key_states, value_states, n + t)
        kroom, vroom = self._room
        kroom[:, :, n:n + t] = key_states
        vroom[:, :, n:n + t] = value_states
        self.keys, self.values = kroom[:, :, :n + t], vroom[:, :, :n + t]
        return self.keys, self.values

    def reset(self) -> None:
        self._room = None
        super().reset()

    def _fits(self, n: int) -> bool:
        """Whether `keys`/`values` are still views of the room's start and the room holds n columns."""
        if self._room is None:
            return False
        kroom, vroom = self._room
        return (n <= kroom.shape[2] and _view_of(self.keys, kroom) and _view_of(self.values, vroom))

    def _regrow(self, key_states: torch.Tensor, value_states: torch.Tensor, n: int) -> None:
        cap = n + max(SPARE_MIN, int(n * SPARE_FRACTION))
        filled = self.get_seq_length()
        rooms = []
        for old, new in ((self.keys, key_states), (self.values, value_states)):
            b, h, _, d = new.shape
            room = new.new_empty(b, h, cap, d)
            if filled:
                room[:, :, :filled] = old
            rooms.append(room)
        self._room = (rooms[0], rooms[1])


def _view_of(x: torch.Tensor, room: torch.Tensor) -> bool:
    return (x.data_ptr() == room.data_ptr() and x.shape[:2] == room.shape[:2] and x.shape[3] == room.shape[3]
            and x.stride() == room.stride())


class RoomyCache(DynamicCache):
    """DynamicCache whose full-attention layers are RoomyLayers."""

    def __init__(self, config: PreTrainedConfig) -> None:
        super().__init__(config=config)
        self.layers = [RoomyLayer() if type(layer) is DynamicLayer else layer for layer in self.layers]
