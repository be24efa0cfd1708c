"""Every figure in the docs stands on a JSON result committed under ``docs/results/``.

The pages checked are ``README.md`` and every ``docs/**/*.md``. The rules:

1. A result a page links or names (``results/<name>.json``) exists under
   ``docs/results/``, parses as a JSON object, and names the host it ran on (``host``:
   a non-empty string or object) and the commit it ran at (``commit``: a hash of 7 to
   40 hex digits, ``+dirty`` allowed). A result without them cannot back a figure:
   rerun the bench rather than describe the run in prose.
2. A *measured figure* is a number with a unit of time (``ms``, ``µs``, ``s``,
   ``min``, ``h``), a rate (``tokens/s``, ``tok/s``, ``requests/s``), a percentage
   (``98.3%``) or a factor (``0.97x``), or any number with a decimal point (a ratio
   such as ``1.102``). A whole number with no unit is one when a range, a slash or an
   arrow ties it to a number with a unit (``53 / 75 ms``, ``7,668 -> 2,979 ms``).
   Other whole numbers without a unit (counts, cores, a setting's tokens) are not
   figures, nor are numbers in code (backticks, fenced blocks), in link targets and
   HTML comments, or inside names and versions (``p99``, ``SmolLM2-135M``,
   ``6.18.44``).
3. Each block that prints a measured figure links at least one result, and every
   figure in it is found in one of the results it links. A block is a paragraph, a
   list item (with its continuation lines) or a table row; a table row may also use
   the results linked by the paragraph right above its table. Found means: some
   number of the result (per-request ``*samples*`` lists left out), scaled by the
   printed unit (a percentage may be stored as a fraction, seconds as milliseconds and
   the reverse), equals the printed figure at the precision printed, sign included.
   The check ties a figure to the results of its block, not to one field of them: a
   figure printed with two digits may also match another number of the same result.
4. Not measurements, so exempt, and nothing else:

   * a limit or goal: a number right after ``<=``, ``>=``, ``<``, ``>``, ``≤``,
     ``≥``, "at most", "at least", "no more than", "up to", "over", "under",
     "above", "below", "more than" or "less than", or right before "or more",
     "or less" or "or fewer";
   * a default: a number right after "default" (``(default 30 s)``), "defaults to"
     or a setting's or header's name in backticks (``LLMQ_X`` (5 s),
     ``Retry-After`` (60 s)), or right before "by default";
   * a period a contract promises: a time right after "every", "after", "for" or
     "within", or right before (one word between at most) "timeout", "TTL", "grace",
     "heartbeat", "expiry", "SLO", "budget", "deadline", "window", "old", "lease" or
     "interval";
   * a confidence level: a percentage right before (two words between at most)
     "interval", "CI", "confidence" or "bound";
   * a version: a number right after "Python", "Llama", "capability" or "version";
   * a cell in a table column headed "goal", "default" or "limit";
   * every block from a marker line ``<!-- not measured: REASON -->`` to the next
     blank line (a paragraph, a list or a table), REASON saying what the numbers are
     instead (a bench's request settings, a controller's constants).
5. No page embeds an image, and no image file sits under ``docs/`` but in
   ``docs/results/`` beside the JSON result of its own name: a plot is a figure too.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
IMAGE_SUFFIXES = {".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp"}

MINUS = "\u2212"
TIMES = "\u00d7"
EN_DASH = "\u2013"
ARROW = "\u2192"

COMMIT = re.compile(r"[0-9a-f]{7,40}(\+dirty)?")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
RESULT_MENTION = re.compile(r"(?<![\w/.-])((?:\.\./)*(?:docs/)?results/[\w.-]+\.json)")
CODE_SPAN = re.compile(r"`[^`]*`")
# A setting's name (LLMQ_*) or an HTTP header's (Retry-After) in backticks.
SETTING_SPAN = re.compile(r"`(?:LLMQ_[A-Z0-9_]*|[A-Z][a-z]+(?:-[A-Z][a-z]+)+)`")
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
MARKER = re.compile(r"^\s*<!--\s*not measured:\s*\S.*-->\s*$")
LIST_ITEM = re.compile(r"^\s*(?:[*+-]|\d+\.)\s")
EXEMPT_COLUMNS = {"goal", "default", "limit"}

# Units that may touch their number, and unit words that come after a space.
TIGHT_UNIT = rf"tokens/s|tok/s|requests/s|req/s|ms|µs|[%x{TIMES}]"
SPACED_UNIT = r"us|seconds?|s|minutes?|min|hours?|h"
UNIT = rf"(?:\s?(?:{TIGHT_UNIT})|\s(?:{SPACED_UNIT}))(?![\w/])"
NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?P<sign>(?<![^\s(\[])[-+{MINUS}])?"  # a sign only after a space or a bracket
    r"(?<![\w.,])"  # not inside a name or a version
    rf"(?P<num>{NUMBER})"
    r"(?![.,]?\d)"
    rf"(?P<unit>{UNIT})?"
)
RANGE_AFTER = re.compile(
    rf"^\s*(?:-|{EN_DASH}|/|{ARROW}|->|to|against|vs\.?)\s*[-+{MINUS}]?(?:{NUMBER})"
    rf"(?P<unit>{UNIT})"
)
UNIT_KINDS = {
    "x": "x",
    TIMES: "x",
    "µs": "us",
    "us": "us",
    "s": "s",
    "second": "s",
    "seconds": "s",
    "min": "min",
    "minute": "min",
    "minutes": "min",
    "h": "h",
    "hour": "h",
    "hours": "h",
    "ms": "ms",
    "%": "%",
}
TIME_UNITS = {"ms", "us", "s", "min", "h"}
# The scales that turn a stored number into the unit a figure is printed in.
SCALES: dict[str, tuple[float, ...]] = {
    "": (1.0,),
    "x": (1.0,),
    "%": (100.0, 1.0),
    "ms": (1.0, 1000.0),
    "us": (1000.0, 1.0),
    "s": (1.0, 0.001),
    "min": (1.0, 1 / 60, 1 / 60_000),
    "h": (1.0, 1 / 3600),
    "rate": (1.0,),
}

# Rule 4's words, right before or right after a number.
LIMIT_BEFORE = re.compile(
    r"(?:<=|>=|≤|≥|<|(?<!-)>|\bat most|\bat least|\bno more than|\bup to|\bover|\bunder"
    r"|\babove|\bbelow|\bmore than|\bless than)$",
    re.IGNORECASE,
)
LIMIT_AFTER = re.compile(r"^\s*(?:or more|or less|or fewer)\b", re.IGNORECASE)
DEFAULT_BEFORE = re.compile(
    r"(?:\bdefaults? to|\bdefault(?: is| of)?:?|\bSETTING\s*(?:\(|,|is|=|:)?)$",
    re.IGNORECASE,
)
DEFAULT_AFTER = re.compile(r"^\s*by default\b", re.IGNORECASE)
PERIOD_BEFORE = re.compile(r"\b(?:every|after|for|within)$", re.IGNORECASE)
PERIOD_AFTER = re.compile(
    r"^[\s-]*(?:[a-z]+[\s-]+)?(?:timeouts?|TTLs?|grace|heartbeats?|expiry|SLOs?"
    r"|budgets?|deadlines?|windows?|old|leases?|intervals?)\b",
    re.IGNORECASE,
)
CONFIDENCE_AFTER = re.compile(
    r"^\s*(?:[A-Za-z-]+\s+){0,2}?(?:interval|CI\b|confidence|bound)", re.IGNORECASE
)
VERSION_BEFORE = re.compile(r"\b(?:Python|Llama|capability|version)$")


@dataclass(frozen=True)
class Figure:
    text: str
    value: float
    decimals: int
    unit: str


@dataclass
class Block:
    """A paragraph, a list item or a table row of a page."""

    page: Path
    line: int
    lines: list[str]
    table_header: list[str] | None = None
    caption_links: list[str] = field(default_factory=list)
    exempt: bool = False

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def is_prose(self) -> bool:
        return not self.lines[0].lstrip().startswith(("|", "#"))


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def blocks(page: Path) -> list[Block]:
    """A page's blocks, fenced code left out."""
    found: list[Block] = []
    current: Block | None = None
    in_fence = False
    marker = False
    header: list[str] | None = None
    caption_links: list[str] = []
    table_exempt = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            current = None
            continue
        if in_fence:
            continue
        if not line.strip():
            current, header, marker = None, None, False
            continue
        if MARKER.match(line):
            current, marker = None, True
            continue
        if line.lstrip().startswith("|"):
            current = None
            if header is None:
                header = [cell.strip().lower() for cell in line.strip().strip("|").split("|")]
                caption = found[-1] if found and found[-1].is_prose else None
                caption_links = result_links(caption) if caption is not None else []
                table_exempt = marker
            elif set(line.replace("|", "").strip()) <= set("-: "):
                continue
            found.append(Block(page, number, [line], header, caption_links, table_exempt))
            continue
        header = None
        if line.lstrip().startswith("#"):
            found.append(Block(page, number, [line], exempt=marker))
            current = None
        elif current is None or LIST_ITEM.match(line):
            current = Block(page, number, [line], exempt=marker)
            found.append(current)
        else:
            current.lines.append(line)
    return found


