"""``Engine``: SGLang's offline engine in miniature — ``generate`` through the radix cache (notebook 07).

Mirrors ``sglang/srt/entrypoints/engine.py`` (``Engine.generate``, ``flush_cache``, ``shutdown``). Its
arguments are ``ServerArgs`` fields (``server_args.py``); it owns the pools and the cache under SGLang's
names (``req_to_token_pool``, ``token_to_kv_pool_allocator``, ``token_to_kv_pool``, ``tree_cache``)
and runs the scheduler's event loop in the caller's thread until every prompt of the call finished.
Difference from SGLang, on purpose: the namespace of a request with an adapter is the pair
``(extra_key or "", lora_id)`` (the id of the adapter's load), where SGLang appends ``lora_id`` to
the string: a pair never equals a plain string, so no ``extra_key`` can land in an adapter's namespace.
Each adapter load gets its own ``lora_id`` (``LlamaForCausalLM.add_adapter``): a replaced adapter
never reuses the old one's cached KV.
"""

from __future__ import annotations

import time
from numbers import Integral
from dataclasses import fields
from typing import Any, Sequence

import torch

from ..mem_cache import (ChunkCache, FastRadixCache, HashBlockCache, MHATokenToKVPool, ReqToTokenPool,
                         TokenToKVPoolAllocator)
from ..utils.checks import is_index_dtype
from .device_program import attach_backend
from .io_struct import DEFAULT_SAMPLING_PARAMS, INT64_MAX, normalize_sampling_params, per_prompt
from .model_runner import ModelRunner
from .schedule_batch import Req
from .schedule_policy import SchedulePolicy, ceil_page
from .scheduler import Scheduler
from .server_args import HASH_BLOCK_SIZE, ServerArgs


