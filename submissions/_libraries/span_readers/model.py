"""What a reader is to the training loop: a module whose forward maps a batch to start and
end logits over the passage tokens (padding at -inf), with the loss and the decoding every
boundary model uses. A reader that scores whole spans (RaSoR) overrides both."""

from __future__ import annotations

import torch
from torch import nn


class SpanReader(nn.Module):
    def __init__(self, spec: dict):
        super().__init__()
        self.spec = spec

    def loss(self, b: dict, gold: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the gold start plus that of the gold end."""
        start, end = self(b)
        return nn.functional.cross_entropy(start, gold[:, 0]) + \
            nn.functional.cross_entropy(end, gold[:, 1])

    def best_spans(self, b: dict, max_answer: int) -> list[tuple[int, int]]:
        """Argmax of p(start) p(end) over start <= end < start + max_answer, per row."""
        start, end = self(b)
        scores = start.log_softmax(-1).unsqueeze(2) + end.log_softmax(-1).unsqueeze(1)
        n = scores.shape[1]
        allowed = torch.ones(n, n, device=scores.device).triu().tril(max_answer - 1).bool()
        best = scores.masked_fill(~allowed, -torch.inf).flatten(1).argmax(-1)
        return [divmod(k, n) for k in best.tolist()]
