"""Benchmarks run by ``python -m radixlab bench NAME``: each measures its baseline in the same run and prints ratios."""
