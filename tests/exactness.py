"""What is exact when two float32 training computations differ only in summation order.

Two learners (or one learner with another micro-batch split, or TP/PP ranks) compute the same
gradient in another order: another micro-batch split, another kernel, a sum over ranks, AMX or
AVX2. Float32 addition is not associative, so the gradients agree to a few units in the last
place of the tensor's larger entries, not bit for bit:

- Gradients: |a - b| <= GRAD_RTOL |b| + GRAD_ATOL_SCALE * max|b| per tensor. A reordered sum of
  n terms errs by at most about n u sum|terms| (u = 2^-24); the terms here are of the size of the
  tensor's larger entries and n is at most some hundreds, so 1e-5 of the tensor's scale bounds
  it with a margin. A real mismatch (a micro-batch weighted wrongly, a missing all-reduce, a
  conversion error) moves gradients by a sizeable fraction of their scale and fails.
- Weights after one AdamW step are NOT within a fixed tolerance: the first step moves each weight
  by lr g / (|g| + eps), so where |g| is near eps a last-bit difference in g moves the weight by
  up to about lr. What is exact is the gap: given each side's gradient, the weights differ by
  exactly -lr (g_a / (|g_a| + eps) - g_b / (|g_b| + eps)) (weight decay is the same on both),
  up to the float32 rounding of the weights themselves; on a later step, the same from the
  moments both sides hold (`assert_adam_step_matches`).
"""
from __future__ import annotations

import torch

GRAD_RTOL = 1e-4
GRAD_ATOL_SCALE = 1e-5


def assert_grads_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    """Every gradient in `want` is in `got` and within the summation-order tolerance above."""
    missing = set(want) - set(got)
    assert not missing, f"gradients missing: {sorted(missing)[:3]}"
    for name, b in want.items():
        atol = GRAD_ATOL_SCALE * float(b.abs().max()) + 1e-12
        torch.testing.assert_close(got[name].cpu(), b.cpu(), rtol=GRAD_RTOL, atol=atol, msg=lambda m: f"{name}: {m}")


def adam_move(g: torch.Tensor, lr: float, eps: float, betas: tuple[float, float], step: int,
              moments: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """AdamW's move of a weight (weight decay aside) at `step` (1-based) for gradient g, from the
    moments (exp_avg, exp_avg_sq) before the step (None: zeros, the first step)."""
    b1, b2 = betas
    m, v = moments if moments is not None else (torch.zeros_like(g), torch.zeros_like(g))
    m_hat = (b1 * m + (1 - b1) * g) / (1 - b1 ** step)
    v_hat = (b2 * v + (1 - b2) * g * g) / (1 - b2 ** step)
    return -lr * m_hat / (v_hat.sqrt() + eps)


def assert_adam_step_matches(weights_a: dict[str, torch.Tensor], weights_b: dict[str, torch.Tensor],
                             grads_a: dict[str, torch.Tensor], grads_b: dict[str, torch.Tensor], lr: float,
                             eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.98), step: int = 1,
                             moments: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
    """After one AdamW step from the same weights and moments, a - b equals the gap the two
    gradients imply, to a few float32 units in the last place of the weights."""
    weights_a, weights_b, grads_a, grads_b = ({k: v.cpu() for k, v in d.items()} for d in (weights_a, weights_b, grads_a, grads_b))
    moments = None if moments is None else {k: (m.cpu(), v.cpu()) for k, (m, v) in moments.items()}
    for name, wb in weights_b.items():  # compared on the CPU: a learner on a GPU hands over its tensors where they are
        prior = moments[name] if moments is not None else None
        gap = (adam_move(grads_a[name], lr, eps, betas, step, prior)
               - adam_move(grads_b[name], lr, eps, betas, step, prior))
        ulp = float(torch.finfo(torch.float32).eps) * float(wb.abs().max())
        torch.testing.assert_close(weights_a[name].detach() - wb.detach(), gap, rtol=0.0, atol=4 * ulp + 1e-9,
                                   msg=lambda m: f"{name}: {m}")
