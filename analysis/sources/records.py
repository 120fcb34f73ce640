"""What the results store gives the analysis besides the tidy frame: every system's
per-question scores (for the stratified analyses) and how each cell ran (for the site)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SystemScores:
    """One system's per-question F1 (percent) on every test set it was evaluated on."""

    system: str
    scores: Mapping[str, Mapping[str, float]]  # testset -> question id -> F1


@dataclass(frozen=True)
class RunInfo:
    """What only our own store knows: how each cell ran, what failed, and the logs.

    ``runs`` are result rows (bundle, testset, runner, device, image_digest, bundle_digest,
    wall_s, log_sha256, ...); ``failures`` are failure rows; ``read_log(sha256)`` returns a
    stored log's bytes or None; ``names`` maps bundle ids to display names for bundles that
    only failed (they have no row in the tidy frame).
    """

    runs: Sequence[Mapping] = ()
    failures: Sequence[Mapping] = ()
    read_log: Callable[[str], bytes | None] = field(default=lambda sha: None)
    names: Mapping[str, str] = field(default_factory=dict)
