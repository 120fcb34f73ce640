"""Match-LSTM with the boundary answer pointer (Wang & Jiang 2017), sized for a CPU.

An LSTM reads the passage and one reads the question (word vectors only, as the paper). For
each passage token an additive attention over the question gives a question summary; the
token and its summary feed a bidirectional match-LSTM. A two-step pointer network points at
the start, then (its state updated by what it read) at the end.

Deviation, for speed: the paper's attention at token i also sees the match-LSTM's state at
i-1; here it sees the token alone, so all attentions are computed at once and the match-LSTM
is a plain (packed) BiLSTM over [token; summary].
"""

import sys

import torch
from span_readers import layers, loop
from span_readers.model import SpanReader
from torch import nn


class MatchLSTM(SpanReader):
    def __init__(self, spec: dict):
        super().__init__(spec)
        h = int(spec["hidden"])
        self.embed = layers.Embedder(spec)
        self.passage = nn.LSTM(self.embed.size, h, batch_first=True)
        self.question = nn.LSTM(self.embed.size, h, batch_first=True)
        self.wq, self.wp = nn.Linear(h, h, bias=False), nn.Linear(h, h)
        self.score = nn.Linear(h, 1, bias=False)
        self.match = layers.birnn("lstm", 2 * h, h)
        self.pointer = layers.BoundaryPointer(2 * h, h, h)
        self.dropout = nn.Dropout(float(spec["dropout"]))

    def forward(self, b: dict):
        p_mask, q_mask = b["p_mask"], b["q_mask"]
        hp = layers.encode(self.passage, self.embed(b, "p"), p_mask)
        hq = layers.encode(self.question, self.embed(b, "q"), q_mask)
        g = torch.tanh(self.wq(hq).unsqueeze(1) + self.wp(hp).unsqueeze(2))  # (B, P, Q, h)
        alpha = layers.masked_softmax(self.score(g).squeeze(-1), q_mask.unsqueeze(1))
        hr = layers.encode(self.match, torch.cat([hp, alpha @ hq], -1), p_mask)
        state = hr.new_zeros(hr.shape[0], self.pointer.cell.hidden_size)
        return self.pointer(self.dropout(hr), p_mask, state)


if __name__ == "__main__":
    sys.exit(loop.main(MatchLSTM))
