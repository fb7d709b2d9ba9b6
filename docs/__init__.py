"""The documentation's text, installed as the package ``cosim.docs``.

``pyproject.toml`` maps the package ``cosim.docs`` onto this directory and ships its
``*.md`` files as package data, so that the pages the health summary's flags name
(``cosim.health.docs_link``) can be opened from an installed package too, where the
repository's ``docs/`` is not. This module holds no code.
"""
