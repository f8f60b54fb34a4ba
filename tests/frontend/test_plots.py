"""Leaderboard SVG charts: well-formed, ordered like the data, and inert for hostile names."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from frontend.plots import interval_plot_svg, winrate_heatmap_svg

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = "<script>alert(1)</script>"
QUOTED = 'a"b&c'


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    assert root.get("viewBox")
    return root


def by_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{NS}{tag}") if e.get("class") == cls]


def title_of(element: ET.Element) -> str:
    found = element.find(f"{NS}title")
    assert found is not None
    return found.text or ""


def all_text(root: ET.Element) -> str:
    return " ".join("".join(e.itertext()) for e in root.iter(f"{NS}text"))


def assert_inert(root: ET.Element, raw: str) -> None:
    tags = {e.tag.removeprefix(NS) for e in root.iter()}
    assert "script" not in tags and "foreignObject" not in tags
    for element in root.iter():
        assert not any(name.lower().startswith("on") for name in element.attrib)
        assert not any("href" in name for name in element.attrib)
    assert "<script" not in raw


def row(model: str, score: float, rank: int, half_width: float = 15.0, n: int = 40) -> dict:
    return {
        "model": model,
        "score": score,
        "ci_low": score - half_width,
        "ci_high": score + half_width,
        "rank": rank,
        "n_battles": n,
    }


SCORES = [
    row("alpha", 1080.0, 1),
    row("beta", 1030.5, 2, half_width=0.0),
    row("gamma", 990.0, 3),
    row("delta", 940.0, 4, half_width=40.0),
]


# --- interval plot ----------------------------------------------------------------------------


def test_interval_one_row_and_dot_per_model_in_order() -> None:
    root = parse(interval_plot_svg(SCORES, title="Leaderboard"))
    rows = by_class(root, "g", "row")
    assert [r.get("data-model") for r in rows] == ["alpha", "beta", "gamma", "delta"]
    labels = [by_class(r, "text", "label")[0].text for r in rows]
    assert labels == ["alpha", "beta", "gamma", "delta"]
    ranks = [by_class(r, "text", "rank")[0].text for r in rows]
    assert ranks == ["1", "2", "3", "4"]
    assert len(by_class(root, "circle", "dot")) == len(SCORES)
    assert len(by_class(root, "line", "ci")) == len(SCORES)


def test_interval_dots_are_placed_like_the_scores() -> None:
    root = parse(interval_plot_svg(SCORES, title="Leaderboard"))
    xs = [float(d.get("cx", "nan")) for d in by_class(root, "circle", "dot")]
    assert xs == sorted(xs, reverse=True)
    assert len(set(xs)) == len(xs)
    ys = [float(d.get("cy", "nan")) for d in by_class(root, "circle", "dot")]
    assert ys == sorted(ys)
    # Each dot sits within its own interval.
    for line, x in zip(by_class(root, "line", "ci"), xs, strict=True):
        assert float(line.get("x1", "nan")) <= x <= float(line.get("x2", "nan"))


def test_interval_reference_line_at_1000_between_ticks() -> None:
    root = parse(interval_plot_svg(SCORES, title="Leaderboard"))
    (ref,) = by_class(root, "line", "ref")
    assert ref.get("data-value") == "1000"
    assert ref.get("stroke-dasharray")
    ticks = {
        float(t.text or "nan"): float(t.get("x", "nan")) for t in by_class(root, "text", "tick")
    }
    assert 4 <= len(ticks) <= 7
    assert min(ticks) <= 900 and max(ticks) >= 1100
    # Placed on the same scale as the ticks.
    assert float(ref.get("x1", "nan")) == pytest.approx(ticks[1000.0], abs=0.1)


def test_interval_tooltip_carries_the_numbers() -> None:
    root = parse(interval_plot_svg(SCORES, title="Leaderboard"))
    tips = [title_of(r) for r in by_class(root, "g", "row")]
    assert tips[0] == "#1 alpha: 1080 (95% CI 1065 to 1095), 40 battles"
    assert "1030.5" in tips[1]


def test_interval_single_model_with_zero_width_interval() -> None:
    svg = interval_plot_svg([row("solo", 1000.0, 1, half_width=0.0, n=1)], title="One")
    root = parse(svg)
    assert len(by_class(root, "g", "row")) == 1
    (dot,) = by_class(root, "circle", "dot")
    (ref,) = by_class(root, "line", "ref")
    assert dot.get("cx") == ref.get("x1")
    ticks = by_class(root, "text", "tick")
    assert len(ticks) >= 3
    assert "1 battle" in title_of(by_class(root, "g", "row")[0])


def test_interval_empty() -> None:
    root = parse(interval_plot_svg([], title="Leaderboard"))
    assert "No counted votes yet" in all_text(root)
    assert not by_class(root, "g", "row")


def test_interval_height_grows_with_rows() -> None:
    short = parse(interval_plot_svg(SCORES[:2], title="t"))
    tall = parse(interval_plot_svg(SCORES, title="t"))
    assert float(tall.get("height", "0")) - float(short.get("height", "0")) == 2 * 28
    assert short.get("width") == tall.get("width") == "720"


def test_interval_long_name_truncated_with_full_name_in_tooltip() -> None:
    name = "a-remarkably-long-model-name-that-goes-on-and-on-7b-instruct"
    root = parse(interval_plot_svg([row(name, 1000.0, 1)], title="t"))
    (group,) = by_class(root, "g", "row")
    label = by_class(group, "text", "label")[0].text or ""
    assert label.endswith("…") and len(label) <= 28
    assert name.startswith(label[:-1])
    assert name in title_of(group)


def test_interval_hostile_names_and_title_are_escaped() -> None:
    scores = [row(HOSTILE, 1010.0, 1), row(QUOTED, 990.0, 2)]
    svg = interval_plot_svg(scores, title=f"Top {HOSTILE}")
    root = parse(svg)
    assert_inert(root, svg)
    assert "&lt;script&gt;" in svg
    rows = by_class(root, "g", "row")
    assert [r.get("data-model") for r in rows] == [HOSTILE, QUOTED]
    assert title_of(root) == f"Top {HOSTILE}"
    assert QUOTED in title_of(rows[1])


def test_interval_control_characters_do_not_break_the_xml() -> None:
    parse(interval_plot_svg([row("bad\x00name\x1b", 1000.0, 1)], title="t\x07"))


def test_interval_rejects_nan() -> None:
    with pytest.raises(ValueError):
        interval_plot_svg([row("x", float("nan"), 1)], title="t")


def test_interval_is_deterministic_and_standalone() -> None:
    first = interval_plot_svg(SCORES, title="Leaderboard")
    assert first == interval_plot_svg(SCORES, title="Leaderboard")
    assert first.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    assert 'font-family="system-ui, sans-serif"' in first
    assert "style=" not in first and "url(" not in first and "<image" not in first


# --- heatmap ----------------------------------------------------------------------------------

MODELS = ["alpha", "beta", "gamma"]
WIN_RATE: list[list[float | None]] = [
    [None, 0.63, 1.0],
    [0.37, None, None],
    [0.0, None, None],
]
COUNTS = [[0, 41, 5], [41, 0, 0], [5, 0, 0]]


def cells(root: ET.Element) -> list[ET.Element]:
    return by_class(root, "g", "cell")


def cell(root: ET.Element, i: int, j: int, n: int = 3) -> ET.Element:
    return cells(root)[i * n + j]


def fill_of(group: ET.Element) -> str:
    rect = group.find(f"{NS}rect")
    assert rect is not None
    return rect.get("fill", "")


def visible(label: ET.Element) -> str:
    """The drawn text of a label, leaving out its <title> tooltip."""
    tip = label.find(f"{NS}title")
    return (label.text or "") + ("" if tip is None else tip.tail or "")


def label_of(group: ET.Element) -> str:
    text = group.find(f"{NS}text")
    assert text is not None
    return text.text or ""


def test_heatmap_has_n_by_n_cells_and_labels() -> None:
    root = parse(winrate_heatmap_svg(MODELS, WIN_RATE, COUNTS, title="Head to head"))
    assert len(cells(root)) == 9
    rows = by_class(root, "text", "row-label")
    cols = by_class(root, "text", "col-label")
    assert [visible(e) for e in rows] == MODELS
    assert [visible(e) for e in cols] == MODELS
    assert all("rotate(-45" in (c.get("transform") or "") for c in cols)


def test_heatmap_cell_percentages_and_tooltips() -> None:
    root = parse(winrate_heatmap_svg(MODELS, WIN_RATE, COUNTS, title="Head to head"))
    assert label_of(cell(root, 0, 1)) == "63%"
    assert title_of(cell(root, 0, 1)) == "alpha beats beta in 63% of 41 battles"
    assert title_of(cell(root, 1, 0)) == "beta beats alpha in 37% of 41 battles"
    assert label_of(cell(root, 0, 2)) == "100%"
    assert label_of(cell(root, 2, 0)) == "0%"


def test_heatmap_colours_diverge_and_missing_cells_are_grey() -> None:
    root = parse(winrate_heatmap_svg(MODELS, WIN_RATE, COUNTS, title="Head to head"))
    win, loss, even = fill_of(cell(root, 0, 2)), fill_of(cell(root, 2, 0)), "#f7f7f7"
    assert win != loss
    # Blue dominates a full win, red a full loss.
    assert int(win[5:7], 16) > int(win[1:3], 16)
    assert int(loss[1:3], 16) > int(loss[5:7], 16)
    assert win != even and loss != even
    missing = [cell(root, 0, 0), cell(root, 1, 2), cell(root, 2, 1)]
    assert {fill_of(c) for c in missing} == {"#e5e7eb"}
    assert {label_of(c) for c in missing} == {"–"}
    assert title_of(cell(root, 1, 2)) == "beta and gamma have not met"


def test_heatmap_single_model() -> None:
    root = parse(winrate_heatmap_svg(["solo"], [[None]], [[0]], title="One"))
    (only,) = cells(root)
    assert label_of(only) == "–"


def test_heatmap_empty() -> None:
    root = parse(winrate_heatmap_svg([], [], [], title="Head to head"))
    assert "No counted votes yet" in all_text(root)
    assert not cells(root)


def test_heatmap_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError):
        winrate_heatmap_svg(["a", "b"], [[None]], [[0, 0], [0, 0]], title="t")


def test_heatmap_hostile_names_are_escaped() -> None:
    names = [HOSTILE, QUOTED]
    svg = winrate_heatmap_svg(
        names, [[None, 0.5], [0.5, None]], [[0, 2], [2, 0]], title=f"{QUOTED} {HOSTILE}"
    )
    root = parse(svg)
    assert_inert(root, svg)
    assert "&lt;script&gt;" in svg
    assert title_of(cell(root, 0, 1, n=2)) == f"{HOSTILE} beats {QUOTED} in 50% of 2 battles"
    assert title_of(root) == f"{QUOTED} {HOSTILE}"


def test_heatmap_is_deterministic() -> None:
    args = (MODELS, WIN_RATE, COUNTS)
    assert winrate_heatmap_svg(*args, title="t") == winrate_heatmap_svg(*args, title="t")


def test_a_scatter_plot_has_one_labelled_dot_per_model_and_escapes_names():
    from frontend.plots import scatter_svg

    svg = scatter_svg(
        [("alice-1", 0.5, 1040.0), ("<b>bob</b>", -0.1, 960.0)],
        title="gap closed vs rating", x_label="gap closed", y_label="rating",
    )  # fmt: skip
    assert svg.count("<circle") == 2
    assert "<b>" not in svg and "&lt;b&gt;bob&lt;/b&gt;" in svg
    assert scatter_svg([], title="t", x_label="x", y_label="y").count("<circle") == 0
