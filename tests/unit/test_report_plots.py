"""The report's plots of the concurrency sweep and the classifier, drawn from JSON alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from bench import report_plots
from bench.batching import parse_levels, sweep_figures
from schemas.errors import ConfigError
from schemas.queues import Tier

FIXTURES = Path(__file__).parent / "bench_report"


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


def png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.verify()
        assert image.format == "PNG"
        return image.size


def test_the_sweep_is_a_line_per_path_over_the_levels(tmp_path: Path) -> None:
    figure = report_plots.throughput({"batching": fixture("batching")}, tmp_path)
    assert figure is not None and figure.anchor == "throughput"
    assert figure.title == "Throughput vs concurrency, direct vs through the queue"
    assert "6.8x the tokens/s of one request" in figure.caption  # 410 / 60
    # The fixture is a quick run: the page says how small its sample was.
    assert "Quick run: 3 rounds, 1, 2, 4, 8, 16 requests per level" in figure.caption
    assert png_size(tmp_path / figure.file)[0] >= 900


def test_a_full_sweep_names_its_rounds_and_requests(tmp_path: Path) -> None:
    result = fixture("batching") | {"quick": False, "waves": 2}
    result["requests_per_level"] = [2, 4, 8, 16, 32]
    figure = report_plots.throughput({"batching": result}, tmp_path)
    assert figure is not None
    assert "Median of 3 rounds; 2, 4, 8, 16, 32 requests per level." in figure.caption


def test_an_older_result_without_the_sweep_still_gets_its_bars(tmp_path: Path) -> None:
    old = {k: v for k, v in fixture("batching").items() if "level" not in k}
    figure = report_plots.throughput({"batching": old}, tmp_path)
    assert figure is not None and "no sweep" in figure.caption
    assert (tmp_path / figure.file).is_file()


def test_the_classifier_figure_draws_the_confusion_matrix_and_latency(tmp_path: Path) -> None:
    figure = report_plots.classifier({"classifier": fixture("classifier")}, tmp_path)
    assert figure is not None and figure.anchor == "classifier"
    assert "rows are the labelled tier" in figure.caption
    assert png_size(tmp_path / figure.file)[0] >= 900
    # The matrix itself: a count and its share of the row in each cell.
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    report_plots._confusion(ax, [[52, 6, 2], [3, 30, 5], [0, 1, 21]], ["s", "m", "l"])
    cells = [text.get_text() for text in ax.texts]
    plt.close(fig)
    assert cells[0] == "52\n87%" and cells[2] == "2\n3%" and cells[8] == "21\n95%"
    assert len(cells) == 9


def test_a_classifier_result_without_a_matrix_draws_latency_alone(tmp_path: Path) -> None:
    old = {"bench": "classifier", "p50_ms": 0.12, "p99_ms": 0.4, "accuracy": 0.9}
    figure = report_plots.classifier({"classifier": old}, tmp_path)
    assert figure is not None
    assert png_size(tmp_path / figure.file)[0] >= 600


def test_routing_labels_measured_and_simulated_groups(tmp_path: Path) -> None:
    result = fixture("routing") | {
        "measured_routed_mean_ms": 900.0,
        "measured_all_large_mean_ms": 1400.0,
        "measured_cases": 60,
    }
    figure = report_plots.routing({"routing": result}, tmp_path)
    assert figure is not None and "measured" in figure.caption and "simulated" in figure.caption
    assert report_plots.routing({}, tmp_path) is None


def test_sweep_figures_keep_the_headline_keys_beside_the_sweep() -> None:
    figures = sweep_figures(
        tier=Tier.SMALL,
        concurrency=16,
        rounds=2,
        max_tokens=64,
        waves=1,
        direct={1: [50.0, 70.0], 4: [200.0, 180.0], 16: [400.0, 420.0]},
        queued={1: [40.0, 60.0], 4: [170.0, 190.0], 16: [390.0, 410.0]},
    )
    assert figures["direct_tok_s_1"] == 60.0
    assert figures["direct_tok_s_16"] == 410.0 and figures["queued_tok_s_16"] == 400.0
    assert figures["queued_over_direct"] == round(400 / 410, 3)
    assert figures["levels"] == [1, 4, 16]
    assert figures["requests_per_level"] == [1, 4, 16]
    assert figures["queued_tok_s_by_level"] == [50.0, 180.0, 400.0]


def test_levels_are_parsed_sorted_and_checked() -> None:
    assert parse_levels("16, 1,4,4") == (1, 4, 16)
    for bad in ("", "0,2", "two"):
        with pytest.raises(ConfigError, match="--levels"):
            parse_levels(bad)


def test_routing_without_a_measured_run_says_so(tmp_path: Path) -> None:
    figure = report_plots.routing({"routing": fixture("routing")}, tmp_path)
    assert figure is not None
    assert "no measured run of this host's tiers" in figure.caption
