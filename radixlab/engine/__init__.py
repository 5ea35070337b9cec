"""The serving engine: scheduler, event loops (normal and overlap) and device backends."""
