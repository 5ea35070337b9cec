"""One debug switch for the checks too costly for the hot path (an O(depth) walk, a device sync).

On when the environment variable ``RADIXLAB_DEBUG`` is set to anything but ``""`` or ``"0"`` at
import time; tests and notebooks may also set ``radixlab.utils.debug.DEBUG`` directly (every check
reads it at call time). The loud teaching errors (a double free, unlocking an unlocked node, a node
of another cache) never depend on it: only the checks that would slow every step do.
"""

from __future__ import annotations

import os

DEBUG: bool = os.environ.get("RADIXLAB_DEBUG", "") not in ("", "0")


def enabled() -> bool:
    """Whether the costly checks run now."""
    return DEBUG
