"""RaSoR (Lee, Kwiatkowski, Parikh & Das 2016): recurrent span representations, sized for a CPU.

Each passage token gets a passage-aligned question summary (attention of a feed-forward
projection of its word vector over the question's) and the passage-independent question
summary (attention pooling over a BiLSTM of the question). A two-layer BiLSTM reads
[word; aligned; independent]; a span (s, e) is represented by its end points' states and
scored by a feed-forward layer. The softmax is over every span of at most `max_answer` tokens,
so the loss is the gold span's (a gold answer longer than that is cut to its first
`max_answer` tokens) and prediction takes the best-scoring span.
"""

import sys

import torch
from span_readers import layers, loop
from span_readers.model import SpanReader
from torch import nn


class RaSoR(SpanReader):
    def __init__(self, spec: dict):
        super().__init__(spec)
        h, d = int(spec["hidden"]), float(spec["dropout"])
        self.embed = layers.Embedder(spec)
        e = self.embed.size
        self.align = nn.Sequential(nn.Linear(e, h), nn.ReLU())
        self.question = layers.birnn("lstm", e, h)
        self.question_pool = nn.Linear(2 * h, 1)
        self.passage = layers.birnn("lstm", 2 * e + 2 * h, h, 2, d)
        self.start, self.end = nn.Linear(2 * h, h), nn.Linear(2 * h, h, bias=False)
        self.score = nn.Linear(h, 1)
        self.dropout = nn.Dropout(d)

    def forward(self, b: dict) -> torch.Tensor:
        """Scores (B, P, K): span (s, s + k) for k < K = max_answer; -inf past the passage."""
        p_mask, q_mask = b["p_mask"], b["q_mask"]
        p, q = self.embed(b, "p"), self.embed(b, "q")
        s = self.align(p) @ self.align(q).transpose(1, 2)
        aligned = layers.masked_softmax(s, q_mask.unsqueeze(1)) @ q
        independent = layers.pool(layers.encode(self.question, q, q_mask), q_mask,
                                  self.question_pool)
        x = torch.cat([p, aligned, independent.unsqueeze(1).expand(-1, p.shape[1], -1)], -1)
        h = self.dropout(layers.encode(self.passage, x, p_mask))
        starts, ends = self.start(h), self.end(h)
        k = int(self.spec["max_answer"])
        pad = ends.new_zeros(ends.shape[0], k - 1, ends.shape[2])
        ends = torch.cat([ends, pad], 1).unfold(1, k, 1).transpose(2, 3)  # (B, P, K, h)
        scores = self.score(torch.relu(starts.unsqueeze(2) + ends)).squeeze(-1)
        inside = torch.cat([p_mask, p_mask.new_zeros(p_mask.shape[0], k - 1)], 1)
        return scores.masked_fill(~inside.unfold(1, k, 1), layers.NEG)

    def loss(self, b: dict, gold: torch.Tensor) -> torch.Tensor:
        scores = self(b)
        k = scores.shape[2]
        target = gold[:, 0] * k + (gold[:, 1] - gold[:, 0]).clamp(max=k - 1)
        return nn.functional.cross_entropy(scores.flatten(1), target)

    def best_spans(self, b: dict, max_answer: int) -> list[tuple[int, int]]:
        scores = self(b)
        k = scores.shape[2]
        return [(i // k, i // k + i % k) for i in scores.flatten(1).argmax(-1).tolist()]


if __name__ == "__main__":
    sys.exit(loop.main(RaSoR))
