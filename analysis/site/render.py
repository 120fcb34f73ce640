"""The site's templates and the filters they format numbers with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from analysis.sources.tidy import SHIFT_SETS

TEMPLATES = Path(__file__).parents[1] / "templates"


def environment():
    import jinja2  # lazy: only building the site needs templates

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(score=_fmt_score, interval=_fmt_interval, signed=_fmt_signed,
                       sortkey=_sortkey)
    env.globals["shift_sets"] = SHIFT_SETS
    return env


def _fmt_score(v, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _fmt_interval(row: Mapping) -> str:
    if row.get("lo") is None or row.get("hi") is None:
        return ""
    return f"[{row['lo']:.2f}, {row['hi']:.2f}]"


def _fmt_signed(v, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, int):
        return f"{v:+d}".replace("-", "−") if v else "0"
    return f"{v:+.{digits}f}".replace("-", "−")


def _sortkey(v) -> str:
    """data-sort value: full precision for numbers, empty (sorted last) when missing."""
    if v is None:
        return ""
    return repr(float(v)) if isinstance(v, float) else str(v)
