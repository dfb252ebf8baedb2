"""AdamW whose two moments are kept in a narrower dtype than the float32 parameters.

Float32 AdamW holds two float32 moments per parameter: twice the model's size (SmolLM2-135M:
1.08 GB of the learner's 2.15). Kept in bfloat16 they take half that. Each step reads a slice of
a moment, updates it in float32 with the gradient, steps the parameter and writes the slice
back, so the arithmetic is AdamW's in float32 and only storage rounds (bfloat16 keeps 8
mantissa bits; with betas (0.9, 0.98) every update moves a moment by 2% or more, well above that
rounding). Slices bound the float32 temporaries to a few MB however large a tensor is.

The update is torch.optim.AdamW's (decoupled weight decay, bias-corrected moments): with
float32 moments it matches it to float rounding.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

SLICE = 1 << 20  # elements per slice: four float32 temporaries of 4 MB each


class AdamW(torch.optim.Optimizer):
    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, state_dtype: torch.dtype = torch.bfloat16) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"AdamW: bad settings lr={lr} betas={betas} eps={eps} weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.state_dtype = state_dtype

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's loader casts the moments to each parameter's dtype; they go back to `state_dtype`."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            for k in ("exp_avg", "exp_avg_sq"):
                if k in state:
                    state[k] = state[k].to(self.state_dtype)

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        if closure is not None:
            raise ValueError("AdamW here takes no closure")
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, dtype=self.state_dtype)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=self.state_dtype)
                state["step"] = state["step"] + 1  # not in place: a loaded state may share the tensor
                t = float(state["step"])
                step_size = lr / (1 - b1 ** t)
                bc2_sqrt = (1 - b2 ** t) ** 0.5
                p.mul_(1 - lr * wd)
                flat_p, flat_g = p.view(-1), p.grad.reshape(-1)
                m, v = state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1)
                for i in range(0, flat_p.numel(), SLICE):
                    j = min(i + SLICE, flat_p.numel())
                    g = flat_g[i:j].float()
                    m32 = m[i:j].float().lerp_(g, 1 - b1)
                    v32 = v[i:j].float().mul_(b2).addcmul_(g, g, value=1 - b2)
                    m[i:j].copy_(m32)
                    v[i:j].copy_(v32)
                    flat_p[i:j].addcdiv_(m32, v32.sqrt().div_(bc2_sqrt).add_(eps), value=-step_size)
