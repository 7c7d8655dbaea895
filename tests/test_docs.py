"""The examples in README.md and docs/ run, and print what their comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FENCED_PYTHON = re.compile(r"```python\n(.*?)```", re.DOTALL)


def python_blocks() -> list:
    params = []
    for doc in ("README.md", "docs/index.md"):
        for number, code in enumerate(FENCED_PYTHON.findall((ROOT / doc).read_text()), start=1):
            marks = [pytest.mark.gpu] if "cupy" in code else []
            params.append(pytest.param(code, id=f"{doc}-{number}", marks=marks))
    return params


def expected_prints(code: str) -> list[str]:
    """``print(x)  # 5.0 1: why`` promises the output ``5.0 1`` (whitespace collapsed)."""
    return [" ".join(line.split("#", 1)[1].split(":", 1)[0].split())
            for line in code.splitlines() if line.startswith("print(") and "#" in line]


def test_the_readme_has_examples():
    assert len(python_blocks()) >= 3


@pytest.mark.parametrize("code", python_blocks())
def test_example_runs_and_prints_what_it_says(code):
    printed: list[str] = []

    def record(*values):
        printed.append(" ".join(" ".join(str(v).split()) for v in values))

    exec(compile(code, "<doc>", "exec"), {"print": record, "__name__": "__doc_example__"})
    assert printed == expected_prints(code)
