"""A small serving engine over the KV pool and the radix cache (notebooks 07–09).

``engine.py`` (``Engine.generate``), ``server_args.py`` (its arguments), ``scheduler.py`` (queue,
batches) with ``event_loop.py`` (the normal and the overlap loop), ``schedule_batch.py`` (``Req``,
``ScheduleBatch``), ``schedule_policy.py`` (order and budget), ``model_runner.py`` (``ForwardBatch``,
model, sampling), the device backends (``backends.py``, ``device_program.py``). The caches and pools
are ``radixlab.mem_cache``'s.
"""

from .engine import Engine
from .schedule_batch import Req, ScheduleBatch
from .schedule_policy import POLICIES, SchedulePolicy
from .scheduler import Scheduler
from .server_args import ServerArgs

__all__ = ["Engine", "Req", "ScheduleBatch", "Scheduler", "SchedulePolicy", "POLICIES", "ServerArgs"]
