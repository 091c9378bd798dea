"""bench/e2e.py's noise column (how far identical models landed apart in one run) and the
summary that reads each model's mix/best against it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from e2e import (  # noqa: E402
    ODD_BUILD,
    Outcome,
    contender_ms,
    geomean,
    noise_cell,
    run_noise,
    summary,
)


@pytest.mark.parametrize("whole_on, noise", [(None, 0.01), ("openvino", 0.09)])
def test_a_mix_of_one_region_is_a_twin_of_its_backends_whole_model(whole_on, noise):
    """A mix that is OpenVINO's whole model, 9% off OpenVINO's column, is that far from
    its twin: a tie, not a loss; a mix of several regions is no one's twin."""
    row = {"onnxruntime": 150.0, "onnxruntime#2": 150.0, "openvino": 100.0,
           "openvino#2": 101.0, "mix": 109.0}
    if whole_on:
        row["mix_whole_on"] = whole_on
    assert run_noise(row, ["onnxruntime", "openvino"]) == pytest.approx(noise)
    assert noise_cell(row, ["onnxruntime", "openvino"]) == (
        "mix 109.00 ms against openvino 100.00" if whole_on else
        "openvino#2 101.00 ms against openvino 100.00")


def test_each_column_is_the_fastest_build_and_the_noise_its_gap_to_the_next():
    """The mix is built twice like the whole models; a one-region single-backend partition
    is a third build of that backend's whole model. One slow build of a contender is no
    loss: it runs as its fastest, within the gap to its next fastest."""
    row = {"openvino": 100.0, "openvino#2": 99.0, "openvino/collage": 97.0,
           "openvino/collage_regions": 1, "mix": 96.0, "mix#2": 90.0}
    assert contender_ms(row, "mix") == 90.0 and contender_ms(row, "openvino") == 97.0
    assert run_noise(row, ["openvino"]) == pytest.approx(96 / 90 - 1)
    assert noise_cell(row, ["openvino"]) == "mix 96.00 ms against mix#2 90.00"
    del row["openvino/collage_regions"]  # a split: another contender, not a build
    assert contender_ms(row, "openvino") == 99.0
    assert contender_ms({"mix": 90.0}, "mix") == 90.0  # built once


def test_an_odd_build_is_named_and_left_out_of_the_noise():
    """A build that ran slow throughout (2.3x its twin) is not the spread of builds: the
    noise comes from the other contenders, and the cell names the odd one."""
    row = {"onnxruntime": 480.0, "onnxruntime#2": 470.0, "openvino": 251.51,
           "openvino#2": 585.94, "mix": 210.0, "mix#2": 212.0}
    backends = ["onnxruntime", "openvino"]
    assert run_noise(row, backends) == pytest.approx(480 / 470 - 1)
    assert noise_cell(row, backends) == (
        "onnxruntime 480.00 ms against onnxruntime#2 470.00; odd builds, left out: "
        "openvino#2 585.94 ms against openvino 251.51")
    assert contender_ms(row, "openvino") == 251.51


def test_a_build_just_inside_the_odd_bound_counts_as_noise():
    row = {"openvino": 100.0, "openvino#2": 100.0 * (1 + ODD_BUILD) - 1}
    assert run_noise(row, ["openvino"]) == pytest.approx(ODD_BUILD - 0.01)
    row["openvino#2"] += 2
    assert run_noise(row, ["openvino"]) == 0.0
    assert noise_cell(row, ["openvino"]).startswith("no second build timed; odd builds")


def test_the_noise_names_no_pair_when_nothing_was_timed_twice():
    assert noise_cell({"openvino": 100.0, "mix": 90.0}, ["openvino"]) == (
        "no second build timed")


def test_the_summary_judges_each_model_against_its_own_noise():
    outcomes = [Outcome("mamba", 0.64, 0.08, 1.54),   # faster, beyond ±8%
                Outcome("bert", 1.03, 0.05, 1.02),    # a tie: within ±5%
                Outcome("convnext", 1.04, 0.01, 1.10),  # slower, beyond ±1%
                Outcome("resnet", 0.99, 0.02, 1.06)]  # a tie where winners differ
    lines = summary(outcomes, differ=1.05)
    assert lines[0].startswith(f"geomean mix/best over 4 models: {geomean([0.64, 1.03, 1.04, 0.99]):.3f}")
    assert lines[1].startswith("per-op winners differ (best backend op by op >= 1.05x the minima)"
                               " on 3: mamba 1.54x, convnext 1.10x, resnet 1.06x")
    assert f"geomean mix/best there {geomean([0.64, 1.04, 0.99]):.3f}" in lines[1]
    assert lines[1].endswith("faster beyond the noise on 1 of 3 (mamba)")
    assert lines[2:] == ["faster: mamba 0.64 (±8%)", "tie: bert 1.03 (±5%), resnet 0.99 (±2%)",
                         "slower: convnext 1.04 (±1%)"]


def test_a_summary_with_no_differing_winners_says_so():
    lines = summary([Outcome("bert", 1.0, 0.02, float("nan"))], differ=1.05)
    assert lines[1] == "per-op winners differ (>= 1.05x) on none"
    assert summary([]) == []


def test_with_ceilings_the_summary_counts_wins_where_a_split_could_pay():
    outcomes = [Outcome("mamba", 0.64, 0.08, 1.54, (1.46, 1.02, 1.43)),  # clears, faster
                Outcome("mobilenet", 1.00, 0.03, 1.20, (1.15, 1.03, 1.07)),  # clears, a tie
                Outcome("bert", 1.01, 0.02, 1.05, (1.01, 1.01, 1.005)),  # priced under noise
                Outcome("resnet", 1.00, 0.01, 1.02)]  # no ceiling measured
    line = [x for x in summary(outcomes) if x.startswith("the priced ceiling")]
    assert line == ["the priced ceiling clears its noise ceiling on 2 of 3: mamba 1.43 "
                    "(noise 1.02), mobilenet 1.07 (noise 1.03); faster beyond the noise on "
                    "1 of 2 (mamba)"]
    assert not any(x.startswith("the priced ceiling") for x in summary(outcomes[3:]))
