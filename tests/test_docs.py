"""The examples in README.md and docs/ run and print what their comments say; the site works offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
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


# ------------------------------------------------------------ offline site

#: Set by .ci/run to the site its docs build made; without it the test builds one (if mkdocs is installed).
SITE_ENV = "TROPICAL_GEMM_DOCS_SITE"
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
_CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""", re.IGNORECASE)
#: Attributes through which a page loads something (links a reader clicks, <a href>, load nothing).
_LOADING = {("script", "src"), ("link", "href"), ("img", "src"), ("img", "srcset"), ("iframe", "src"),
            ("source", "src"), ("source", "srcset"), ("video", "src"), ("audio", "src"), ("embed", "src"),
            ("object", "data"), ("image", "href")}


class _Page(HTMLParser):
    """What one HTML page loads: attribute URLs, CSS in style blocks and attributes, and whether it has diagrams."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self.scripts: list[str] = []
        self.diagrams = False
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if (tag, name) in _LOADING:
                self.loads += [part.split()[0] for part in value.split(",") if part.strip()] if "srcset" in name else [value]
            if name == "style":
                self.loads += _CSS_URL.findall(value)
            if name == "class" and "mermaid" in value.split():
                self.diagrams = True
        if tag == "script":
            self.scripts += [value for name, value in attrs if name == "src" and value]
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.loads += _CSS_URL.findall(data)


def offline_problems(site: Path) -> list[str]:
    """Each place the built site would reach another host, or draw a diagram without the vendored mermaid."""
    problems = []
    for page in sorted(site.rglob("*.html")):
        parsed = _Page()
        parsed.feed(page.read_text(encoding="utf-8"))
        where = page.relative_to(site).as_posix()
        problems += [f"{where} loads {url}" for url in parsed.loads if _EXTERNAL.match(url)]
        if parsed.diagrams and not any(src.endswith("vendor/mermaid.min.js") for src in parsed.scripts):
            problems.append(f"{where} has a mermaid diagram but does not load the vendored mermaid.min.js")
    for sheet in sorted(site.rglob("*.css")):
        problems += [f"{sheet.relative_to(site).as_posix()} loads {url}"
                     for url in _CSS_URL.findall(sheet.read_text(encoding="utf-8")) if _EXTERNAL.match(url)]
    return problems


def test_the_offline_check_finds_what_a_page_would_fetch(tmp_path):
    (tmp_path / "index.html").write_text(
        '<link rel="preconnect" href="https://fonts.gstatic.com"><script src="//cdn.example/x.js"></script>'
        '<a href="https://example.org/">a link loads nothing</a><img srcset="a.png 1x, https://e.org/b.png 2x">'
        '<style>@import "https://fonts.googleapis.com/css";</style><div class="mermaid">graph TD</div>')
    (tmp_path / "a.css").write_text("body { background: url('http://example.org/bg.png') }")
    assert offline_problems(tmp_path) == [
        "index.html loads https://fonts.gstatic.com", "index.html loads //cdn.example/x.js",
        "index.html loads https://e.org/b.png", "index.html loads https://fonts.googleapis.com/css",
        "index.html has a mermaid diagram but does not load the vendored mermaid.min.js",
        "a.css loads http://example.org/bg.png",
    ]


def _built_site(tmp_path: Path) -> Path:
    given = os.environ.get(SITE_ENV)
    if given:
        site = Path(given)
        assert (site / "index.html").is_file(), f"{SITE_ENV}={given} holds no built site"
        return site
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]'); "
                                         ".ci/run runs this test after its docs build")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                   cwd=ROOT, check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    return tmp_path / "site"


def test_the_built_site_loads_nothing_from_another_host(tmp_path):
    site = _built_site(tmp_path)
    assert offline_problems(site) == []
    assert any(_has_diagram(p) for p in site.rglob("*.html")), "no page draws a diagram: the check is idle"


def _has_diagram(page: Path) -> bool:
    parsed = _Page()
    parsed.feed(page.read_text(encoding="utf-8"))
    return parsed.diagrams


def test_the_readme_says_whose_figures_they_are():
    """Every README paragraph that quotes a time or a throughput names the machine, and readers are told
    that theirs will differ (issue 19: a figure from another host read as a promise)."""
    text = (ROOT / "README.md").read_text()
    assert "your numbers will differ" in text.lower()
    figure = re.compile(r"\b\d+(?:\.\d+)? ?(?:s|G ops/s)\b")
    machine = re.compile(r"EPYC|Xeon|Zen|H100|H200|[0-9]-core")
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if figure.search(p) and not p.startswith(("```", "|"))]
    assert paragraphs, "no figures found: the check is idle"
    unnamed = [p[:80] for p in paragraphs if not machine.search(p)]
    assert unnamed == []


def _nav_pages() -> list[str]:
    """The pages of mkdocs.yml's navigation, in order (``index.md``, ``semantics.md``, ...)."""
    return re.findall(r"^  - [^:]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)


def test_the_examples_table_names_every_example():
    table = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    examples = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
    assert examples, "no examples found: the check is idle"
    assert [name for name in examples if f"| `examples/{name}` |" not in table] == []
    assert [name for name in examples if f"`examples/{name}`" not in readme] == []


def test_the_readme_lists_every_page():
    pages = _nav_pages()
    assert "einsum.md" in pages and "architecture.md" in pages, pages
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\* \[docs/(\S+\.md)\]\(docs/\S+\.md\)", readme, re.M)
    assert [page for page in pages if page != "changelog.md" and page not in listed] == []
    assert [page for page in listed if page not in pages] == []
    for path in (ROOT / "docs").glob("*.md"):  # every page is in the navigation
        assert path.name in pages, path.name
