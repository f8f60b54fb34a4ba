"""Leaderboard charts as standalone SVG strings, drawn on the server with the standard library.

Model names and titles are user-controlled, so every piece of input text goes through `_text`
or `_attr`; the output has no scripts, event handlers, external references, `style` attributes
or ids, so it is inert whether inlined into a page (under a strict CSP) or served as an image.
Output is deterministic: the same input always gives the same string.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any
from xml.sax.saxutils import escape

FONT = "system-ui, sans-serif"
EMPTY_MESSAGE = "No counted votes yet"
REFERENCE_RATING = 1000.0
LABEL_CHARS = 28
# Rough mean glyph advance of system-ui at 12px; only used to reserve room for labels.
CHAR_PX = 6.8

INK = "#111827"
MUTED = "#6b7280"
GRID = "#e5e7eb"
STRIPE = "#f9fafb"
ACCENT = "#2563eb"
MISSING_FILL = "#e5e7eb"
MISSING_MARK = "–"

# Diverging scale ends (ColorBrewer RdBu): losing records red, even ones near white, winning blue.
RED = (178, 24, 43)
WHITE = (247, 247, 247)
BLUE = (33, 102, 172)

INTERVAL_WIDTH = 720
INTERVAL_ROW = 28
INTERVAL_TOP = 52
INTERVAL_PLOT_LEFT = 250
INTERVAL_PLOT_RIGHT = INTERVAL_WIDTH - 28

HEATMAP_CELL = 40
HEATMAP_CAPTION = "Row model’s share of wins against the column model (ties count half)"
LEGEND_SWATCH = 16
LEGEND_PX = 11 * LEGEND_SWATCH

# Characters XML 1.0 forbids outright; a name holding one would make the whole SVG unparsable.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


# --- text and numbers -------------------------------------------------------------------------


def _clean(value: str) -> str:
    return _XML_INVALID.sub("", str(value))


def _text(value: str) -> str:
    """Escape for element content."""
    return escape(_clean(value))


def _attr(value: str) -> str:
    """Escape for a double-quoted attribute value."""
    return escape(_clean(value), {'"': "&quot;"})


def _truncate(name: str, limit: int = LABEL_CHARS) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _num(x: float, decimals: int = 1) -> str:
    """Compact number: no trailing zeros and never "-0", so the markup stays small and stable."""
    s = f"{x:.{decimals}f}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s == "-0" else s


def _text_px(text: str, size: float = 12) -> float:
    return len(text) * CHAR_PX * size / 12


# --- shared pieces ----------------------------------------------------------------------------


def _svg_open(width: float, height: float, title: str) -> str:
    # The first <title> child is the accessible name of the whole image.
    w, h = _num(width), _num(height)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" font-family="{FONT}" font-size="12" fill="{INK}">'
        f"<title>{_text(title)}</title>"
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>'
    )


def _title_text(title: str, max_px: float) -> str:
    shown = _truncate(title, max(8, int(max_px / (CHAR_PX * 15 / 12))))
    return (
        f'<text class="chart-title" x="16" y="28" font-size="15" font-weight="600">'
        f"{_text(shown)}</text>"
    )


def _empty_svg(title: str) -> str:
    width, height = 480, 120
    return "".join(
        [
            _svg_open(width, height, title),
            _title_text(title, width - 32),
            f'<text class="empty" x="{width / 2:.0f}" y="78" text-anchor="middle" '
            f'font-size="14" fill="{MUTED}">{EMPTY_MESSAGE}</text>',
            "</svg>",
        ]
    )


# --- interval (forest) plot -------------------------------------------------------------------


def _nice_step(span: float, intervals: int = 4) -> float:
    """Smallest 1/2/2.5/5 x 10^k step giving at most `intervals` gaps over `span`."""
    raw = span / intervals
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 2.5, 5, 10):
        if raw <= multiple * magnitude:
            return multiple * magnitude
    return 10 * magnitude


def _step_decimals(step: float) -> int:
    decimals = 0
    while decimals < 6 and abs(step * 10**decimals - round(step * 10**decimals)) > 1e-9:
        decimals += 1
    return decimals


def _axis(values: Sequence[float]) -> tuple[float, float, list[float], int]:
    """Domain and ticks covering `values` plus a margin, snapped outward to round numbers."""
    lo, hi = min(values), max(values)
    # A zero-width domain (one model, no uncertainty) still needs a readable scale.
    span = max(hi - lo, 20.0)
    middle = (lo + hi) / 2
    lo, hi = min(lo, middle - span / 2), max(hi, middle + span / 2)
    pad = span * 0.05
    lo, hi = lo - pad, hi + pad
    step = _nice_step(hi - lo)
    # Integer multiples of the step avoid float drift piling up across ticks.
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    ticks = [k * step for k in range(first, last + 1)]
    return ticks[0], ticks[-1], ticks, _step_decimals(step)


def _scale(lo: float, hi: float, left: float, right: float) -> Callable[[float], float]:
    def to_x(value: float) -> float:
        return left + (value - lo) / (hi - lo) * (right - left)

    return to_x


def _interval_row(index: int, row: dict[str, Any], to_x: Callable[[float], float]) -> str:
    name = str(row["model"])
    score, ci_low, ci_high = float(row["score"]), float(row["ci_low"]), float(row["ci_high"])
    # Tolerate a reversed interval rather than drawing nothing.
    ci_low, ci_high = min(ci_low, ci_high), max(ci_low, ci_high)
    battles = int(row["n_battles"])
    y = INTERVAL_TOP + index * INTERVAL_ROW + INTERVAL_ROW / 2
    tooltip = (
        f"#{row['rank']} {name}: {_num(score)} "
        f"(95% CI {_num(ci_low)} to {_num(ci_high)}), "
        f"{battles} battle{'' if battles == 1 else 's'}"
    )
    parts = [
        f'<g class="row" data-model="{_attr(name)}">',
        f"<title>{_text(tooltip)}</title>",
        f'<text class="rank" x="40" y="{_num(y + 4)}" text-anchor="end" fill="{MUTED}">'
        f"{_text(str(row['rank']))}</text>",
        f'<text class="label" x="48" y="{_num(y + 4)}">{_text(_truncate(name))}</text>',
        f'<line class="ci" x1="{_num(to_x(ci_low))}" y1="{_num(y)}" x2="{_num(to_x(ci_high))}" '
        f'y2="{_num(y)}" stroke="{ACCENT}" stroke-width="2" stroke-linecap="round" '
        f'stroke-opacity="0.55"/>',
        f'<circle class="dot" cx="{_num(to_x(score))}" cy="{_num(y)}" r="4.5" fill="{ACCENT}" '
        f'stroke="#ffffff" stroke-width="1.5"/>',
        "</g>",
    ]
    return "".join(parts)


def _stripes(rows: int) -> str:
    # Shading every other row guides the eye from a label to its interval; drawn first so the
    # grid lines stay visible on top.
    return "".join(
        f'<rect class="stripe" x="0" y="{_num(INTERVAL_TOP + i * INTERVAL_ROW)}" '
        f'width="{INTERVAL_WIDTH}" height="{INTERVAL_ROW}" fill="{STRIPE}"/>'
        for i in range(1, rows, 2)
    )


def _interval_axis(
    ticks: list[float], decimals: int, to_x: Callable[[float], float], top: float, bottom: float
) -> str:
    parts = []
    for tick in ticks:
        x = _num(to_x(tick))
        parts.append(
            f'<line class="grid" x1="{x}" y1="{_num(top)}" x2="{x}" y2="{_num(bottom)}" '
            f'stroke="{GRID}" stroke-width="1"/>'
            f'<text class="tick" x="{x}" y="{_num(bottom + 16)}" text-anchor="middle" '
            f'font-size="11" fill="{MUTED}">{_num(tick, decimals)}</text>'
        )
    parts.append(
        f'<line class="axis" x1="{INTERVAL_PLOT_LEFT}" y1="{_num(bottom)}" '
        f'x2="{INTERVAL_PLOT_RIGHT}" y2="{_num(bottom)}" stroke="{MUTED}" stroke-width="1"/>'
    )
    return "".join(parts)


def interval_plot_svg(scores: list[dict[str, Any]], *, title: str) -> str:
    """Forest plot of ratings: one row per model (best first), its 95% interval and point score.

    Each dict holds `model`, `score`, `ci_low`, `ci_high`, `rank` and `n_battles`.
    """
    if not scores:
        return _empty_svg(title)
    values = [REFERENCE_RATING]
    for row in scores:
        values += [float(row["score"]), float(row["ci_low"]), float(row["ci_high"])]
    # A NaN would silently collapse the scale; fail loudly so the caller fixes its data.
    if not all(math.isfinite(v) for v in values):
        raise ValueError("scores, ci_low and ci_high must be finite numbers")
    # 1000 is always in the domain: the dashed reference line is what readers compare against.
    lo, hi, ticks, decimals = _axis(values)
    to_x = _scale(lo, hi, INTERVAL_PLOT_LEFT, INTERVAL_PLOT_RIGHT)
    top = INTERVAL_TOP
    bottom = top + len(scores) * INTERVAL_ROW
    height = bottom + 52
    ref_x = _num(to_x(REFERENCE_RATING))
    parts = [
        _svg_open(INTERVAL_WIDTH, height, title),
        _title_text(title, INTERVAL_WIDTH - 32),
        f'<text x="40" y="{top - 8}" text-anchor="end" font-size="11" fill="{MUTED}">#</text>',
        f'<text x="48" y="{top - 8}" font-size="11" fill="{MUTED}">Model</text>',
        _stripes(len(scores)),
        _interval_axis(ticks, decimals, to_x, top, bottom),
        *(_interval_row(i, row, to_x) for i, row in enumerate(scores)),
        # Drawn after the rows so the stripes do not hide it.
        f'<line class="ref" x1="{ref_x}" y1="{_num(top)}" x2="{ref_x}" y2="{_num(bottom)}" '
        f'stroke="{MUTED}" stroke-width="1" stroke-dasharray="4 3" '
        f'data-value="{_num(REFERENCE_RATING)}"/>',
        f'<text class="axis-label" x="{_num((INTERVAL_PLOT_LEFT + INTERVAL_PLOT_RIGHT) / 2)}" '
        f'y="{_num(bottom + 38)}" text-anchor="middle" font-size="11" fill="{MUTED}">'
        f"Rating with 95% interval · dashed line at {_num(REFERENCE_RATING)}</text>",
        "</svg>",
    ]
    return "".join(parts)


# --- win-rate heatmap -------------------------------------------------------------------------


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> str:
    r, g, bl = (round(x + (y - x) * t) for x, y in zip(a, b, strict=True))
    return f"#{r:02x}{g:02x}{bl:02x}"


def _diverging(share: float) -> str:
    share = min(1.0, max(0.0, share))
    if share <= 0.5:
        return _mix(RED, WHITE, share / 0.5)
    return _mix(WHITE, BLUE, (share - 0.5) / 0.5)


def _percent(share: float) -> str:
    return f"{share * 100:.0f}%"


def _cell_tooltip(winner: str, loser: str, share: float | None, count: int, same: bool) -> str:
    if same and share is None:
        return winner
    if share is None:
        return f"{winner} and {loser} have not met"
    return (
        f"{winner} beats {loser} in {_percent(share)} of {count} battle{'' if count == 1 else 's'}"
    )


def _heatmap_cell(x: float, y: float, tooltip: str, share: float | None) -> str:
    if share is None:
        fill, ink, label = MISSING_FILL, MUTED, MISSING_MARK
    else:
        fill = _diverging(share)
        # Saturated ends need light text to stay legible.
        ink = "#ffffff" if abs(share - 0.5) >= 0.3 else INK
        label = _percent(share)
    c = HEATMAP_CELL
    return (
        f'<g class="cell"><title>{_text(tooltip)}</title>'
        f'<rect x="{_num(x)}" y="{_num(y)}" width="{c}" height="{c}" fill="{fill}" '
        f'stroke="#ffffff" stroke-width="1"/>'
        f'<text x="{_num(x + c / 2)}" y="{_num(y + c / 2 + 4)}" text-anchor="middle" '
        f'font-size="11" fill="{ink}">{label}</text></g>'
    )


def _legend(x: float, y: float) -> str:
    # Discrete swatches instead of a gradient: a gradient needs an id, which could clash when
    # several charts are inlined in one page.
    parts = [
        f'<text x="{_num(x)}" y="{_num(y - 6)}" font-size="11" fill="{MUTED}">Win share</text>'
    ]
    for k in range(11):
        parts.append(
            f'<rect x="{_num(x + k * LEGEND_SWATCH)}" y="{_num(y)}" width="{LEGEND_SWATCH}" '
            f'height="10" fill="{_diverging(k / 10)}"/>'
        )
    for k, label in ((0, "0%"), (5, "50%"), (10, "100%")):
        centre = x + (k + 0.5) * LEGEND_SWATCH
        parts.append(
            f'<text x="{_num(centre)}" y="{_num(y + 24)}" text-anchor="middle" font-size="10" '
            f'fill="{MUTED}">{label}</text>'
        )
    return "".join(parts)


def _check_square(
    n: int, win_rate: Sequence[Sequence[object]], counts: Sequence[Sequence[int]]
) -> None:
    for name, grid in (("win_rate", win_rate), ("counts", counts)):
        if len(grid) != n or any(len(row) != n for row in grid):
            raise ValueError(f"{name} must be {n}x{n} to match models")


def winrate_heatmap_svg(
    models: list[str],
    win_rate: list[list[float | None]],
    counts: list[list[int]],
    *,
    title: str,
) -> str:
    """Pairwise win shares: cell (i, j) is the share of i-vs-j battles that row model i won."""
    n = len(models)
    _check_square(n, win_rate, counts)
    if n == 0:
        return _empty_svg(title)
    names = [str(m) for m in models]
    shown = [_truncate(m) for m in names]
    label_px = max(_text_px(s) for s in shown)
    c = HEATMAP_CELL
    left = 16 + label_px + 10
    # Column labels are rotated -45 degrees, so they rise (and reach right) by label_px / sqrt 2.
    rise = label_px / math.sqrt(2)
    top = 64 + rise + 10
    grid_right = left + n * c
    # Wide enough for the rotated last label, the legend, the caption and (within reason) the title.
    width = max(
        grid_right + max(0.0, rise - c / 2) + 8,
        grid_right + 16,
        left + LEGEND_PX + 16,
        _text_px(HEATMAP_CAPTION, 11) + 32,
        min(_text_px(title, 15) + 32, 720.0),
    )
    bottom = top + n * c
    height = bottom + 64
    parts = [
        _svg_open(math.ceil(width), math.ceil(height), title),
        _title_text(title, width - 32),
        f'<text x="16" y="48" font-size="11" fill="{MUTED}">{HEATMAP_CAPTION}</text>',
    ]
    for j, label in enumerate(shown):
        x, y = left + (j + 0.5) * c + 4, top - 8
        parts.append(
            f'<text class="col-label" x="{_num(x)}" y="{_num(y)}" '
            f'transform="rotate(-45 {_num(x)} {_num(y)})"><title>{_text(names[j])}</title>'
            f"{_text(label)}</text>"
        )
    for i, label in enumerate(shown):
        y = top + i * c
        parts.append(
            f'<text class="row-label" x="{_num(left - 10)}" y="{_num(y + c / 2 + 4)}" '
            f'text-anchor="end"><title>{_text(names[i])}</title>{_text(label)}</text>'
        )
        for j in range(n):
            raw = win_rate[i][j]
            # A NaN share (0/0 upstream) means the pair never met, not a 0% record.
            share = None if raw is None or not math.isfinite(raw) else float(raw)
            tooltip = _cell_tooltip(names[i], names[j], share, int(counts[i][j]), i == j)
            parts.append(_heatmap_cell(left + j * c, y, tooltip, share))
    parts += [_legend(left, bottom + 30), "</svg>"]
    return "".join(parts)


# --- scatter plot -----------------------------------------------------------------------------
SCATTER_WIDTH, SCATTER_HEIGHT = 480, 320
SCATTER_LEFT, SCATTER_RIGHT, SCATTER_TOP, SCATTER_BOTTOM = 64, 24, 48, 56


def _span_ticks(values: Sequence[float]) -> tuple[float, float, list[float], int]:
    """Round-number ticks covering `values` with a margin, for any scale (unlike `_axis`,
    which is made for ratings)."""
    lo, hi = min(values), max(values)
    span = hi - lo or max(abs(hi), 1.0)
    lo, hi = lo - span * 0.08, hi + span * 0.08
    step = _nice_step(hi - lo)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    ticks = [k * step for k in range(first, last + 1)]
    return ticks[0], ticks[-1], ticks, _step_decimals(step)


def scatter_svg(
    points: Sequence[tuple[str, float, float]], *, title: str, x_label: str, y_label: str
) -> str:
    """One labelled dot per model, `x` across and `y` up (e.g. gap closed vs rating)."""
    if not points:
        return _empty_svg(title)
    x_lo, x_hi, x_ticks, x_dec = _span_ticks([p[1] for p in points])
    y_lo, y_hi, y_ticks, y_dec = _span_ticks([p[2] for p in points])
    to_x = _scale(x_lo, x_hi, SCATTER_LEFT, SCATTER_WIDTH - SCATTER_RIGHT)
    to_y = _scale(y_lo, y_hi, SCATTER_HEIGHT - SCATTER_BOTTOM, SCATTER_TOP)
    parts = [
        _svg_open(SCATTER_WIDTH, SCATTER_HEIGHT, title),
        _title_text(title, SCATTER_WIDTH - 32),
    ]
    bottom, top = SCATTER_HEIGHT - SCATTER_BOTTOM, SCATTER_TOP
    for tick in x_ticks:
        x = _num(to_x(tick))
        parts.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="{GRID}"/>')
        parts.append(
            f'<text x="{x}" y="{bottom + 16}" text-anchor="middle" fill="{MUTED}">'
            f"{_num(tick, x_dec)}</text>"
        )
    for tick in y_ticks:
        y = _num(to_y(tick))
        parts.append(
            f'<line x1="{SCATTER_LEFT}" y1="{y}" x2="{SCATTER_WIDTH - SCATTER_RIGHT}" y2="{y}" '
            f'stroke="{GRID}"/>'
        )
        parts.append(
            f'<text x="{SCATTER_LEFT - 6}" y="{y}" dy="4" text-anchor="end" fill="{MUTED}">'
            f"{_num(tick, y_dec)}</text>"
        )
    parts.append(
        f'<text x="{(SCATTER_LEFT + SCATTER_WIDTH - SCATTER_RIGHT) / 2:.0f}" '
        f'y="{SCATTER_HEIGHT - 16}" text-anchor="middle">{_text(x_label)}</text>'
    )
    parts.append(
        f'<text x="16" y="{(top + bottom) / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(top + bottom) / 2:.0f})">{_text(y_label)}</text>'
    )
    for label, x_value, y_value in points:
        x, y = _num(to_x(x_value)), _num(to_y(y_value))
        parts.append(
            f"<g><title>{_text(label)}: {_num(x_value, 2)}, {_num(y_value, 1)}</title>"
            f'<circle cx="{x}" cy="{y}" r="5" fill="{ACCENT}"/>'
            f'<text x="{x}" y="{y}" dx="8" dy="-6">{_text(_truncate(label, 20))}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
