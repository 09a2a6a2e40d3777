"""Calibration of a decision's confidence, and the two drawings of it (evidence/calibration)."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest

from loopwise.errors import ConfigError
from loopwise.evidence.charts import FrontierDot, frontier_svg, reliability_svg
from loopwise.evidence.sweeps.calibration import (
    Calibration,
    calibration,
    calibration_warning,
)

SVG = "{http://www.w3.org/2000/svg}"


def _tree(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


# --- calibration ----------------------------------------------------------------------


def test_bins_and_ece_by_hand() -> None:
    # bin [0.9, 1.0]: 0.95, 0.95, 1.0 (1.0 lands in the last bin) → 2 of 3 right
    # bin [0.5, 0.6): 0.5, 0.5 → 2 of 2 right; one unknown, not binned
    cal = calibration([0.95, 0.95, 1.0, 0.5, 0.5, None], [True, True, False, True, True, True])
    assert (cal.n, cal.unknown, len(cal.bins)) == (5, 1, 10)
    top, half = cal.bins[9], cal.bins[5]
    assert (top.count, half.count) == (3, 2)
    assert top.mean_confidence == pytest.approx(2.9 / 3) and top.accuracy == pytest.approx(2 / 3)
    assert half.mean_confidence == pytest.approx(0.5) and half.accuracy == 1.0
    assert cal.bins[0].count == 0 and cal.bins[0].accuracy is None
    expected = 3 / 5 * abs(2 / 3 - 2.9 / 3) + 2 / 5 * abs(1.0 - 0.5)
    assert cal.ece == pytest.approx(expected)
    assert cal.accuracy == pytest.approx(4 / 5) and cal.mean_confidence == pytest.approx(3.9 / 5)
    doc = cal.to_dict()
    assert doc["n"] == 5 and doc["unknown"] == 1 and len(doc["bins"]) == 10
    assert doc["bins"][0]["accuracy"] is None


def test_a_perfectly_calibrated_decision_has_zero_ece() -> None:
    confidences = [0.25] * 4 + [0.75] * 4
    correct = [True, False, False, False, True, True, True, False]
    assert calibration(confidences, correct, bins=4).ece == pytest.approx(0.0)


def test_edges_zero_one_and_one_bin() -> None:
    cal = calibration([0.0, 1.0, 0.1], [False, True, True], bins=1)
    assert cal.bins[0].count == 3 and (cal.bins[0].low, cal.bins[0].high) == (0.0, 1.0)
    assert calibration([0.1], [True], bins=10).bins[1].count == 1  # 0.1 opens bin 1
    empty = calibration([], [])
    assert empty.n == 0 and empty.ece is None and empty.accuracy is None


def test_all_unknown_is_counted_not_binned() -> None:
    cal = calibration([None, None], [True, False])
    assert (cal.n, cal.unknown, cal.ece) == (0, 2, None)
    warning = calibration_warning(cal)
    assert warning and "none of 2" in warning


@pytest.mark.parametrize(
    ("confidences", "correct", "bins", "name"),
    [
        ([0.5, 0.5], [True], 10, "correct"),
        ([1.2], [True], 10, "confidences"),
        ([-0.01], [True], 10, "confidences"),
        ([math.nan], [True], 10, "confidences"),
        (["0.5"], [True], 10, "confidences"),
        ([True], [True], 10, "confidences"),
        ([0.5], ["yes"], 10, "correct"),
        ([0.5], [True], 0, "bins"),
        ([0.5], [True], 2.5, "bins"),
    ],
)
def test_bad_input_names_the_argument(
    confidences: list[object], correct: list[object], bins: object, name: str
) -> None:
    with pytest.raises(ConfigError) as err:
        calibration(confidences, correct, bins)  # type: ignore[arg-type]
    assert err.value.name == name and name in str(err.value)


# --- calibration_warning ---------------------------------------------------------------


def test_warning_when_the_error_is_large_names_the_value() -> None:
    cal = calibration([0.95] * 30, [True] * 15 + [False] * 15)
    warning = calibration_warning(cal)
    assert warning is not None and "\n" not in warning
    assert "0.450" in warning and "overconfident" in warning and "30 cases" in warning


def test_no_warning_when_calibrated_and_enough_cases() -> None:
    cal = calibration([0.9] * 30, [True] * 27 + [False] * 3)
    assert calibration_warning(cal) is None
    # ECE 0 up to float noise (4.7e-16): shown as 0.000, so not above a limit of 0 either
    assert cal.ece is not None and round(cal.ece, 6) == 0.0
    assert calibration_warning(cal, limit=0.0) is None


def test_warning_when_too_few_cases_to_say() -> None:
    cal = calibration([0.9] * 5 + [None], [True] * 6)
    warning = calibration_warning(cal)
    assert warning and "only 5" in warning and "1 unknown" in warning and "0.100" in warning


def test_warning_limit_is_checked() -> None:
    with pytest.raises(ConfigError) as err:
        calibration_warning(Calibration(n=0, unknown=0, ece=None, bins=[]), limit=2)
    assert err.value.name == "limit"


# --- reliability_svg --------------------------------------------------------------------


def test_reliability_svg_draws_the_nonempty_bins_and_the_diagonal() -> None:
    cal = calibration([0.15, 0.55, 0.55, 0.95, None], [False, True, False, True, True])
    svg = reliability_svg(cal)
    root = _tree(svg)
    groups = [g for g in root.iter(f"{SVG}g") if g.get("class") == "bin"]
    assert len(groups) == 3
    assert [ln for ln in root.iter(f"{SVG}line") if ln.get("class") == "diagonal"]
    assert "ECE" in svg and "1 unknown" in svg and root.get("role") == "img"


def test_reliability_svg_of_nothing_is_still_a_drawing() -> None:
    root = _tree(reliability_svg(calibration([None], [True])))
    assert not [g for g in root.iter(f"{SVG}g") if g.get("class") == "bin"]
    assert "ECE unknown" in ET.tostring(root, encoding="unicode")


# --- frontier_svg -----------------------------------------------------------------------


def _dots(n: int = 8) -> list[FrontierDot]:
    dots = [
        FrontierDot(
            label=f"{t:.2f}",
            kind="threshold",
            cost=0.001 + 0.0004 * i,
            accuracy=0.80 + 0.01 * i,
            low=0.70 + 0.01 * i,
            high=min(0.90 + 0.01 * i, 1.0),
        )
        for i, t in enumerate(k / n for k in range(n))
    ]
    dots.append(
        FrontierDot(
            label="triage", kind="workflow", cost=0.0009, accuracy=0.78, low=0.66, high=0.88
        )
    )
    dots.append(
        FrontierDot(
            label="triage_agent", kind="agent", cost=0.004, accuracy=0.9, low=0.8, high=0.96
        )
    )
    return dots


def _label_boxes(root: ET.Element) -> list[tuple[float, float, float, float, str]]:
    boxes = []
    for t in root.iter(f"{SVG}text"):
        if t.get("class") == "label":
            x, y, w = float(t.get("x", 0)), float(t.get("y", 0)), float(t.get("data-w", 0))
            boxes.append((x, y - 10, x + w, y + 2, t.text or ""))
    return boxes


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_frontier_has_every_point_the_endpoints_and_the_chosen_one() -> None:
    svg = frontier_svg(_dots(), chosen="0.50")
    root = _tree(svg)
    groups = [g for g in root.iter(f"{SVG}g") if "dot" in (g.get("class") or "").split()]
    assert len(groups) == 10
    kinds = [g.get("class") for g in groups]
    assert sum("workflow" in (k or "") for k in kinds) == 1
    assert sum("agent" in (k or "") for k in kinds) == 1
    assert [k for k in kinds if k and "chosen" in k] == ["dot threshold chosen"]
    texts = [t for *_, t in _label_boxes(root)]
    assert "0.50 (chosen)" in texts and "triage" in texts and "triage_agent" in texts
    assert root.find(f".//{SVG}polyline") is not None


def test_frontier_labels_never_overlap_even_when_dots_crowd() -> None:
    crowd = [
        FrontierDot(
            label=f"threshold {k / 50:.2f}",
            kind="threshold",
            cost=0.002,
            accuracy=0.85,
            low=0.8,
            high=0.9,
        )
        for k in range(50)
    ] + _dots()
    root = _tree(frontier_svg(crowd, chosen="threshold 0.40"))
    boxes = _label_boxes(root)
    assert any(t == "threshold 0.40 (chosen)" for *_, t in boxes)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not _overlap(a, b), (a, b)
    # every dot is drawn even when its label had no room
    assert len([g for g in root.iter(f"{SVG}g") if "dot" in (g.get("class") or "")]) == 60


def test_frontier_escapes_labels() -> None:
    hostile = "<script>alert('x')</script>&"
    dots = [FrontierDot(label=hostile, kind="workflow", cost=0.01, accuracy=0.5, low=0.4, high=0.6)]
    svg = frontier_svg(dots, chosen=hostile)
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    root = _tree(svg)
    assert any(hostile in (t.text or "") for t in root.iter(f"{SVG}title"))
    assert any((t.text or "").startswith("<script>") for t in root.iter(f"{SVG}text"))


@pytest.mark.parametrize(
    "dots",
    [
        [FrontierDot(label="only", kind="threshold", cost=0.003, accuracy=0.7, low=0.5, high=0.85)],
        [
            FrontierDot(label=f"{k}", kind="threshold", cost=0.0, accuracy=a, low=a, high=a)
            for k, a in enumerate((1.0, 1.0, 1.0))
        ],
        [
            FrontierDot(label="a", kind="workflow", cost=0.5, accuracy=0.0, low=0.0, high=0.0),
            FrontierDot(label="b", kind="agent", cost=0.5, accuracy=0.0, low=0.0, high=0.1),
        ],
    ],
    ids=["one point", "all-equal costs at accuracy 1", "equal costs at accuracy 0"],
)
def test_frontier_degenerate_inputs_draw_inside_the_frame(dots: list[FrontierDot]) -> None:
    root = _tree(frontier_svg(dots))
    width, height = float(root.get("width", 0)), float(root.get("height", 0))
    for el in root.iter():
        for attr in ("x", "y", "cx", "cy", "x1", "x2", "y1", "y2"):
            if el.get(attr) is not None:
                value = float(el.get(attr, 0))
                assert math.isfinite(value) and -1 <= value <= max(width, height) + 1, (
                    el.tag,
                    attr,
                )
    assert len([g for g in root.iter(f"{SVG}g") if "dot" in (g.get("class") or "")]) == len(dots)


def test_frontier_of_no_points_says_so() -> None:
    assert "no points" in frontier_svg([])


@pytest.mark.parametrize(
    ("dot", "chosen", "name"),
    [
        (
            FrontierDot(
                label="a", kind="threshold", cost=math.nan, accuracy=0.5, low=0.4, high=0.6
            ),
            None,
            "points",
        ),
        (
            FrontierDot(label="a", kind="threshold", cost=1, accuracy=0.5, low=0.6, high=0.7),
            None,
            "points",
        ),
        (
            FrontierDot(label="a", kind="threshold", cost=1, accuracy=1.5, low=0.6, high=1.7),
            None,
            "points",
        ),
        (
            FrontierDot(label="a", kind="oops", cost=1, accuracy=0.5, low=0.4, high=0.6),
            None,
            "points",
        ),  # type: ignore[arg-type]
        (
            FrontierDot(label="a", kind="threshold", cost=1, accuracy=0.5, low=0.4, high=0.6),
            "b",
            "chosen",
        ),
    ],
)
def test_frontier_bad_input_names_the_argument(
    dot: FrontierDot, chosen: str | None, name: str
) -> None:
    with pytest.raises(ConfigError) as err:
        frontier_svg([dot], chosen=chosen)
    assert err.value.name == name


def test_frontier_coordinates_follow_cost_and_accuracy() -> None:
    dots = [
        FrontierDot(label="cheap", kind="workflow", cost=0.001, accuracy=0.7, low=0.6, high=0.8),
        FrontierDot(label="dear", kind="agent", cost=0.01, accuracy=0.9, low=0.85, high=0.95),
    ]
    svg = frontier_svg(dots)
    rect = re.search(r"<rect x='([\d.]+)' y='([\d.]+)' width='10'", svg)
    path = re.search(r"<path d='M([\d.]+),([\d.]+)", svg)
    assert rect and path
    assert float(rect.group(1)) + 5 < float(path.group(1))  # cheaper is left
    assert float(rect.group(2)) + 5 > float(path.group(2))  # less accurate is lower


# --- hostile sizes (review) ------------------------------------------------------------


@pytest.mark.parametrize("bins", [1_001, 10**6])
def test_too_many_bins_is_refused_at_once_naming_bins(bins: int) -> None:
    # 10**9 bins allocated three lists of a billion (minutes, or out of memory) before
    # looking at one case.
    with pytest.raises(ConfigError) as err:
        calibration([0.5], [True], bins)
    assert err.value.name == "bins" and "1,000" in str(err.value)
    assert calibration([0.5], [True], 1_000).n == 1  # the cap itself is allowed


@pytest.mark.parametrize("cost", [1e308, -1e308, 1e13])
def test_a_cost_beyond_any_plausible_one_is_refused_naming_points(cost: float) -> None:
    dot = FrontierDot(label="a", kind="threshold", cost=cost, accuracy=0.5, low=0.4, high=0.6)
    with pytest.raises(ConfigError) as err:
        frontier_svg([dot])
    assert err.value.name == "points"


def test_a_subnormal_cost_is_drawn() -> None:
    dots = [
        FrontierDot(label="a", kind="threshold", cost=5e-324, accuracy=0.5, low=0.4, high=0.6),
        FrontierDot(label="b", kind="workflow", cost=0.0, accuracy=0.7, low=0.6, high=0.8),
    ]
    ET.fromstring(frontier_svg(dots))


def test_a_label_that_is_not_text_is_refused_naming_points() -> None:
    dot = FrontierDot(label=None, kind="threshold", cost=1, accuracy=0.5, low=0.4, high=0.6)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as err:
        frontier_svg([dot])
    assert err.value.name == "points"
