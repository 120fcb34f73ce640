"""Mnemonic Reader (Hu, Peng, Huang, Qiu, Wei & Zhou 2018; arXiv:1705.02798v3) without the
reinforcement-learning objective, sized for a CPU.

Encoder: word vectors, a character CNN and DrQA's token features (exact match, term frequency;
with `features: true` also POS and NER, the "external features" Liu et al. vary) pass one
BiLSTM shared by passage and question. Iterative aligner, `hops` times: interactive alignment
(each passage token attends over the question; a semantic fusion unit merges [q~; c*q~; c-q~]
into it), self alignment (the passage attends over itself, itself excluded; another fusion
unit), aggregation (a BiLSTM). Memory-based answer pointer: a memory started from the
attention-pooled question scores starts over [c; z; c*z], is updated by a fusion unit with
what the start read, and scores ends.
"""

import sys

import torch
from span_readers import layers, loop
from span_readers.model import SpanReader
from torch import nn


class Hop(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.interactive = layers.SFU(size, 3 * size)
        self.self_align = layers.SFU(size, 3 * size)
        self.aggregate = layers.birnn("lstm", size, size // 2)

    def forward(self, c, q, pm, qm):
        q_tilde = layers.masked_softmax(c @ q.transpose(1, 2), qm.unsqueeze(1)) @ q
        c_bar = self.interactive(c, torch.cat([q_tilde, c * q_tilde, c - q_tilde], -1))
        s = c_bar @ c_bar.transpose(1, 2)
        allowed = pm.unsqueeze(1) & ~torch.eye(s.shape[1], dtype=torch.bool, device=s.device)
        c_tilde = layers.masked_softmax(s, allowed) @ c_bar
        c_hat = self.self_align(c_bar, torch.cat([c_tilde, c_bar * c_tilde, c_bar - c_tilde],
                                                 -1))
        return layers.encode(self.aggregate, c_hat, pm)


class MnemonicReader(SpanReader):
    def __init__(self, spec: dict):
        super().__init__(spec)
        h, d = int(spec["hidden"]), float(spec["dropout"])
        self.embed = layers.Embedder(spec)
        self.features = int(spec["feature_width"])
        self.encoder = layers.birnn("lstm", self.embed.size + self.features, h)
        self.hops = nn.ModuleList(Hop(2 * h) for _ in range(int(spec["hops"])))
        self.question_pool = nn.Linear(2 * h, 1)
        self.start = nn.Sequential(nn.Linear(6 * h, h), nn.Tanh(), nn.Linear(h, 1))
        self.end = nn.Sequential(nn.Linear(6 * h, h), nn.Tanh(), nn.Linear(h, 1))
        self.memory = layers.SFU(2 * h, 2 * h)
        self.dropout = nn.Dropout(d)

    @staticmethod
    def _point(scorer, c, z, mask):
        z = z.unsqueeze(1).expand_as(c)
        return scorer(torch.cat([c, z, c * z], -1)).squeeze(-1).masked_fill(~mask, layers.NEG)

    def forward(self, b: dict):
        pm, qm = b["p_mask"], b["q_mask"]
        q_in = self.embed(b, "q")
        q_feat = q_in.new_zeros(*q_in.shape[:2], self.features)  # features are the passage's
        c = layers.encode(self.encoder, torch.cat([self.embed(b, "p"), b["p_feat"]], -1), pm)
        q = layers.encode(self.encoder, torch.cat([q_in, q_feat], -1), qm)
        for hop in self.hops:
            c = hop(self.dropout(c), q, pm, qm)
        z = layers.pool(q, qm, self.question_pool)
        start = self._point(self.start, c, z, pm)
        read = (torch.softmax(start, -1).unsqueeze(-1) * c).sum(1)
        return start, self._point(self.end, c, self.memory(z, read), pm)


if __name__ == "__main__":
    sys.exit(loop.main(MnemonicReader))
