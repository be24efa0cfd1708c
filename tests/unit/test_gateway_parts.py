"""The gateway's three parts, enforced: protocol imports no other part, serving reads
no HTTP and never the routes, no route imports the app; and no gateway module grows
past 400 lines.

Read from source like the layer test, so an import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parents[2] / "producer" / "gateway"

# Part -> module prefixes its modules must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    # The shapes stand alone: a Batch API line or a fuzzer validates with them.
    "protocol": (
        "producer.gateway.routes",
        "producer.gateway.serving",
        "producer.gateway.app",
        "producer.gateway.context",
        "fastapi",
        "starlette",
    ),
    # Serving is handed what a call said; the routes make its answer a response.
    "serving": ("producer.gateway.routes", "producer.gateway.app", "fastapi", "starlette"),
    "routes": ("producer.gateway.app",),
}


def imported(path: Path) -> list[str]:
    modules = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.extend([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    return modules


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_a_part_imports_only_what_it_may(part: str) -> None:
    files = sorted((GATEWAY / part).glob("*.py"))
    assert files, part
    violations = [
        f"{path.relative_to(GATEWAY)} imports {module}"
        for path in files
        for module in imported(path)
        if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN[part])
    ]
    assert not violations, "\n".join(violations)


def test_no_gateway_module_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(GATEWAY)): lines
        for path in GATEWAY.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > 400
    }
    assert not long, long
