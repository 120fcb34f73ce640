"""BiDAF++ (Clark & Gardner 2018, the paragraph model of "Simple and Effective Multi-Paragraph
Reading Comprehension"), sized for a CPU.

Word vectors and a character CNN; a shared BiGRU encodes passage and question; BiDAF's
attention flow (trilinear similarity, context-to-query and query-to-context) gives
[c; c2q; c*c2q; c*q2c], a linear ReLU layer reduces it. A residual self-attention layer: a
BiGRU, trilinear self-attention with the diagonal masked, [x; a; x*a] through a linear ReLU
layer, added to its input. Prediction: a BiGRU and a linear layer give start logits; another
BiGRU over [states; start states] gives end logits. With `contextual: true` a frozen
all-MiniLM-L6-v2's states per token join the word vectors, where AllenNLP's leaderboard
entry (BiDAF + Self Attention + ELMo) had ELMo.
"""

import sys

import torch
from span_readers import layers, loop
from span_readers.model import SpanReader
from torch import nn


class BiDAFPlusPlus(SpanReader):
    def __init__(self, spec: dict):
        super().__init__(spec)
        h, d = int(spec["hidden"]), float(spec["dropout"])
        self.embed = layers.Embedder(spec)
        self.encoder = layers.birnn("gru", self.embed.size, h)
        self.flow = layers.AttentionFlow(2 * h)
        self.reduce = nn.Sequential(nn.Linear(8 * h, 2 * h), nn.ReLU())
        self.self_encoder = layers.birnn("gru", 2 * h, h)
        self.self_similarity = layers.Trilinear(2 * h)
        self.self_reduce = nn.Sequential(nn.Linear(6 * h, 2 * h), nn.ReLU())
        self.start_rnn = layers.birnn("gru", 2 * h, h)
        self.end_rnn = layers.birnn("gru", 4 * h, h)
        self.start, self.end = nn.Linear(2 * h, 1), nn.Linear(2 * h, 1)
        self.dropout = nn.Dropout(d)

    def forward(self, b: dict):
        pm, qm = b["p_mask"], b["q_mask"]
        c = layers.encode(self.encoder, self.embed(b, "p"), pm)
        q = layers.encode(self.encoder, self.embed(b, "q"), qm)
        x = self.reduce(self.dropout(self.flow(c, q, pm, qm)))
        s = layers.encode(self.self_encoder, self.dropout(x), pm)
        sim = self.self_similarity(s, s)
        allowed = pm.unsqueeze(1) & ~torch.eye(sim.shape[1], dtype=torch.bool, device=s.device)
        a = layers.masked_softmax(sim, allowed) @ s
        x = x + self.self_reduce(torch.cat([s, a, s * a], -1))
        h_start = layers.encode(self.start_rnn, self.dropout(x), pm)
        h_end = layers.encode(self.end_rnn, self.dropout(torch.cat([x, h_start], -1)), pm)
        return (self.start(h_start).squeeze(-1).masked_fill(~pm, layers.NEG),
                self.end(h_end).squeeze(-1).masked_fill(~pm, layers.NEG))


if __name__ == "__main__":
    sys.exit(loop.main(BiDAFPlusPlus))
