"""The scenario files shipped with aircomp-cosim, installed as the package ``cosim.scenarios``.

This directory is the one copy of every shipped scenario: ``pyproject.toml`` maps the
package ``cosim.scenarios`` onto it (``[tool.setuptools.package-dir]``) and ships its
``*.toml`` and ``*.sh`` files as package data, so an installed ``cosim`` finds them
(``cosim scenarios`` lists them, ``cosim run NAME`` runs one by name) and the
repository's ``scenarios/...`` paths keep working. A file's first comment line is its
description in ``cosim scenarios``. This module holds no code.
"""
