"""Shared pytest set-up: nbval does not compare SVG (dot output differs across Graphviz versions)."""

import os

os.environ.setdefault("RADIXLAB_DEVICE", "cpu")


def pytest_collectstart(collector):
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("image/svg+xml", "application/vnd.jupyter.widget-view+json")
