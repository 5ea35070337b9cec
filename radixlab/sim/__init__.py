"""Simulators and workload generators: what the notebooks measure without running a model.

``workloads`` (seeded traces, SGLang's ``bench_serving`` datasets), ``eviction_sim`` (hit rate vs
capacity per eviction policy, Belady), ``schedule_sim`` (one-at-a-time scheduling, DFS order vs
brute force), ``side_channel`` (the TTFT prefix-cache attack) and ``cost`` (prefill FLOPs, serving
through a cache, a small timed decoder). Import the module you need: ``from radixlab.sim.workloads
import few_shot``.
"""
