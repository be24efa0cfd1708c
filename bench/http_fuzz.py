"""Fuzzing the gateway over real HTTP.

:mod:`bench.fuzz` checks that pydantic refuses bad requests cleanly. Here the same kind
of garbage goes through everything behind the parsers: :func:`fuzz_gateway` sends the
malformed, odd and hostile requests of :mod:`bench.http_cases` to a running ``llmq
gateway`` and counts the answers a client must never get: a 5xx other than 503, an
error event of the server's own making inside a stream, or a connection the server
dropped without answering. :mod:`bench.submit_fuzz` does the same to ``Client.submit``,
and :mod:`bench.cross_key` has one key try another's jobs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from bench.http_cases import HttpCase, http_cases

MAX_FAILURES_KEPT = 50
"""Failures are described one line each; a run keeps the first this many."""

# An error inside a 200 stream that a job's own failure explains (it was cancelled,
# or its engine failed) rather than the gateway.
JOB_ERROR_CODES = frozenset({"job_failed"})


@dataclass
class HttpFuzzReport:
    """What the gateway answered to ``http_fuzz_cases`` hostile requests.

    ``http_5xx`` (must be 0) counts answers of 500 and above other than 503, plus
    server errors reported inside a 200 stream; ``transport_errors`` (must be 0)
    counts requests the server dropped without an answer. ``http_503`` is counted
    apart: no warm worker for an interactive request, or a dependency down, are
    legitimate; ``http_503_codes`` says which (``backend_unavailable`` while Redis and
    the database are up means bad input reached them unchecked). ``timeouts`` are
    requests still waiting after ``timeout_s`` (a batch job queued with no worker);
    ``job_failed`` are answers about a job that ended in error (a resumed job that was
    cancelled, say), which the gateway reports as OpenAI does, with a 500.
    """

    http_fuzz_cases: int = 0
    http_5xx: int = 0
    http_503: int = 0
    transport_errors: int = 0
    timeouts: int = 0
    job_failed: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    http_503_codes: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, line: str) -> None:
        if len(self.failures) < MAX_FAILURES_KEPT:
            self.failures.append(line)


def fuzz_gateway(
    base_url: str,
    *,
    api_keys: Sequence[str],
    other_job_ids: Sequence[str] = (),
    own_job_ids: Sequence[str] = (),
    cases: int = 1_000,
    seed: int = 0,
    timeout_s: float = 5.0,
    stream_read_s: float = 0.3,
) -> HttpFuzzReport:
    """Send ``cases`` hostile requests to the gateway at ``base_url``; count bad answers.

    The gateway needs no worker: an interactive request is then refused with 503, a
    batch one is queued (and streamed, so it answers at once). ``api_keys`` should have
    a generous rate limit (the cases are spread over them); ``own_job_ids`` belong to
    ``api_keys[0]``. A streamed answer is read for at most ``stream_read_s``: what
    comes in that time is checked for server errors. Cases with bad credentials are
    sent last, since they get the client's address refused for a while (run
    :func:`cross_key_probe` first, or from another address). Raises nothing for what
    the gateway does; ``httpx`` errors that are the client's own fault propagate.
    """
    report = HttpFuzzReport()
    plan = http_cases(
        cases,
        seed,
        api_keys=api_keys,
        other_job_ids=other_job_ids,
        own_job_ids=own_job_ids,
    )
    timeout = httpx.Timeout(timeout_s)
    with httpx.Client(base_url=base_url, timeout=timeout) as http:
        for index, case in enumerate(plan):
            report.http_fuzz_cases += 1
            _send(http, case, index, report, stream_read_s=stream_read_s)
    return report


def _send(
    http: httpx.Client, case: HttpCase, index: int, report: HttpFuzzReport, *, stream_read_s: float
) -> None:
    where = f"case {index} {case.describe()}"
    try:
        response = _send_once(http, case, stream_read_s=stream_read_s)
    except httpx.TimeoutException:
        report.timeouts += 1
        return
    except httpx.TransportError:
        # A kept-alive connection the server had just closed (it may, after an early
        # 413, say) fails without the server having done wrong: retry on a new one.
        with httpx.Client(base_url=http.base_url, timeout=http.timeout) as fresh:
            try:
                response = _send_once(fresh, case, stream_read_s=stream_read_s)
                _check_response(response, where, report, stream_read_s=stream_read_s)
            except httpx.TimeoutException:
                report.timeouts += 1
            except httpx.TransportError as exc:
                report.transport_errors += 1
                report.fail(f"{where}: no answer: {type(exc).__name__}: {exc}"[:1000])
        return
    _check_response(response, where, report, stream_read_s=stream_read_s)


def _send_once(http: httpx.Client, case: HttpCase, *, stream_read_s: float) -> httpx.Response:
    url = http.base_url.copy_with(raw_path=case.path.encode("latin-1"))
    # A header value may not start or end with blanks: the client itself refuses them.
    headers = [(name, value.strip(b" \t")) for name, value in case.headers]
    timeout = http.timeout
    if case.streamed:
        timeout = httpx.Timeout(timeout.connect, read=stream_read_s, write=timeout.write)
    request = http.build_request(
        case.method, url, headers=headers, content=case.body, timeout=timeout
    )
    return http.send(request, stream=True)


def _check_response(
    response: httpx.Response, where: str, report: HttpFuzzReport, *, stream_read_s: float
) -> None:
    try:
        status = response.status_code
        report.statuses[status] = report.statuses.get(status, 0) + 1
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            _check_stream(response, where, report, stream_read_s=stream_read_s)
            return
        body = response.read()
        code = _error_code(body) or "?"
        if status == 503:
            report.http_503 += 1
            report.http_503_codes[code] = report.http_503_codes.get(code, 0) + 1
        elif status >= 500 and code in JOB_ERROR_CODES:
            report.job_failed += 1
        elif status >= 500:
            report.http_5xx += 1
            report.fail(f"{where}: HTTP {status}: {body[:300]!r}")
    except httpx.TimeoutException:
        report.timeouts += 1
    except httpx.TransportError as exc:
        report.transport_errors += 1
        report.fail(f"{where}: answer cut off: {type(exc).__name__}: {exc}"[:1000])
    finally:
        response.close()


def _check_stream(
    response: httpx.Response, where: str, report: HttpFuzzReport, *, stream_read_s: float
) -> None:
    """Read SSE events for a while; an error event the server made up is a 5xx."""
    deadline = time.monotonic() + stream_read_s
    buffered = b""
    try:
        for chunk in response.iter_raw():
            buffered += chunk
            if time.monotonic() > deadline or len(buffered) > 1_000_000:
                break
    except httpx.ReadTimeout:
        pass  # a queued job with no worker: nothing to stream yet
    for line in buffered.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        try:
            error = json.loads(line[6:]).get("error")
        except ValueError:
            report.http_5xx += 1
            report.fail(f"{where}: unparsable SSE data {line[:200]!r}")
            continue
        if isinstance(error, dict) and error.get("type") not in (None, "invalid_request_error"):
            if error.get("code") in JOB_ERROR_CODES:
                report.job_failed += 1
                continue
            if error.get("type") == "service_unavailable":
                report.http_503 += 1
                code = str(error.get("code"))
                report.http_503_codes[code] = report.http_503_codes.get(code, 0) + 1
                continue
            report.http_5xx += 1
            report.fail(f"{where}: error event in stream: {error}")


def _error_code(body: bytes) -> str | None:
    try:
        error = json.loads(body)["error"]
        return str(error.get("code"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