def result_links(block: Block) -> list[str]:
    """The results a block links, as paths from the repository's root."""
    links: list[str] = []
    for target in LINK_TARGET.findall(block.text):
        path = target.split("#", 1)[0]
        if path.endswith(".json") and "results/" in path:
            resolved = (block.page.parent / path).resolve()
            links.append(relative(resolved) if resolved.is_relative_to(ROOT) else path)
    return links


def visible_text(text: str) -> str:
    """Prose only: comments and link targets dropped, code spans made into words."""
    text = COMMENT.sub(" ", text)
    text = LINK_TARGET.sub("]( )", text)
    text = SETTING_SPAN.sub(" SETTING ", text)
    return CODE_SPAN.sub(" CODE ", text)


def exempt(before: str, after: str, unit: str) -> bool:
    """Whether rule 4 says the number between ``before`` and ``after`` is no measurement."""
    before = before.rstrip(" ~≈")
    return bool(
        LIMIT_BEFORE.search(before)
        or LIMIT_AFTER.match(after)
        or DEFAULT_BEFORE.search(before)
        or DEFAULT_AFTER.match(after)
        or VERSION_BEFORE.search(before)
        or (unit in TIME_UNITS and (PERIOD_BEFORE.search(before) or PERIOD_AFTER.match(after)))
        or (unit == "%" and CONFIDENCE_AFTER.match(after))
    )


