"""What the ``llmq`` command prints when a command fails: one line, never a traceback."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from producer import cli
from schemas.errors import InvalidRequest


def parser_running(handler: cli.Handler) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmq")
    parser.set_defaults(handler=handler)
    return parser


def run_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: BaseException
) -> tuple[int, str]:
    def fail(_args: argparse.Namespace) -> int:
        raise error

    monkeypatch.setattr(cli, "build_parser", lambda: parser_running(fail))
    code = cli.main([])
    return code, capsys.readouterr().err


def test_an_llmq_error_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main(monkeypatch, capsys, InvalidRequest("max_tokens must be positive"))
    assert code == 1
    assert err == "llmq: error: max_tokens must be positive\n"


def test_a_bug_is_one_line_that_says_how_to_see_more(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main(monkeypatch, capsys, KeyError("tier"))
    assert code == 1
    assert "Traceback" not in err
    assert err.startswith("llmq: internal error (KeyError: 'tier')")
    assert "--log-level DEBUG" in err


def test_a_closed_pipe_ends_quietly() -> None:
    # `llmq ... | head`: the reader leaves early; the writer must not print a traceback.
    script = (
        "import argparse, sys\n"
        "from producer import cli\n"
        "def spew(_args):\n"
        "    while True:\n"
        "        sys.stdout.write('line\\n' * 1000)\n"
        "parser = argparse.ArgumentParser(prog='llmq')\n"
        "parser.set_defaults(handler=spew)\n"
        "cli.build_parser = lambda: parser\n"
        "sys.exit(cli.main([]))\n"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert writer.stdout is not None
    writer.stdout.read(10)
    writer.stdout.close()
    _, err = writer.communicate(timeout=60)
    assert writer.returncode == cli.BROKEN_PIPE_EXIT
    assert err == b""


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "gateway.internal"])
def test_the_gateway_refuses_no_auth_off_loopback(host: str) -> None:
    from producer.gateway.cli import check_auth_exposure
    from schemas.errors import ConfigError

    with pytest.raises(ConfigError, match="loopback address only"):
        check_auth_exposure(host, no_auth=True)
    check_auth_exposure(host, no_auth=False)  # with keys, any address
    check_auth_exposure("127.0.0.1", no_auth=True)
    check_auth_exposure("localhost", no_auth=True)


def test_a_missing_module_names_the_extra_it_comes_in() -> None:
    from producer.cli import EXTRA_HINT, extra_hint

    assert extra_hint("matplotlib.pyplot") == (
        "this command needs the bench extra: pip install 'llmq[bench]'"
    )
    assert "llmq[gateway]" in extra_hint("fastapi")
    assert extra_hint("vllm") == EXTRA_HINT
    assert extra_hint(None) == EXTRA_HINT
