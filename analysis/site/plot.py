"""An inline SVG scatter for a model page: the other models on one set against their
reference, their linear trend, y = x, and the model's own point with its intervals.

Written as text, not drawn with matplotlib: a site holds a page per model with a plot per
set (a population of 100+ systems makes over a thousand), which as figures would take
minutes. Both axes share one range, so y = x is the diagonal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

SIZE, LEFT, BOTTOM, PAD = 300, 46, 38, 10  # the plot is square: SIZE wide and high in all
PLOT = SIZE - LEFT - PAD  # the side of the plotting area


def trend_svg(others: Sequence[tuple[float, float]], own: dict, intercept: float, slope: float,
              x_label: str, y_label: str, title: str) -> str:
    """The plot as one `<svg>` element. `own` holds x, y and their bounds (x_lo, x_hi, y_lo,
    y_hi; NaN where a cell has no interval)."""
    bounds = [v for p in others for v in p] + [
        v for k in ("x", "y", "x_lo", "x_hi", "y_lo", "y_hi")
        if math.isfinite(v := float(own.get(k, math.nan)))]
    lo, hi = _domain(min(bounds), max(bounds))

    def sx(v: float) -> float:
        return LEFT + (v - lo) / (hi - lo) * PLOT

    def sy(v: float) -> float:
        return PAD + (hi - v) / (hi - lo) * PLOT

    parts = [f'<svg class="trend" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SIZE} '
             f'{SIZE}" width="{SIZE}" height="{SIZE}" role="img"><title>{escape(title)}</title>',
             f'<rect x="{LEFT}" y="{PAD}" width="{PLOT}" height="{PLOT}" fill="none" '
             f'stroke="#888"/>']
    for tick in _ticks(lo, hi):
        label = f"{tick:g}"
        parts.append(f'<line x1="{sx(tick):.1f}" y1="{PAD + PLOT}" x2="{sx(tick):.1f}" '
                     f'y2="{PAD + PLOT + 4}" stroke="#888"/><text x="{sx(tick):.1f}" '
                     f'y="{PAD + PLOT + 15}" text-anchor="middle" font-size="10">{label}</text>')
        parts.append(f'<line x1="{LEFT - 4}" y1="{sy(tick):.1f}" x2="{LEFT}" '
                     f'y2="{sy(tick):.1f}" stroke="#888"/><text x="{LEFT - 6}" '
                     f'y="{sy(tick) + 3:.1f}" text-anchor="end" font-size="10">{label}</text>')
    parts.append(f'<text x="{LEFT + PLOT / 2:.1f}" y="{SIZE - 6}" text-anchor="middle" '
                 f'font-size="11">{escape(x_label)}</text>')
    parts.append(f'<text transform="translate(11 {PAD + PLOT / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle" font-size="11">{escape(y_label)}</text>')
    parts.append(f'<line class="diagonal" x1="{sx(lo):.1f}" y1="{sy(lo):.1f}" '
                 f'x2="{sx(hi):.1f}" y2="{sy(hi):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
    segment = _inside(intercept, slope, lo, hi)
    if segment:
        (x1, y1), (x2, y2) = segment
        parts.append(f'<line class="fit" x1="{sx(x1):.1f}" y1="{sy(y1):.1f}" x2="{sx(x2):.1f}" '
                     f'y2="{sy(y2):.1f}" stroke="#2c3e50" stroke-width="1.5"/>')
    parts += [f'<circle class="other" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.2" '
              f'fill="#9aa5b1"/>' for x, y in others]
    x, y = float(own["x"]), float(own["y"])
    for a, b, horizontal in ((own.get("x_lo"), own.get("x_hi"), True),
                             (own.get("y_lo"), own.get("y_hi"), False)):
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            continue
        ends = (sx(a), sy(y), sx(b), sy(y)) if horizontal else (sx(x), sy(a), sx(x), sy(b))
        parts.append('<line class="interval" x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" '
                     'stroke="crimson"/>'.format(*ends))
    parts.append(f'<circle class="own" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="5" fill="crimson" '
                 f'stroke="black"/></svg>')
    return "".join(parts)


def _domain(low: float, high: float) -> tuple[float, float]:
    """The axes' shared range: the data with a margin, kept inside [0, 100]."""
    margin = max((high - low) * 0.05, 0.5)
    return max(0.0, low - margin), min(100.0, high + margin)


def _ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """Round ticks (1, 2 or 5 times a power of ten apart) inside [lo, hi], at most `most`."""
    raw = (hi - lo) / most
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step) + 1)]


def _inside(intercept: float, slope: float, lo: float, hi: float
            ) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The part of the line y = intercept + slope x inside the square [lo, hi]², or None."""
    x1, x2 = lo, hi
    if slope != 0:
        ends = sorted(((lo - intercept) / slope, (hi - intercept) / slope))
        x1, x2 = max(x1, ends[0]), min(x2, ends[1])
    elif not lo <= intercept <= hi:
        return None
    if x1 >= x2:
        return None
    return (x1, intercept + slope * x1), (x2, intercept + slope * x2)
