"""llmq bench report: a page with plots from canned bench JSON (no engine)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from bench import report
from schemas.queues import Tier
from schemas.settings import Settings

FIXTURES = Path(__file__).parent / "bench_report"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def built(tmp_path: Path) -> Path:
    out = tmp_path / "report"
    shutil.copytree(FIXTURES, out)
    return report.build_report(out, machine={"CPU": "test CPU", "cores": "2"})


def test_every_plot_is_a_png_and_the_page_references_only_files_that_exist(built: Path) -> None:
    page = built.read_text()
    references = re.findall(r"(?:src|href)='([^'#]+)'", page)
    images = [r for r in references if r.endswith(".png")]
    # TTFT, under load, cold/warm, throughput, classifier, routing, batch, faults
    assert len(images) == 8
    for name in references:
        assert (built.parent / name).is_file(), name
    for name in images:
        with Image.open(built.parent / name) as image:
            image.verify()
            assert image.format == "PNG"
            assert image.size[0] >= 600


def test_the_goal_table_marks_each_figure_and_the_page_says_quick(built: Path) -> None:
    page = built.read_text()
    assert "Quick run:" in page
    assert "test CPU" in page
    # The fixtures miss five goals: overhead's added TTFT, warm's first-request penalty,
    # the SLO attainment under the priority flood, and the mixed day's SLO attainment
    # and goodput ratio.
    assert page.count("<tr class='miss'>") == 5
    assert page.count("<tr class='met'>") == len(report.GOALS) - 5
    assert "(24 of 29 met)" in page


def test_a_goal_whose_interval_straddles_its_target_is_within_noise() -> None:
    goal = report.Goal("overhead", "added_ms_p50", "queue path adds", "<=", 3)
    straddling = {"overhead": {"added_ms_p50": 2.5, "added_ms_p50_ci95": [-1.0, 6.0]}}
    clear = {"overhead": {"added_ms_p50": 2.5, "added_ms_p50_ci95": [1.0, 2.9]}}
    without = {"overhead": {"added_ms_p50": 2.5}}
    assert goal.within_noise(straddling)
    assert goal.interval(straddling) == (-1.0, 6.0)
    assert not goal.within_noise(clear)
    assert not goal.within_noise(without)
    assert goal.interval(without) is None


def test_the_goal_table_shows_intervals_and_marks_a_figure_within_noise(tmp_path: Path) -> None:
    (tmp_path / "overhead.json").write_text(
        '{"bench": "overhead", "added_ms_p50": 2.5, "added_ms_p50_ci95": [-1.0, 6.0],'
        ' "added_itl_ms_p50": 0.1, "added_itl_ms_p50_ci95": [0.05, 0.2]}\n'
    )
    page = report.build_report(tmp_path, machine={}).read_text()
    assert "2.5 [-1, 6]" in page
    assert page.count("met (within noise)") == 1
    assert "0.1 [0.05, 0.2]" in page


def test_a_bench_printout_is_read_from_its_last_line(tmp_path: Path) -> None:
    (tmp_path / "warm.json").write_text(
        '               ratio: 22.48\n{"bench": "warm", "ratio": 22.48}\n'
    )
    assert report.load_results(tmp_path) == {"warm": {"bench": "warm", "ratio": 22.48}}


def test_results_already_in_the_folder_are_reused_not_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(FIXTURES / "warm.json", tmp_path / "warm.json")

    def never(*_args: object, **_kwargs: object) -> dict[str, object]:
        raise AssertionError("a saved result was rerun")

    monkeypatch.setattr(report, "run_one", never)
    page = report.run_report(
        Settings(database_url="sqlite://"),
        out=tmp_path,
        benches=["warm"],
        tier=Tier.SMALL,
        progress=lambda _line: None,
    )
    assert "cold-warm.png" in page.read_text()
    assert "Machine" in page.read_text()


def test_a_failing_bench_is_noted_and_the_rest_still_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(FIXTURES / "batch.json", tmp_path / "batch.json")

    def broken(*_args: object, **_kwargs: object) -> dict[str, object]:
        raise RuntimeError("engine would not start")

    monkeypatch.setattr(report, "run_one", broken)
    page = report.run_report(
        Settings(database_url="sqlite://"),
        out=tmp_path,
        benches=["warm", "batch"],
        progress=lambda _line: None,
    ).read_text()
    assert "warm.error.txt" in page
    assert "engine would not start" in (tmp_path / "warm.error.txt").read_text()
    assert "batch.png" in page


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (Debian package chromium) here")
def test_the_page_loads_in_headless_chromium_with_every_plot_and_no_console_errors(
    built: Path,
) -> None:
    assert CHROMIUM is not None
    url = built.resolve().as_uri()
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    loaded = subprocess.run(
        [CHROMIUM, *flags, "--enable-logging=stderr", "--v=0", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # The page's own script marks it once every image has loaded (or names those that
    # did not); Chromium logs every console message as a CONSOLE line.
    assert 'data-plots="loaded"' in loaded.stdout
    assert "CONSOLE" not in loaded.stderr
    shot = built.parent / "screenshot.png"
    subprocess.run(
        [CHROMIUM, *flags, "--window-size=1000,2400", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    with Image.open(shot) as image:
        assert image.size == (1000, 2400)


def test_every_quick_setting_is_an_option_its_bench_takes_and_accepts() -> None:
    from bench.cli import BENCHES
    from bench.priority import MIN_P99_SAMPLES

    for name, values in report.QUICK.items():
        (entry,) = [b for b in BENCHES if b.name == name]
        keys = {o.dest or o.flags[-1].removeprefix("--").replace("-", "_") for o in entry.options}
        assert set(values) <= keys, name
    assert report.QUICK["priority"]["samples"] >= MIN_P99_SAMPLES
