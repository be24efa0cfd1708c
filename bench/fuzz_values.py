"""Arbitrary JSON-like values and odd strings and numbers, drawn from a seed: what every
fuzzer builds its bad inputs from.

Plain functions of a seeded ``random.Random`` draw the same values on every run;
:func:`json_values` is the hypothesis strategy for tests (hypothesis is imported only
inside it: the benchmarks run where only the worker's dependencies are installed).
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy


JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
# Values at and past every edge a numeric field has: signs, ceilings, 64-bit limits,
# bools (an int subclass), and the floats JSON parsers let through.
ODD_NUMBERS: tuple[int | float, ...] = (
    0,
    -1,
    1,
    32_768,
    32_769,
    2**63,
    -(2**63) - 1,
    10**40,
    0.5,
    -0.0,
    1e-320,
    1e308,
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
)
ODD_STRINGS: tuple[str, ...] = (
    "",
    " ",
    "\n\t ",
    "\x00",
    "\ud800",  # a lone surrogate: json.loads produces one from "\\ud800"
    "\u200b",
    "null",
    "8",
    "USER",
    "user ",
    "🙂🙂🙂",
    "support@",
    "../etc/passwd",
)

# Arbitrary JSON-like values ------------------------------------------------------


def random_json_value(rng: random.Random, *, depth: int = 3) -> JsonValue:
    """Any value ``json.loads`` can return (NaN and infinities included), nested ``depth``."""
    scalars: tuple[Callable[[], JsonValue], ...] = (
        lambda: None,
        lambda: rng.random() < 0.5,
        lambda: rng.choice((rng.randint(-(2**70), 2**70), *ODD_NUMBERS)),
        lambda: rng.choice((rng.uniform(-1e6, 1e6), math.nan, math.inf, -math.inf)),
        lambda: random_text(rng),
    )
    containers: tuple[Callable[[], JsonValue], ...] = (
        lambda: [random_json_value(rng, depth=depth - 1) for _ in range(rng.randrange(4))],
        lambda: {
            random_text(rng, max_chars=8): random_json_value(rng, depth=depth - 1)
            for _ in range(rng.randrange(4))
        },
    )
    return rng.choice(scalars + containers if depth > 0 else scalars)()


def random_text(rng: random.Random, *, max_chars: int = 24) -> str:
    """Short text, often from the odd strings, otherwise any printable or unicode mix."""
    if rng.random() < 0.3:
        return rng.choice(ODD_STRINGS)
    alphabet = string.printable + "éß漢字🙂\u0301\x00\x7f"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(max_chars + 1)))


def json_values() -> SearchStrategy[JsonValue]:
    """Any JSON-like value: None, bools, ints of any size, floats with NaN and
    infinities, any text, and lists and dicts of those."""
    from hypothesis import strategies as st

    scalars: SearchStrategy[JsonValue] = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text()
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(st.lists(children), st.dictionaries(st.text(), children)),
        max_leaves=20,
    )