def unit_kind(raw: str) -> str:
    raw = raw.strip()
    return "rate" if "/" in raw else UNIT_KINDS.get(raw, raw)


def figures_in(text: str) -> list[Figure]:
    """The measured figures of one piece of prose (rules 2 and 4)."""
    text = " ".join(text.split())
    found: list[Figure] = []
    for match in FIGURE.finditer(text):
        number = match.group("num")
        unit = unit_kind(match.group("unit") or "")
        after = text[match.end() :]
        if not unit:
            joined = RANGE_AFTER.match(after)
            if joined:
                unit = unit_kind(joined.group("unit"))
            elif "." not in number:
                continue
        if exempt(text[: match.start("num")], after, unit):
            continue
        value = float(number.replace(",", ""))
        if match.group("sign") in {"-", MINUS}:
            value = -value
        decimals = len(number.split(".", 1)[1]) if "." in number else 0
        found.append(Figure(match.group(0).strip(), value, decimals, unit))
    return found


def figures(block: Block) -> list[Figure]:
    """The measured figures a block prints."""
    if block.exempt:
        return []
    text = visible_text(block.text)
    if block.table_header is None:
        return figures_in(text)
    cells = text.strip().strip("|").split("|")
    header = block.table_header
    return [
        figure
        for index, cell in enumerate(cells)
        if index >= len(header) or header[index] not in EXEMPT_COLUMNS
        for figure in figures_in(cell)
    ]


def numbers(data: Any, key: str = "") -> list[float]:
    """Every number in a result, per-request samples left out."""
    if "samples" in key or isinstance(data, bool):
        return []
    if isinstance(data, int | float):
        return [float(data)] if math.isfinite(data) else []
    if isinstance(data, dict):
        return [n for k, v in data.items() for n in numbers(v, str(k))]
    if isinstance(data, list):
        return [n for item in data for n in numbers(item, key)]
    return []


def found_in(figure: Figure, stored: list[float]) -> bool:
    tolerance = 0.5 * 10 ** (-figure.decimals) + 1e-9
    return any(
        abs(value * scale - figure.value) <= tolerance
        for scale in SCALES[figure.unit]
        for value in stored
    )


