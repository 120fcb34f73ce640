"""QANet (Yu, Dohan, Luong, Zhao, Chen, Norouzi & Le 2018), sized for a CPU: no recurrence.

Word vectors and a character CNN pass a two-layer highway network and are projected to
`hidden` units. One encoder block (depthwise-separable convolutions, multi-head
self-attention, feed-forward; layer norm and residuals) encodes passage and question alike.
Context-query attention (the trilinear similarity; context-to-query and DCN's
query-to-context) gives [c; a; c*a; c*b], projected back to `hidden`. A stack of `blocks`
model encoder blocks is applied three times with shared weights (M0, M1, M2); start logits
come from [M0; M1], end logits from [M0; M2].
"""

import sys

import torch
from span_readers import layers, loop
from span_readers.model import SpanReader
from torch import nn


class QANet(SpanReader):
    def __init__(self, spec: dict):
        super().__init__(spec)
        h, d = int(spec["hidden"]), float(spec["dropout"])
        heads, kernel = int(spec["heads"]), int(spec["kernel"])
        self.embed = layers.Embedder(spec)
        self.highway = layers.Highway(self.embed.size)
        self.project = nn.Linear(self.embed.size, h)
        self.encoder = layers.ConvBlock(h, 2, kernel, heads, d)
        self.similarity = layers.Trilinear(h)
        self.resize = nn.Linear(4 * h, h)
        self.model = nn.ModuleList(layers.ConvBlock(h, 2, kernel, heads, d)
                                   for _ in range(int(spec["blocks"])))
        self.start, self.end = nn.Linear(2 * h, 1), nn.Linear(2 * h, 1)

    def _stack(self, x, mask):
        for block in self.model:
            x = block(x, mask)
        return x

    def forward(self, b: dict):
        p_mask, q_mask = b["p_mask"], b["q_mask"]
        c = self.encoder(self.project(self.highway(self.embed(b, "p"))), p_mask)
        q = self.encoder(self.project(self.highway(self.embed(b, "q"))), q_mask)
        s = self.similarity(c, q)
        row = layers.masked_softmax(s, q_mask.unsqueeze(1))
        column = layers.masked_softmax(s, p_mask.unsqueeze(2), dim=1)
        a, bb = row @ q, row @ column.transpose(1, 2) @ c
        m0 = self._stack(self.resize(torch.cat([c, a, c * a, c * bb], -1)), p_mask)
        m1 = self._stack(m0, p_mask)
        m2 = self._stack(m1, p_mask)
        start = self.start(torch.cat([m0, m1], -1)).squeeze(-1)
        end = self.end(torch.cat([m0, m2], -1)).squeeze(-1)
        return start.masked_fill(~p_mask, layers.NEG), end.masked_fill(~p_mask, layers.NEG)


if __name__ == "__main__":
    sys.exit(loop.main(QANet))
