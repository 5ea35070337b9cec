"""Browser tests run only when asked: ``RADIXLAB_BROWSER=1`` (``make test-browser`` sets it).

They need Chromium (Debian's ``chromium`` package) and Playwright's Python package; plain
``pytest tests`` (``make test``) skips them.
"""

import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.environ.get("RADIXLAB_BROWSER") == "1":
        return
    skip = pytest.mark.skip(reason="browser test: run with `make test-browser` (RADIXLAB_BROWSER=1)")
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)
