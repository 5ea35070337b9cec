"""A small serving engine over the KV pool and the radix cache (notebook 07_kv_memory_pool).

``engine.py`` (``Engine.generate``), ``scheduler.py`` (queue, batches, the normal event loop),
``schedule_batch.py`` (``Req``, ``ScheduleBatch``), ``schedule_policy.py`` (order and budget),
``model_runner.py`` (``ForwardBatch``, model, sampling). The caches and pools are ``radixlab.mem_cache``'s.
"""

from .engine import Engine
from .schedule_batch import Req, ScheduleBatch
from .schedule_policy import POLICIES, FCFSPolicy, SchedulePolicy
from .scheduler import Scheduler

__all__ = ["Engine", "Req", "ScheduleBatch", "Scheduler", "SchedulePolicy", "FCFSPolicy", "POLICIES"]