def load_result(path: str) -> dict[str, Any]:
    data = json.loads((ROOT / path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def linked_results() -> dict[str, list[str]]:
    """Each result a page links or names, with where."""
    linked: dict[str, list[str]] = {}
    for page in pages():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            targets = [target.split("#", 1)[0] for target in LINK_TARGET.findall(line)]
            for target in {*targets, *RESULT_MENTION.findall(line)}:
                if not (target.endswith(".json") and "results/" in target):
                    continue
                candidates = [(page.parent / target).resolve(), (ROOT / target).resolve()]
                resolved = next((c for c in candidates if c.exists()), candidates[0])
                key = relative(resolved) if resolved.is_relative_to(ROOT) else target
                linked.setdefault(key, []).append(f"{relative(page)}:{number}")
    return linked


def test_every_linked_result_exists_and_names_its_host_and_commit() -> None:
    linked = linked_results()
    assert linked, "no page links a result under docs/results/"
    problems: list[str] = []
    for path, places in sorted(linked.items()):
        where = ", ".join(places)
        if not (ROOT / path).is_file() or (ROOT / path).parent != RESULTS:
            problems.append(f"{path} ({where}): no such result under docs/results/")
            continue
        try:
            data = load_result(path)
        except ValueError as exc:
            problems.append(f"{path} ({where}): {exc}")
            continue
        host = data.get("host")
        if not (isinstance(host, str | dict) and host and str(host).strip()):
            problems.append(f"{path} ({where}): names no host")
        commit = data.get("commit")
        if not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
            problems.append(f"{path} ({where}): names no commit")
    assert not problems, "\n".join(problems)


def test_every_measured_figure_is_in_a_result_its_block_links() -> None:
    problems: list[str] = []
    for page in pages():
        for block in blocks(page):
            printed = figures(block)
            if not printed:
                continue
            place = f"{relative(page)}:{block.line}"
            links = [*result_links(block), *block.caption_links]
            if not links:
                shown = ", ".join(figure.text for figure in printed)
                problems.append(f"{place}: figures with no result linked: {shown}")
                continue
            stored = [
                n for path in links if (ROOT / path).is_file() for n in numbers(load_result(path))
            ]
            missing = [figure.text for figure in printed if not found_in(figure, stored)]
            if missing:
                problems.append(f"{place}: not in {', '.join(links)}: {', '.join(missing)}")
    assert not problems, f"{len(problems)} blocks:\n" + "\n".join(problems)


def test_no_plot_without_its_result() -> None:
    problems: list[str] = []
    for page in pages():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if "![" in line or "<img" in line.lower():
                problems.append(f"{relative(page)}:{number}: embeds an image")
    for file in DOCS.rglob("*"):
        if file.suffix.lower() in IMAGE_SUFFIXES and not (
            file.parent == RESULTS and file.with_suffix(".json").is_file()
        ):
            problems.append(f"{relative(file)}: an image with no result of its name beside it")
    assert not problems, "\n".join(problems)


def test_every_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {target.split("#", 1)[0] for target in LINK_TARGET.findall(readme)}
    missing = [relative(page) for page in sorted(DOCS.glob("*.md")) if relative(page) not in linked]
    assert not missing, f"pages the README does not link: {missing}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("p50 / p99 172 ms / 3.75 s, 0.97x", ["172 ms", "3.75 s", "0.97x"]),
        ("`ttft_ratio` 1.102 (+4.9 ms) and -0.1 ms", ["1.102", "+4.9 ms", "-0.1 ms"]),
        ("100% (98.3-100%), 136.7 tokens/s", ["100%", "98.3", "100%", "136.7 tokens/s"]),
        ("idle 53 / 75 ms, 7,668 -> 2,979 ms", ["53", "75 ms", "7,668", "2,979 ms"]),
        ("12 slots, 219 requests, 2,000 tokens, the 400s, SmolLM2-135M, p99", []),
        ("Linux 6.18.44, Python 3.11+, `a 12.5 ms` in code, [x](results/r-1.5.json)", []),
        ("goal <= 3 ms, at most 1.5, over 5%, (default 30 s), 4 s by default", []),
        ("`LLMQ_READYZ_CACHE_S` (2 s), `Retry-After` (60 s), 0.8 or more", []),
        ("every 5 s, after 60 s, a 30 s busy timeout, a 2 s SLO, 95% Wilson interval", []),
        ("it took 5 s, a 95% share, `ttft_added_ms` (4.9 ms)", ["5 s", "95%", "4.9 ms"]),
    ],
)
def test_what_counts_as_a_measured_figure(text: str, expected: list[str]) -> None:
    assert [figure.text for figure in figures_in(visible_text(text))] == expected


def test_a_marker_exempts_its_blocks_up_to_the_next_blank_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not measured: settings -->\n| a | b |\n|---|---|\n| x | 1.5 ms |\n\n"
        "<!-- not measured: constants -->\n- 0.6 of it\n- 0.7 of it\n\n"
        "| a | goal |\n|---|---|\n| 2.5 ms | <= 3 ms |\n| 4.5 | 1.5 |\n",
        encoding="utf-8",
    )
    printed = [[figure.text for figure in figures(block)] for block in blocks(page)]
    assert printed == [[], [], [], [], [], ["2.5 ms"], ["4.5"]]


def test_a_figure_is_found_at_its_printed_precision() -> None:
    assert found_in(Figure("3.75 s", 3.75, 2, "s"), [3747.3])
    assert found_in(Figure("98.3%", 98.3, 1, "%"), [0.9828])
    assert found_in(Figure("0.97x", 0.97, 2, "x"), [0.966])
    assert found_in(Figure("172 ms", 172.0, 0, "ms"), [171.58])
    assert not found_in(Figure("0.98x", 0.98, 2, "x"), [0.966])
    assert not found_in(Figure("-4.9 ms", -4.9, 1, "ms"), [4.9])
    assert not found_in(Figure("172 ms", 172.0, 0, "ms"), [171.4])
    assert numbers({"a_samples_ms": [1.0], "flag": True, "p": [{"x": 2}]}) == [2.0]
