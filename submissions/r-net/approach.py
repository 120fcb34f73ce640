"""R-Net (Wang, Yang, Wei, Chang & Zhou 2017), sized for a CPU.

Word vectors and a character CNN feed a BiGRU that encodes passage and question alike. A
gated attention-based recurrent network makes the passage question-aware: each token's
additive attention over the question gives a summary, a sigmoid gate weighs [token; summary],
a BiGRU reads the result. Gated self-matching attention then lets each token gather evidence
from the whole passage (another gate, another BiGRU). A pointer network, its state started
from an attention-pooled question vector, points at start and end.

Deviation, for speed: the paper's attentions also see the recurrent network's previous state;
here they see the token alone, so they are computed at once and the recurrences are plain
(packed) BiGRUs; self-matching uses a multiplicative score.
"""

import sys

import torch
from span_readers import layers, loop
from span_readers.model import SpanReader
from torch import nn


class RNet(SpanReader):
    def __init__(self, spec: dict):
        super().__init__(spec)
        h, d = int(spec["hidden"]), float(spec["dropout"])
        self.embed = layers.Embedder(spec)
        self.encoder = layers.birnn("gru", self.embed.size, h, int(spec["layers"]), d)
        self.wq, self.wp = nn.Linear(2 * h, h, bias=False), nn.Linear(2 * h, h)
        self.score = nn.Linear(h, 1, bias=False)
        self.gate = nn.Linear(4 * h, 4 * h, bias=False)
        self.aware = layers.birnn("gru", 4 * h, h)
        self.self_match = layers.SelfMatch(2 * h, h)
        self.matched = layers.birnn("gru", 4 * h, h)
        self.question_pool = nn.Linear(2 * h, 1)
        self.pointer = layers.BoundaryPointer(2 * h, 2 * h, h)
        self.dropout = nn.Dropout(d)

    def forward(self, b: dict):
        p_mask, q_mask = b["p_mask"], b["q_mask"]
        up = layers.encode(self.encoder, self.embed(b, "p"), p_mask)
        uq = layers.encode(self.encoder, self.embed(b, "q"), q_mask)
        g = torch.tanh(self.wq(uq).unsqueeze(1) + self.wp(up).unsqueeze(2))  # (B, P, Q, h)
        c = layers.masked_softmax(self.score(g).squeeze(-1), q_mask.unsqueeze(1)) @ uq
        joined = torch.cat([up, c], -1)
        vp = layers.encode(self.aware, torch.sigmoid(self.gate(joined)) * joined, p_mask)
        hp = layers.encode(self.matched, self.self_match(self.dropout(vp), p_mask), p_mask)
        rq = layers.pool(uq, q_mask, self.question_pool)
        return self.pointer(self.dropout(hp), p_mask, rq)


if __name__ == "__main__":
    sys.exit(loop.main(RNet))
