"""Bi-Directional Attention Flow (BiDAF; Seo, Kembhavi, Farhadi & Hajishirzi 2017), sized for
a CPU.

Layers, as in the paper's section 2: each token is a fixed 300-d word vector (spaCy
`en_core_web_md`, the stand-in for GloVe here; words without one share a trained UNK vector)
joined with a character-level CNN (`char_dim`-d character embeddings, `char_filters` filters of
width 5, max-pooled over the word); a two-layer highway network; a contextual BiLSTM of
`hidden` units shared by passage and question; the attention flow layer (similarity
w^T[h; u; h*u], context-to-query and query-to-context attention, G = [h; u~; h*u~; h*h~]); a
modeling BiLSTM of `modeling_layers` layers; the start from [G; M] and the end from [G; M2],
M2 = a further BiLSTM over M. Prediction takes the span with the highest p(start) * p(end),
start <= end, at most `max_answer` tokens.

Where this differs from the paper, for a 2-core CPU: hidden 64 (paper 100), one modeling
layer (paper 2), 50 character filters (paper 100), Adam at 0.002 (paper AdaDelta at 0.5, 12
epochs) without the exponential moving average of weights, passages cut at `max_passage`
tokens. Sequences are packed, so padding never enters a recurrence. The train and predict
commands are `span_readers.loop`'s.
"""

import sys

import torch
from span_readers import layers, loop
from span_readers.model import SpanReader
from torch import nn


class BiDAF(SpanReader):
    def __init__(self, spec: dict):
        super().__init__(spec)
        h, d = int(spec["hidden"]), float(spec["dropout"])
        self.embed = layers.Embedder(spec)
        self.highway = layers.Highway(self.embed.size)
        self.context = layers.birnn("lstm", self.embed.size, h)
        self.flow = layers.AttentionFlow(2 * h)
        self.modeling = layers.birnn("lstm", 8 * h, h, int(spec["modeling_layers"]), d)
        self.end_rnn = layers.birnn("lstm", 2 * h, h)
        self.start, self.end = nn.Linear(10 * h, 1), nn.Linear(10 * h, 1)
        self.dropout = nn.Dropout(d)

    def forward(self, b: dict):
        pm, qm = b["p_mask"], b["q_mask"]
        c = layers.encode(self.context, self.highway(self.embed(b, "p")), pm)
        q = layers.encode(self.context, self.highway(self.embed(b, "q")), qm)
        g = self.flow(c, q, pm, qm)
        m = layers.encode(self.modeling, self.dropout(g), pm)
        m2 = layers.encode(self.end_rnn, self.dropout(m), pm)
        start = self.start(self.dropout(torch.cat([g, m], -1))).squeeze(-1)
        end = self.end(self.dropout(torch.cat([g, m2], -1))).squeeze(-1)
        return start.masked_fill(~pm, layers.NEG), end.masked_fill(~pm, layers.NEG)


if __name__ == "__main__":
    sys.exit(loop.main(BiDAF))