class _PartialPageAllocator(TokenToKVPoolAllocator):
    """Unsafe mode only: pages are shared by several owners, so a free of a page already freed is ignored."""

    def free(self, free_index: Any) -> None:
        slots = free_index.tolist() if isinstance(free_index, torch.Tensor) else list(free_index)
        pages = {int(s) // self.page_size for s in slots} & self._in_use
        self._in_use.difference_update(pages)
        self._in_use_mask[list(pages)] = False
        self.free_pages.extend(sorted(pages))


class Engine:
    """Serve prompts on ``model`` with a KV pool and a radix cache. The keyword arguments are the fields
    of ``ServerArgs`` (what each means: ``server_args.py``); the engine runs on the model's device."""

    def __init__(self, model: Any, *, page_size: int = 1, max_total_tokens: int = 4096,
                 max_running_requests: int = 32, disable_radix_cache: bool = False,
                 chunked_prefill_size: int | None = None, max_prefill_tokens: int = 16384,
                 schedule_policy: str = "fcfs", prefix_cache: str = "radix", random_seed: int = 0,
                 keep_logits: bool = False, unsafe_ignore_lora_namespace: bool = False,
                 unsafe_share_partial_pages: bool = False, disable_overlap_schedule: bool = True,
                 device_backend: str | None = None, hold_back_deprioritized: bool = True) -> None:
        # 1. Validate every argument before building anything (``ServerArgs.__post_init__``).
        if not hasattr(model, "forward") or not hasattr(model, "config"):
            raise ValueError(f"model must be a radixlab model (load_model('tiny')), got {type(model).__name__}")
        given = locals()
        args = self.server_args = ServerArgs(**{f.name: given[f.name] for f in fields(ServerArgs)})
        for name in ("page_size", "max_total_tokens", "max_running_requests", "chunked_prefill_size",
                     "max_prefill_tokens", "prefix_cache", "random_seed", "disable_radix_cache",
                     "unsafe_ignore_lora_namespace", "unsafe_share_partial_pages", "disable_overlap_schedule"):
            setattr(self, name, getattr(args, name))
        self.device = model.device  # the engine runs where the model is (SGLang: ModelRunner's device)
        self.model = model
        cfg = model.config
        self.context_len = min(cfg.max_position_embeddings, self.max_total_tokens)
        # 2. The pools (SGLang: Scheduler.init_memory_pools → ModelRunner.alloc_memory_pool) and the cache.
        allocator_cls = _PartialPageAllocator if args.unsafe_share_partial_pages else TokenToKVPoolAllocator
        self.token_to_kv_pool_allocator = allocator_cls(self.max_total_tokens, self.page_size, self.device)
        self.req_to_token_pool = ReqToTokenPool(self.max_running_requests, self.context_len, self.device,
                                                token_to_kv_pool_allocator=self.token_to_kv_pool_allocator)
        self.token_to_kv_pool = MHATokenToKVPool(self.max_total_tokens, self.page_size, model.dtype,
                                                 cfg.num_key_value_heads, cfg.head_dim, cfg.num_hidden_layers, self.device)
        cache_args = dict(token_to_kv_pool_allocator=self.token_to_kv_pool_allocator,
                          req_to_token_pool=self.req_to_token_pool, device=self.device)
        if args.disable_radix_cache:
            self.tree_cache = ChunkCache(self.page_size, **cache_args)
        elif args.prefix_cache == "hash":  # vLLM's block-hash prefix cache (notebook 09, bench serve)
            self.tree_cache = HashBlockCache(HASH_BLOCK_SIZE, **cache_args)
        else:  # the unsafe switch: a token-granular tree over a paged pool
            self.tree_cache = FastRadixCache(1 if args.unsafe_share_partial_pages else self.page_size, **cache_args)
        # 3. The scheduler and the model runner; the scheduler runs the model in this process.
        eos = getattr(cfg, "eos_token_id", None)
        eos_ids = frozenset() if eos is None else frozenset([eos] if isinstance(eos, int) else eos)
        self.model_runner = ModelRunner(self.model, self.req_to_token_pool, self.token_to_kv_pool, self.device)
        policy = SchedulePolicy(args.schedule_policy, self.tree_cache, self.random_seed,
                                hold_back=args.hold_back_deprioritized)
        self.scheduler = Scheduler(self.model_runner, self.tree_cache, policy,
                                   max_running_requests=self.max_running_requests,
                                   chunked_prefill_size=self.chunked_prefill_size,
                                   max_prefill_tokens=self.max_prefill_tokens, eos_token_ids=eos_ids,
                                   keep_logits=args.keep_logits)
        # 4. Notebook 08: the overlap loop, or any loop on another device backend (device_program.py).
        self.device_backend = None
        if not args.disable_overlap_schedule or args.device_backend is not None:
            self.device_backend = attach_backend(self, args.device_backend)
        self._device_adapters = self._adapter_ids()  # what the device backend's program was built with
        self._num_reqs = 0
        self._closed = False

    # -- public API -----------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self.model.tokenizer

    @property
    def stats(self):
        """Counters of the scheduler (prefill tokens computed, cached, evicted...)."""
        return self.scheduler.stats

    def generate(self, prompts: Any, sampling_params: dict | Sequence[dict] | None = None,
                 extra_key: str | Sequence[str | None] | None = None,
                 lora_path: str | Sequence[str | None] | None = None) -> dict | list[dict]:
        """Generate completions; one dict per prompt (a list for a list, a dict for a single prompt).

        ``prompts``: a string, a list of token ids, or a list of either. ``sampling_params``,
        ``extra_key`` and ``lora_path`` are one for all prompts or a list with one per prompt.
        Every prompt is checked before anything runs; a bad one raises ``ValueError`` (``TypeError``
        for a value of the wrong type) naming its index and the argument. On a device backend, a
        worker process that dies or hangs raises ``WorkerDiedError``: the call's requests are
        aborted and the next call starts a fresh worker.
        """
        start = time.perf_counter()
        single, reqs = self._submit(prompts, sampling_params, extra_key, lora_path, start)
        try:
            if self.disable_overlap_schedule:
                self.scheduler.event_loop_normal()
            else:
                self.scheduler.event_loop_overlap()
        except BaseException:
            self.scheduler.abort_all()  # nothing stays locked or allocated
            raise
        outputs = [self._output(r, start) for r in reqs]
        return outputs[0] if single else outputs

    def add_requests(self, prompts: Any, sampling_params: dict | Sequence[dict] | None = None,
                     extra_key: str | Sequence[str | None] | None = None,
                     lora_path: str | Sequence[str | None] | None = None) -> list[Req]:
        """Queue requests without running them (same arguments and checks as ``generate``); drive
        the loop with ``step()`` to watch the pools between steps (notebook 07)."""
        return self._submit(prompts, sampling_params, extra_key, lora_path, time.perf_counter())[1]

    def step(self) -> Any:
        """One iteration of the normal loop: schedule → run → process. Returns the batch that ran
        (``None`` when there was nothing to do)."""
        if self._closed:
            raise RuntimeError("engine has been shut down: step() cannot run")
        if not self.scheduler.has_work():
            return None
        try:
            batch = self.scheduler.get_next_batch_to_run()
            if batch is not None:
                self.scheduler.process_batch_result(batch, self.scheduler.run_batch(batch))
        except BaseException:
            self.scheduler.abort_all()
            raise
        return batch

    def result(self, req: Req) -> dict:
        """``generate``'s dict for a request queued with ``add_requests`` that has finished. An aborted
        request (an error mid-run dropped it) gives its partial output, as SGLang returns one:
        ``finish_reason`` is ``"abort"`` and a time it never reached is ``None``."""
        if not isinstance(req, Req):
            raise TypeError(f"req must be a Req returned by add_requests, got {type(req).__name__}")
        if not req.is_done():
            raise ValueError(f"request {req.rid!r} has not finished yet")
        return self._output(req, req.created_time)

    def flush_cache(self) -> bool:
        """Empty the tree: every cached slot goes back to the allocator (SGLang: ``Engine.flush_cache``)."""
        if self.scheduler.has_work():
            return False  # SGLang refuses to flush while requests run
        self.scheduler.flush_cache()
        return True

    def shutdown(self) -> None:
        """Release the pools. The engine cannot generate afterwards."""
        if not self._closed:
            if self.device_backend is not None:
                self.device_backend.shutdown()
            self.flush_cache()
            self.token_to_kv_pool.k_buffer.clear()
            self.token_to_kv_pool.v_buffer.clear()
            self._closed = True

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        cache = "disabled" if self.disable_radix_cache else self.prefix_cache
        return (f"Engine(page_size={self.page_size}, max_total_tokens={self.max_total_tokens}, "
                f"max_running_requests={self.max_running_requests}, cache={cache}, "
                f"chunked_prefill_size={self.chunked_prefill_size})")

    # -- helpers --------------------------------------------------------------------------------

    def _submit(self, prompts: Any, sampling_params: Any, extra_key: Any, lora_path: Any,
                start: float) -> tuple[bool, list[Req]]:
        if self._closed:
            raise RuntimeError("engine has been shut down")
        single, reqs = self._make_reqs(prompts, sampling_params, extra_key, lora_path, start)
        self._sync_adapters(reqs)
        self._num_reqs += len(reqs)  # only now: a rejected call leaves later seeds and ids unchanged
        for req in reqs:
            self.scheduler.add_request(req)
        return single, reqs

    def _make_reqs(self, prompts: Any, sampling_params: Any, extra_key: Any, lora_path: Any,
                   start: float) -> tuple[bool, list[Req]]:
        if isinstance(prompts, torch.Tensor):  # 1-D: one prompt; 2-D: one prompt per row
            if not is_index_dtype(prompts.dtype) or prompts.dim() not in (1, 2):
                raise ValueError(f"prompts as a tensor must be a 1-D (one prompt) or 2-D (one per row) integer "
                                 f"tensor, got {prompts.dtype} with shape {tuple(prompts.shape)}")
            single, prompts = prompts.dim() == 1, prompts.tolist()
        else:
            single = isinstance(prompts, str) or (isinstance(prompts, (list, tuple)) and len(prompts) > 0
                                                   and all(isinstance(t, Integral) for t in prompts))
        items = [prompts] if single else prompts
        if not isinstance(items, (list, tuple)) or not items:
            raise ValueError(f"prompts must be a string, a list of token ids, or a non-empty list of those; got {prompts!r:.60}")
        n = len(items)
        params = per_prompt(sampling_params if sampling_params is not None else DEFAULT_SAMPLING_PARAMS,
                                  n, "sampling_params", dict)
        keys = per_prompt(extra_key, n, "extra_key", str)
        loras = per_prompt(lora_path, n, "lora_path", str)
        reqs = []
        for i, (prompt, sp, key, lora) in enumerate(zip(items, params, keys, loras)):
            ids = self._token_ids(prompt, i)
            sp = normalize_sampling_params(sp, i)
            if lora is not None and lora not in getattr(self.model, "adapters", {}):
                raise ValueError(f"prompt {i}: lora_path {lora!r} is not an adapter of this model "
                                 f"(known: {sorted(getattr(self.model, 'adapters', {}))})")
            need = ceil_page(len(ids) + sp["max_new_tokens"], self.page_size)
            if need > self.max_total_tokens or len(ids) + sp["max_new_tokens"] > self.context_len:
                raise ValueError(f"prompt {i} can never fit: {len(ids)} prompt tokens + max_new_tokens="
                                 f"{sp['max_new_tokens']} need {need} KV slots, the pool has max_total_tokens="
                                 f"{self.max_total_tokens} (context length {self.context_len})")
            # SGLang: extra_key = (extra_key or "") + lora_id; a pair cannot collide with any string.
            # lora_id is the adapter's load id: a new load under an old name gets a new namespace.
            namespace = key if lora is None or self.unsafe_ignore_lora_namespace else \
                (key or "", self.model.adapters[lora].lora_id)
            seed = sp.pop("sampling_seed", None)
            n = self._num_reqs + len(reqs) + 1
            reqs.append(Req(rid=f"req-{n}", origin_input_ids=ids, extra_key=namespace, lora_id=lora,
                            index=i, created_time=start,
                            sampling_seed=(self.random_seed + n) % (INT64_MAX + 1) if seed is None else seed, **sp))
        return single, reqs

    def _adapter_ids(self) -> tuple:
        return tuple((name, a.lora_id) for name, a in sorted(getattr(self.model, "adapters", {}).items()))

    def _sync_adapters(self, reqs: list[Req]) -> None:
        """A device backend's program knows the adapters it was built with; one added, removed or
        replaced since is taken in here, between runs (a worker process restarts to see it)."""
        now = self._adapter_ids()
        if self.device_backend is None or now == self._device_adapters:
            return
        if self.scheduler.has_work():
            stale = [r.index for r in reqs if r.lora_id is not None
                     and (r.lora_id, self.model.adapters[r.lora_id].lora_id) not in self._device_adapters]
            if stale:
                raise ValueError(f"prompt {stale[0]}: adapter {reqs[stale[0]].lora_id!r} changed while requests run on "
                                 "the device backend; finish them (step() until it returns None) first")
            return
        self.device_backend.program.lora_names[:] = [name for name, _ in now]
        self.device_backend.restart()  # a worker process forked before the change has the old adapters
        self._device_adapters = now

    def _token_ids(self, prompt: Any, i: int) -> list[int]:
        if isinstance(prompt, torch.Tensor) and prompt.dim() == 1 and is_index_dtype(prompt.dtype):
            prompt = prompt.tolist()
        if isinstance(prompt, str):
            ids = list(self.tokenizer.encode(prompt))
        elif isinstance(prompt, (list, tuple)) and all(isinstance(t, Integral) and not isinstance(t, bool) for t in prompt):
            ids = [int(t) for t in prompt]
        else:
            raise ValueError(f"prompt {i} must be a string or a list of token ids, got {type(prompt).__name__}")
        if not ids:
            raise ValueError(f"prompt {i} is empty")
        vocab = self.model.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt {i} holds token id {bad[0]}, outside the vocabulary (0 .. {vocab - 1})")
        return ids

    def _output(self, req: Req, start: float) -> dict:
        try:
            text = self.tokenizer.decode(req.output_ids, skip_special_tokens=True)
        except TypeError:
            text = self.tokenizer.decode(req.output_ids)
        meta = {"id": req.rid, "prompt_tokens": len(req.origin_input_ids), "completion_tokens": len(req.output_ids),
                "cached_tokens": req.cached_tokens, "finish_reason": req.finished_reason,
                "ttft": None if req.first_token_time is None else req.first_token_time - start,
                "e2e_latency": None if req.finished_time is None else req.finished_time - start}
        if self.scheduler.keep_logits:
            meta["output_logits"] = req.output_logits
        return {"text": text, "output_ids": list(req.output_ids), "meta_info": meta}
