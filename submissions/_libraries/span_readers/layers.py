"""Building blocks the readers share: masked recurrences and softmax, the word (and
character) embedder, BiDAF's attention flow, gated self-matching, fully-aware attention,
semantic fusion units, the boundary pointer, and QANet's convolution blocks."""

from __future__ import annotations

import math

import torch
from torch import nn

NEG = -1e30


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~mask, NEG), dim)


def encode(rnn: nn.RNNBase, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Run a batch-first (bidirectional) LSTM or GRU over the real tokens of each row only."""
    lengths = mask.sum(1).clamp(min=1).cpu()
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                               enforce_sorted=False)
    out, _ = rnn(packed)
    return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]


def birnn(cell: str, size: int, hidden: int, layers: int = 1, dropout: float = 0.0
          ) -> nn.RNNBase:
    kind = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
    return kind(size, hidden, layers, batch_first=True, bidirectional=True,
                dropout=dropout if layers > 1 else 0.0)


def pool(x: torch.Tensor, mask: torch.Tensor, score: nn.Module) -> torch.Tensor:
    """Attention pooling: a learned score per token, softmax over the real ones, weighted sum."""
    weights = masked_softmax(score(x).squeeze(-1), mask)
    return (weights.unsqueeze(-1) * x).sum(1)


class CharCNN(nn.Module):
    """Character embeddings, one convolution of width 5, max over the word (Kim 2014)."""

    def __init__(self, n_chars: int, dim: int, filters: int):
        super().__init__()
        self.embed = nn.Embedding(n_chars, dim, padding_idx=0)
        self.conv = nn.Conv1d(dim, filters, 5, padding=2)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        b, n, w = chars.shape
        x = self.embed(chars.view(b * n, w)).transpose(1, 2)
        return torch.relu(self.conv(x)).max(-1).values.view(b, n, -1)


class Embedder(nn.Module):
    """Fixed 300-d word vectors (a trained UNK vector for words without one), trained offsets
    for the `tuned` most frequent question words, with `char_filters` > 0 a character CNN,
    and with `contextual` a frozen pre-trained encoder's states per token (`*_ctx`, the
    place of CoVe or ELMo); dropout on the result. `size` is the width of what it returns."""

    def __init__(self, spec: dict):
        super().__init__()
        filters = int(spec.get("char_filters", 0))
        self.unk = nn.Parameter(torch.zeros(300))
        self.offset = nn.Embedding(int(spec["tuned"]) + 1, 300, padding_idx=0)
        nn.init.zeros_(self.offset.weight)
        self.chars = CharCNN(int(spec["n_chars"]), int(spec["char_dim"]), filters) \
            if filters else None
        self.contextual = int(spec.get("contextual_size", 0)) if spec.get("contextual") else 0
        self.dropout = nn.Dropout(float(spec["dropout"]))
        self.size = 300 + filters + self.contextual

    def forward(self, b: dict, side: str) -> torch.Tensor:
        vec, known = b[f"{side}_vec"], b[f"{side}_known"]
        x = torch.where(known.unsqueeze(-1), vec, self.unk.expand_as(vec))
        x = x + self.offset(b[f"{side}_ids"])
        if self.chars is not None:
            x = torch.cat([x, self.chars(b[f"{side}_chars"])], -1)
        if self.contextual:
            x = torch.cat([x, b[f"{side}_ctx"]], -1)
        return self.dropout(x)


class Highway(nn.Module):
    def __init__(self, size: int, layers: int = 2):
        super().__init__()
        self.transform = nn.ModuleList(nn.Linear(size, size) for _ in range(layers))
        self.gate = nn.ModuleList(nn.Linear(size, size) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for transform, gate in zip(self.transform, self.gate, strict=True):
            g = torch.sigmoid(gate(x))
            x = g * torch.relu(transform(x)) + (1 - g) * x
        return x


class Trilinear(nn.Module):
    """BiDAF's similarity S_ij = w . [c_i; q_j; c_i * q_j], without forming the triples."""

    def __init__(self, size: int):
        super().__init__()
        self.c, self.q = nn.Linear(size, 1), nn.Linear(size, 1, bias=False)
        self.cq = nn.Parameter(torch.empty(size).uniform_(-1 / math.sqrt(size),
                                                          1 / math.sqrt(size)))

    def forward(self, c: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return self.c(c) + self.q(q).transpose(1, 2) + (c * self.cq) @ q.transpose(1, 2)


class AttentionFlow(nn.Module):
    """Context-to-query and query-to-context attention (Seo et al. 2017):
    [c; c2q; c * c2q; c * q2c], four times the input width."""

    def __init__(self, size: int):
        super().__init__()
        self.similarity = Trilinear(size)

    def forward(self, c, q, c_mask, q_mask):
        s = self.similarity(c, q)
        c2q = masked_softmax(s, q_mask.unsqueeze(1)) @ q
        best = s.masked_fill(~q_mask.unsqueeze(1), NEG).max(-1).values
        q2c = (masked_softmax(best, c_mask).unsqueeze(1) @ c).expand_as(c)
        return torch.cat([c, c2q, c * c2q, c * q2c], -1)


class SelfMatch(nn.Module):
    """Gated self-matching (Wang et al. 2017, R-Net): each token attends over the passage
    (itself excluded), the token and its summary pass a sigmoid gate."""

    def __init__(self, size: int, hidden: int):
        super().__init__()
        self.key, self.query = nn.Linear(size, hidden), nn.Linear(size, hidden)
        self.gate = nn.Linear(2 * size, 2 * size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        s = torch.relu(self.query(x)) @ torch.relu(self.key(x)).transpose(1, 2)
        n = x.shape[1]
        allowed = mask.unsqueeze(1) & ~torch.eye(n, dtype=torch.bool, device=x.device)
        summary = masked_softmax(s, allowed) @ x
        joined = torch.cat([x, summary], -1)
        return torch.sigmoid(self.gate(joined)) * joined


class FullyAware(nn.Module):
    """Fully-aware attention (Huang et al. 2018): scores relu(U x_i)^T D relu(U y_j) with a
    diagonal D over the histories of words, then the values `v` weighted by them."""

    def __init__(self, size: int, hidden: int):
        super().__init__()
        self.project = nn.Linear(size, hidden, bias=False)
        self.diagonal = nn.Parameter(torch.ones(hidden))

    def forward(self, x_how, y_how, values, y_mask, exclude_self: bool = False):
        s = (torch.relu(self.project(x_how)) * self.diagonal) @ \
            torch.relu(self.project(y_how)).transpose(1, 2)
        allowed = y_mask.unsqueeze(1).expand_as(s)
        if exclude_self:
            allowed = allowed & ~torch.eye(s.shape[1], dtype=torch.bool, device=s.device)
        return masked_softmax(s, allowed) @ values


class SFU(nn.Module):
    """Semantic fusion unit (Hu et al. 2018): a gate between the input and a fused update."""

    def __init__(self, size: int, fusion: int):
        super().__init__()
        self.update = nn.Linear(size + fusion, size)
        self.gate = nn.Linear(size + fusion, size)

    def forward(self, x: torch.Tensor, fusion: torch.Tensor) -> torch.Tensor:
        joined = torch.cat([x, fusion], -1)
        g = torch.sigmoid(self.gate(joined))
        return g * torch.tanh(self.update(joined)) + (1 - g) * x


class BoundaryPointer(nn.Module):
    """A two-step pointer network (Wang & Jiang 2017, boundary model): attention over the
    passage gives start logits; the attended passage updates a GRU state that points at the
    end. The state starts from a question summary (R-Net) or zeros."""

    def __init__(self, size: int, state: int, hidden: int):
        super().__init__()
        self.passage, self.state = nn.Linear(size, hidden), nn.Linear(state, hidden, bias=False)
        self.score = nn.Linear(hidden, 1, bias=False)
        self.cell = nn.GRUCell(size, state)

    def _point(self, h, state, mask):
        logits = self.score(torch.tanh(self.passage(h) + self.state(state).unsqueeze(1)))
        return logits.squeeze(-1).masked_fill(~mask, NEG)

    def forward(self, h: torch.Tensor, mask: torch.Tensor, state: torch.Tensor):
        start = self._point(h, state, mask)
        read = (torch.softmax(start, -1).unsqueeze(-1) * h).sum(1)
        return start, self._point(h, self.cell(read, state), mask)


def positions(n: int, size: int, device) -> torch.Tensor:
    """Sinusoidal position encodings (Vaswani et al. 2017)."""
    position = torch.arange(n, device=device, dtype=torch.float32).unsqueeze(1)
    rate = torch.exp(torch.arange(0, size, 2, device=device, dtype=torch.float32)
                     * (-math.log(10000.0) / size))
    out = torch.zeros(n, size, device=device)
    out[:, 0::2] = torch.sin(position * rate)
    out[:, 1::2] = torch.cos(position * rate)[:, :size // 2]
    return out


class ConvBlock(nn.Module):
    """QANet's encoder block (Yu et al. 2018): positions, `convs` depthwise-separable
    convolutions, multi-head self-attention and a feed-forward layer, each as
    layer-norm -> layer -> dropout -> residual."""

    def __init__(self, size: int, convs: int, kernel: int, heads: int, dropout: float):
        super().__init__()
        self.depthwise = nn.ModuleList(nn.Conv1d(size, size, kernel, padding=kernel // 2,
                                                 groups=size) for _ in range(convs))
        self.pointwise = nn.ModuleList(nn.Conv1d(size, size, 1) for _ in range(convs))
        self.norms = nn.ModuleList(nn.LayerNorm(size) for _ in range(convs + 2))
        self.attention = nn.MultiheadAttention(size, heads, dropout=dropout, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(size, size), nn.ReLU(), nn.Linear(size, size))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + positions(x.shape[1], x.shape[2], x.device)
        for norm, depthwise, pointwise in zip(self.norms, self.depthwise, self.pointwise,
                                              strict=False):
            y = pointwise(depthwise(norm(x).transpose(1, 2))).transpose(1, 2)
            x = x + self.dropout(torch.relu(y))
        y = self.norms[-2](x)
        y = self.attention(y, y, y, key_padding_mask=~mask, need_weights=False)[0]
        x = x + self.dropout(y)
        x = x + self.dropout(self.ff(self.norms[-1](x)))
        return x * mask.unsqueeze(-1)
