"""The package version, in a module that imports nothing.

Every layer may read it (the kernel cache keys on it, ``info`` and ``bench``
report it) without importing the package's public API, so no import runs back
up the layers.  ``pyproject.toml`` reads the version from here, so the
installed distribution's metadata cannot disagree with it.
"""

__version__ = "0.1.0"
