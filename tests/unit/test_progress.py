"""The shared progress display (schemas.progress), with no services and a fake clock."""

from __future__ import annotations

import io
import threading
import time

import pytest

from producer.quality.gate import counting_answers
from producer.quality.runner import CaseAnswer
from schemas import progress
from schemas.progress import ProgressBar, format_bytes, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def bar(total: int | None, *, tty: bool, **options: object) -> tuple[ProgressBar, io.StringIO]:
    out = io.StringIO()
    clock = options.pop("clock", Clock())
    made = ProgressBar("work", total, stream=out, tty=tty, clock=clock, **options)  # type: ignore[arg-type]
    return made, out


def test_durations_and_sizes_read_as_a_person_would_say_them() -> None:
    assert format_duration(4.21) == "4.2 s"
    assert format_duration(42.4) == "42 s"
    assert format_duration(185) == "3 min 05 s"
    assert format_duration(3720) == "1 h 02 min"
    assert format_duration(-1) == "0.0 s"
    assert format_bytes(512) == "512 B"
    assert format_bytes(12 * 1024) == "12.0 KiB"
    assert format_bytes(250.3 * 1024**2) == "250.3 MiB"
    assert format_bytes(3 * 1024**4) == "3072.0 GiB"


def test_a_bar_shows_done_total_share_rate_and_eta() -> None:
    clock = Clock()
    made, _out = bar(40, tty=False, clock=clock)
    assert made.render().startswith("work [" + "." * 30 + "] 0/40 0%")
    assert "ETA" not in made.render()  # nothing counted yet: no rate to guess from
    clock.now += 5
    made.update(10)
    line = made.render()
    assert line.startswith("work [" + "#" * 7 + "." * 23 + "] 10/40 25%")
    assert "2.0/s" in line and "ETA 15 s" in line


def test_work_done_before_this_run_is_left_out_of_the_rate() -> None:
    clock = Clock()
    made, _out = bar(100, tty=False, clock=clock, initial=50, unit="lines")
    clock.now += 10
    made.update(60)
    assert "60/100 lines 60%" in made.render()
    assert "1.0 lines/s" in made.render() and "ETA 40 s" in made.render()


def test_bytes_are_shown_as_sizes() -> None:
    clock = Clock()
    made, _out = bar(100 * 1024**2, tty=False, clock=clock, unit="B")
    clock.now += 2
    made.update(50 * 1024**2)
    assert "50.0 MiB/100.0 MiB 50%" in made.render()
    assert "25.0 MiB/s" in made.render()


def test_off_a_terminal_a_bar_prints_a_line_each_tenth_and_one_at_the_end() -> None:
    clock = Clock()
    made, out = bar(100, tty=False, clock=clock)
    for done in range(1, 101):
        clock.now += 0.5
        made.update(done)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10
    assert [line.split("] ")[1].split(" ")[0] for line in lines[:3]] == [
        "10/100",
        "20/100",
        "30/100",
    ]
    assert "100/100 100%" in lines[-1] and "in 50 s" in lines[-1]
    assert "\r" not in out.getvalue()
    made.close()  # already ended with its total: nothing more
    assert len(out.getvalue().splitlines()) == 10


def test_big_jumps_print_one_line_not_one_per_tenth() -> None:
    made, out = bar(1000, tty=False)
    made(350, 1000)  # the on_progress(done, total) shape
    made(990, 1000)
    assert [line.split("] ")[1].split(",")[0] for line in out.getvalue().splitlines()] == [
        "350/1000 35%",
        "990/1000 99%",
    ]


def test_on_a_terminal_one_line_is_redrawn_at_most_ten_times_a_second() -> None:
    clock = Clock()
    made, out = bar(1000, tty=True, clock=clock)
    for done in range(1, 1000):
        clock.now += 0.001  # a tight loop: one second in all
        made.update(done)
    made.update(1000)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert 8 <= text.count("\r") <= 13
    assert "1000/1000 100%" in text.split("\r")[-1]


def test_say_prints_above_a_terminal_bar_and_redraws_it() -> None:
    made, out = bar(10, tty=True)
    made.update(3)
    made.say("worker is warm")
    text = out.getvalue()
    assert "\r" + progress.CLEAR_TO_END + "worker is warm\n" in text
    assert text.endswith(progress.CLEAR_TO_END) and "3/10" in text.rsplit("\n", 1)[1]


