"""FusionNet (Huang, Zhu, Shen & Chen 2018): fully-aware attention over the history of word,
sized for a CPU.

Input: word vectors, DrQA's token features (exact match, term frequency; with `features: true`
also POS and NER tags, the "external features" Liu et al. vary) and a word-level
fully-aware attention of each passage word over the question's vectors. Reading: two BiLSTMs
per side give low- and high-level concepts; a BiLSTM over both understands the question.
Fully-aware multi-level fusion: three attentions scored on the history of word
[vector; low; high] (relu(Ux)^T D relu(Uy)) fuse the question's low, high and understanding
levels into each passage word; a BiLSTM reads the fused passage. Fully-aware self-boosted
fusion: the passage attends over itself on the longer history, a last BiLSTM understands it.
Output: a bilinear start against the attention-pooled question, a GRU step over what the
start read, a bilinear end.

CoVe vectors (the paper's contextual input) have no installable encoder here; with
`contextual: true` a frozen all-MiniLM-L6-v2's states per token take their place.
"""

import sys

import torch
from span_readers import layers, loop
from span_readers.model import SpanReader
from torch import nn


class FusionNet(SpanReader):
    def __init__(self, spec: dict):
        super().__init__(spec)
        h, d, a = int(spec["hidden"]), float(spec["dropout"]), int(spec["attention"])
        self.embed = layers.Embedder(spec)
        e = self.embed.size
        self.word_attention = layers.FullyAware(e, a)
        self.low_p = layers.birnn("lstm", 2 * e + int(spec["feature_width"]), h)
        self.low_q = layers.birnn("lstm", e, h)
        self.high_p, self.high_q = layers.birnn("lstm", 2 * h, h), layers.birnn("lstm", 2 * h, h)
        self.understand_q = layers.birnn("lstm", 4 * h, h)
        how = e + 4 * h
        self.fuse = nn.ModuleList(layers.FullyAware(how, a) for _ in range(3))
        self.fused = layers.birnn("lstm", 10 * h, h)
        self.self_boost = layers.FullyAware(how + 8 * h, a)
        self.understand_p = layers.birnn("lstm", 4 * h, h)
        self.question_pool = nn.Linear(2 * h, 1)
        self.start, self.end = nn.Linear(2 * h, 2 * h, bias=False), nn.Linear(2 * h, 2 * h,
                                                                               bias=False)
        self.step = nn.GRUCell(2 * h, 2 * h)
        self.dropout = nn.Dropout(d)

    def forward(self, b: dict):
        pm, qm = b["p_mask"], b["q_mask"]
        p, q = self.embed(b, "p"), self.embed(b, "q")
        aligned = self.word_attention(p, q, q, qm)
        low_p = layers.encode(self.low_p, torch.cat([p, aligned, b["p_feat"]], -1), pm)
        low_q = layers.encode(self.low_q, q, qm)
        high_p = layers.encode(self.high_p, self.dropout(low_p), pm)
        high_q = layers.encode(self.high_q, self.dropout(low_q), qm)
        u_q = layers.encode(self.understand_q, self.dropout(torch.cat([low_q, high_q], -1)), qm)
        how_p, how_q = torch.cat([p, low_p, high_p], -1), torch.cat([q, low_q, high_q], -1)
        fused = [attend(how_p, how_q, values, qm) for attend, values
                 in zip(self.fuse, (low_q, high_q, u_q), strict=True)]
        v = layers.encode(self.fused, self.dropout(torch.cat([low_p, high_p, *fused], -1)), pm)
        how2 = torch.cat([how_p, *fused, v], -1)
        boosted = self.self_boost(how2, how2, v, pm, exclude_self=True)
        u_p = self.dropout(layers.encode(self.understand_p, torch.cat([v, boosted], -1), pm))
        summary = layers.pool(u_q, qm, self.question_pool)
        start = (u_p @ self.start(summary).unsqueeze(-1)).squeeze(-1).masked_fill(~pm,
                                                                                 layers.NEG)
        read = (torch.softmax(start, -1).unsqueeze(-1) * u_p).sum(1)
        state = self.step(read, summary)
        end = (u_p @ self.end(state).unsqueeze(-1)).squeeze(-1).masked_fill(~pm, layers.NEG)
        return start, end


if __name__ == "__main__":
    sys.exit(loop.main(FusionNet))
