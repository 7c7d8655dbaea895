"""Loading the repository's scripts (benchmarks/, examples/) as modules, for tests of their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_script(folder: str, name: str) -> ModuleType:
    """``<folder>/<name>.py`` as a module; the folder joins ``sys.path``, as when the script runs, for its
    sibling imports (benchmarks' ``results_file``)."""
    path = ROOT / folder
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", path / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