def test_a_phase_line_off_a_terminal_is_one_line_per_phase_then_the_total_time() -> None:
    clock = Clock()
    with ProgressBar("model prepare", stream=(out := io.StringIO()), tty=False, clock=clock) as p:
        p.phase("loading weights")
        clock.now += 12
        p.phase("loading weights")  # the same phase again: no new line
        p.phase("saving")
        clock.now += 3
    assert out.getvalue().splitlines() == [
        "model prepare...",
        "model prepare: loading weights (at 0.0 s)",
        "model prepare: saving (at 12 s)",
        "model prepare: done in 15 s",
    ]


def test_a_phase_line_on_a_terminal_ticks_by_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "TICK_S", 0.01)
    out = io.StringIO()
    with ProgressBar("bench warm", stream=out, tty=True) as made:
        made.phase("starting the worker")
        time.sleep(0.2)
    text = out.getvalue()
    assert text.count("\rbench warm: starting the worker (") >= 5
    assert text.endswith("done in 0.2 s" + progress.CLEAR_TO_END + "\n")


def test_a_step_that_fails_says_it_stopped() -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError), ProgressBar("gate", 10, stream=out, tty=False) as made:
        made.update(4)
        raise RuntimeError("engine died")
    assert "4/10 40%" in out.getvalue() and "stopped after" in out.getvalue()


def test_disabled_prints_nothing_and_stdout_is_never_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    quiet = ProgressBar("quiet", 5, enabled=False)
    quiet.say("hello")
    quiet.update(5)
    assert capsys.readouterr() == ("", "")
    loud = ProgressBar("loud", 5)  # the default stream: stderr
    loud.say("hello")
    loud.update(5)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "hello" in captured.err and "5/5" in captured.err


def test_threads_may_advance_one_bar() -> None:
    made, out = bar(800, tty=False)

    def work() -> None:
        for _ in range(100):
            made.advance()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made.done == 800 and made.finished
    assert out.getvalue().count("800/800") == 1


def test_the_quality_gate_counts_failed_answers_beside_its_bar() -> None:
    made, out = bar(3, tty=False)
    step = counting_answers(made)
    step(CaseAnswer(case_id="a", text="x", ok=True))
    step(CaseAnswer(case_id="b", text="", ok=False, error="timeout"))
    assert made.render().endswith("1 failed")
    step(CaseAnswer(case_id="c", text="y", ok=True))
    assert out.getvalue().splitlines()[-1].endswith("1 failed")


def test_track_steps_once_per_item_and_ends_with_them() -> None:
    made, out = bar(4, tty=False)
    assert list(made.track("abcd")) == ["a", "b", "c", "d"]
    assert made.finished and "4/4 100%" in out.getvalue().splitlines()[-1]


def test_a_step_inside_a_step_has_the_terminal_line_until_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "TICK_S", 0.01)
    out = io.StringIO()
    with ProgressBar("starting the server", stream=out, tty=True):
        time.sleep(0.05)
        with ProgressBar("starting the gateway", stream=out, tty=True):
            before = out.getvalue()
            time.sleep(0.1)
            during = out.getvalue()[len(before) :]
        time.sleep(0.05)
    lines = out.getvalue().split("\n")
    # The outer line was kept (a newline), and it did not redraw over the inner one.
    assert lines[0].rsplit("\r", 1)[-1].startswith("starting the server (")
    assert "starting the server" not in during and "starting the gateway (" in during
    assert "starting the gateway: done in" in lines[1]
    assert "starting the server: done in" in lines[2]
    assert "starting the server (" in lines[2]  # it drew again once the inner one ended


def test_a_phase_line_becomes_a_bar_once_the_total_is_known() -> None:
    # llmq router train: the encoder loads (nothing counted yet), then batches are counted.
    made, out = bar(None, tty=False)
    made(50, 100)
    made(100, 100)
    lines = out.getvalue().splitlines()
    assert lines[0] == "work..."
    assert "50/100 50%" in lines[1] and "100/100 100%" in lines[2] and len(lines) == 3


def test_a_night_of_summaries_draws_ended_of_all_with_its_failures() -> None:
    from workers.summaries.cli import summary_bar
    from workers.summaries.night import Progress

    made, _out = bar(None, tty=False)
    summary_bar(made)(Progress(done=3, failed=1, remaining=4, elapsed_s=2.0))
    line = made.render()
    assert "4/8 50%" in line and "1 failed" in line
