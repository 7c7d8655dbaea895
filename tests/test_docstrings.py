"""Every public name has a docstring with an example, and each example runs as written.

The API reference (docs/api.md) is generated from these docstrings, so this
is what keeps it honest.  Examples run in an empty namespace, so each one
imports what it uses and can be pasted into a fresh interpreter; they share
a temporary kernel cache, never the user's.
"""

from __future__ import annotations

import ast
import doctest
import inspect
from importlib import import_module
from pathlib import Path
from types import ModuleType

import pytest

from tropical_gemm.jit import cache as dc

PACKAGE = Path(__file__).resolve().parent.parent / "tropical_gemm"
PUBLIC_MODULES = {"tropical_gemm": PACKAGE / "__init__.py", "tropical_gemm.jit": PACKAGE / "jit" / "__init__.py",
                  "tropical_gemm.dask": PACKAGE / "dask.py", "tropical_gemm.torch": PACKAGE / "torch" / "__init__.py"}


def declared_all(path: Path) -> list[str]:
    """A module's ``__all__``, read from its source so that collecting needs no torch."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                return list(ast.literal_eval(node.value))
    raise AssertionError(f"{path} has no __all__")


def public_names() -> list:
    return [pytest.param(module, name, id=f"{module}.{name}",
                         marks=[pytest.mark.torch] if module == "tropical_gemm.torch" else [])
            for module, path in PUBLIC_MODULES.items() for name in declared_all(path)]


def attribute_docstring(name: str) -> str | None:
    """The string literal right after ``name = ...`` in any module of the package (how constants are documented)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        statements = list(_statements(ast.parse(path.read_text()).body))
        for node, after in zip(statements, statements[1:]):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if (any(isinstance(t, ast.Name) and t.id == name for t in targets)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                return inspect.cleandoc(after.value.value)
    return None


def _statements(body: list[ast.stmt]):
    """Module-level statements, looking into ``try`` blocks (where ``__version__`` is set)."""
    for node in body:
        yield node
        if isinstance(node, ast.Try):
            yield from _statements(node.body)


def docstring(module: ModuleType, name: str) -> str | None:
    obj = getattr(module, name)
    if inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj):
        return inspect.getdoc(obj)
    return attribute_docstring(name)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(dc.ENV_CACHE_DIR, str(tmp_path / "cache"))
    for variable in (dc.ENV_DISABLE, dc.ENV_LOCK_TIMEOUT, dc.ENV_STRICT_NVRTC):
        monkeypatch.delenv(variable, raising=False)


@pytest.mark.parametrize("module_name, name", public_names())
def test_public_name_has_an_example_that_runs(module_name, name, private_cache):
    module = import_module(module_name)
    text = docstring(module, name)
    assert text, f"{module_name}.{name} has no docstring"
    assert "Examples:" in text and ">>>" in text, f"{module_name}.{name} has no example"
    test = doctest.DocTestParser().get_doctest(text, {}, f"{module_name}.{name}", None, 0)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_every_public_module_is_covered():
    assert len(public_names()) >= 30


@pytest.mark.parametrize("module_name, name", public_names())
def test_the_api_reference_renders_every_public_name(module_name, name):
    """docs/api.md lists each public name as a mkdocstrings ``::: path`` block (submodule clashes aside)."""
    blocks = {line.split()[1] for line in (PACKAGE.parent / "docs" / "api.md").read_text().splitlines()
              if line.startswith("::: ")}
    assert f"{module_name}.{name}" in blocks or f"{module_name}.{name}.{name}" in blocks
