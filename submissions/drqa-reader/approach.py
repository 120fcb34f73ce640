"""The Document Reader of DrQA (Chen, Fisch, Weston & Bordes 2017), sized for a CPU.

Each passage token is a fixed 300-d word vector (spaCy `en_core_web_md`, fastText-trained on
OSCAR, Wikipedia, OpenSubtitles and news: the stand-in for GloVe here; words without one share
a trained UNK vector) joined with: exact-match flags (the token, its lower case, its lemma in
the question), its term frequency in the passage, an aligned question embedding (attention of
the token over the question's word vectors) and, with `features: true`, one-hot POS and NER
tags from the same spaCy pipeline (without, no tagger runs and a lemma is the lower case). As
in the paper, only the embeddings of the `tune_top` most frequent question words are
fine-tuned (here: a trained offset added to their fixed vector). A `layers`-deep BiLSTM of
`hidden` units encodes the passage; another encodes the question, pooled by learned
self-attention; bilinear terms score each token as start and as end. Prediction takes the
best start <= end within `max_answer` tokens. Adamax, dropout on embeddings and between
layers, gradient clipping at 10, as in the paper; the train and predict commands are
`span_readers.loop`'s.
"""

import sys

import torch
from span_readers import layers, loop
from span_readers.model import SpanReader
from torch import nn


class DocumentReader(SpanReader):
    def __init__(self, spec: dict):
        super().__init__(spec)
        h, depth, d = int(spec["hidden"]), int(spec["layers"]), float(spec["dropout"])
        self.embed = layers.Embedder(spec)
        self.align = nn.Linear(300, 300)
        self.passage = layers.birnn("lstm", 600 + int(spec["feature_width"]), h, depth, d)
        self.question = layers.birnn("lstm", 300, h, depth, d)
        self.pool = nn.Linear(2 * h, 1)
        self.start = nn.Linear(2 * h, 2 * h, bias=False)
        self.end = nn.Linear(2 * h, 2 * h, bias=False)
        self.dropout = nn.Dropout(d)

    def forward(self, b: dict):
        pm, qm = b["p_mask"], b["q_mask"]
        p, q = self.embed(b, "p"), self.embed(b, "q")
        scores = torch.relu(self.align(p)) @ torch.relu(self.align(q)).transpose(1, 2)
        aligned = layers.masked_softmax(scores, qm.unsqueeze(1)) @ q
        h = self.dropout(layers.encode(self.passage, torch.cat([p, aligned, b["p_feat"]], -1),
                                       pm))
        summary = layers.pool(layers.encode(self.question, q, qm), qm, self.pool)
        start = (h @ self.start(summary).unsqueeze(-1)).squeeze(-1)
        end = (h @ self.end(summary).unsqueeze(-1)).squeeze(-1)
        return start.masked_fill(~pm, layers.NEG), end.masked_fill(~pm, layers.NEG)


if __name__ == "__main__":
    sys.exit(loop.main(DocumentReader))
