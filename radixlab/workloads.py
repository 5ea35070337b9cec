"""Synthetic request traces with the sharing patterns prefix caching lives on (notebook 06_eviction).

Each generator returns a list of ``TraceRequest`` (prompt token ids, output token ids, namespace),
in arrival order, built from a seeded ``random.Random``: the same arguments always give the same
trace. Token ids are random integers in ``[0, vocab)``; only *which* sequences share prefixes
matters to a cache, not what the tokens mean. Their shapes follow SGLang's ``bench_serving``
scenarios:

* ``shared_system_prompt``: a few system prompts (popularity ~ Zipf), each request = one system
  prompt + a fresh user question.
* ``multi_turn_chat``: conversations interleaved at random; turn k's prompt is the whole history
  (system prompt, earlier questions *and replies*) plus a new question, so it extends the previous
  turn's prompt + output.
* ``few_shot``: a few tasks (popularity ~ Zipf), each with a fixed instruction and fixed examples;
  a request = instruction + examples + a fresh question.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: what it asks (``prompt_ids``) and what it will generate."""

    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    extra_key: Hashable | None = None
    label: str = ""

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)


def _check(name: str, value: int, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _check_range(name: str, rng: tuple[int, int]) -> None:
    if (not isinstance(rng, tuple) or len(rng) != 2 or not all(isinstance(x, int) for x in rng)
            or not 1 <= rng[0] <= rng[1]):
        raise ValueError(f"{name} must be a (low, high) tuple of ints with 1 <= low <= high, got {rng!r}")


def _tokens(rng: random.Random, n: int, vocab: int) -> tuple[int, ...]:
    return tuple(rng.randrange(vocab) for _ in range(n))


def _zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (i + 1) ** s for i in range(n)]


def _popular_heads(rng: random.Random, heads: list[list[int]], num_requests: int, zipf: float,
                   question_len: tuple[int, int], output_len: tuple[int, int], vocab: int,
                   label: str) -> list[TraceRequest]:
    """Requests that each pick a head (Zipf popularity) and append a fresh question."""
    weights = _zipf_weights(len(heads), zipf)
    trace = []
    for i in range(num_requests):
        h = rng.choices(range(len(heads)), weights)[0]
        prompt = heads[h] + _tokens(rng, rng.randint(*question_len), vocab)
        trace.append(TraceRequest(prompt, _tokens(rng, rng.randint(*output_len), vocab), None, f"{label}{h} q{i}"))
    return trace


def shared_system_prompt(num_requests: int = 120, num_prompts: int = 4, system_len: int = 96,
                         question_len: tuple[int, int] = (8, 24), output_len: tuple[int, int] = (8, 24),
                         zipf: float = 1.0, vocab: int = 1000, seed: int = 0) -> list[TraceRequest]:
    """``num_requests`` requests, each = system prompt i (i ~ Zipf(``zipf``) over ``num_prompts``) + a new question."""
    for name, v in (("num_requests", num_requests), ("num_prompts", num_prompts), ("system_len", system_len),
                    ("vocab", vocab)):
        _check(name, v)
    _check_range("question_len", question_len), _check_range("output_len", output_len)
    rng = random.Random(seed)
    systems = [_tokens(rng, system_len, vocab) for _ in range(num_prompts)]
    return _popular_heads(rng, systems, num_requests, zipf, question_len, output_len, vocab, "sys")


def multi_turn_chat(num_conversations: int = 16, turns: int = 5, system_len: int = 32,
                    user_len: tuple[int, int] = (8, 24), reply_len: tuple[int, int] = (16, 40),
                    vocab: int = 1000, seed: int = 0) -> list[TraceRequest]:
    """``num_conversations`` chats of ``turns`` turns each, interleaved at random (turn order kept).

    All chats share one system prompt of ``system_len`` tokens. Turn k's prompt = system prompt +
    (question, reply) of turns 1..k-1 + question k; its output is reply k.
    """
    for name, v in (("num_conversations", num_conversations), ("turns", turns), ("vocab", vocab)):
        _check(name, v)
    _check("system_len", system_len, 0)
    _check_range("user_len", user_len), _check_range("reply_len", reply_len)
    rng = random.Random(seed)
    system = _tokens(rng, system_len, vocab)
    history = {c: system for c in range(num_conversations)}
    order = [c for c in range(num_conversations) for _ in range(turns)]
    rng.shuffle(order)
    turn_of = dict.fromkeys(range(num_conversations), 0)
    trace = []
    for c in order:
        turn_of[c] += 1
        prompt = history[c] + _tokens(rng, rng.randint(*user_len), vocab)
        reply = _tokens(rng, rng.randint(*reply_len), vocab)
        history[c] = prompt + reply
        trace.append(TraceRequest(prompt, reply, None, f"chat{c} turn{turn_of[c]}"))
    return trace


def few_shot(num_requests: int = 120, num_tasks: int = 6, shots: int = 4, instruction_len: int = 24,
             example_len: tuple[int, int] = (16, 32), question_len: tuple[int, int] = (8, 16),
             output_len: tuple[int, int] = (4, 12), zipf: float = 1.0, vocab: int = 1000,
             seed: int = 0) -> list[TraceRequest]:
    """``num_requests`` requests over ``num_tasks`` tasks (Zipf popularity); each = task instruction +
    the task's ``shots`` fixed examples + a fresh question."""
    for name, v in (("num_requests", num_requests), ("num_tasks", num_tasks), ("instruction_len", instruction_len),
                    ("vocab", vocab)):
        _check(name, v)
    _check("shots", shots, 0)
    for name, r in (("example_len", example_len), ("question_len", question_len), ("output_len", output_len)):
        _check_range(name, r)
    rng = random.Random(seed)
    heads = []
    for _ in range(num_tasks):
        head = _tokens(rng, instruction_len, vocab)
        for _ in range(shots):
            head += _tokens(rng, rng.randint(*example_len), vocab)
        heads.append(head)
    return _popular_heads(rng, heads, num_requests, zipf, question_len, output_len, vocab, "task")


WORKLOADS: dict[str, Callable[..., list[TraceRequest]]] = {
    "multi_turn_chat": multi_turn_chat,
    "few_shot": few_shot,
    "shared_system_prompt": shared_system_prompt,
}


def working_set_tokens(trace: Sequence[TraceRequest]) -> int:
    """Distinct (namespace, prefix) positions over all prompts + outputs: what an unbounded cache holds."""
    roots: dict = {}
    count = 0
    for r in trace:
        node = roots.setdefault(r.extra_key, {})
        for t in r.prompt_ids + r.output_ids:
            nxt = node.get(t)
            if nxt is None:
                nxt = node[t] = {}
                count += 1
            node = nxt
    return count


def ideal_hit_rate(trace: Sequence[TraceRequest]) -> float:
    """Hit rate of an unbounded cache (only first occurrences miss): the ceiling for every policy."""
    roots: dict = {}
    hits = total = 0
    for r in trace:
        node = roots.setdefault(r.extra_key, {})
        query = r.prompt_ids[:-1]  # the last prompt token is always computed (its logits are the output)
        for t in query:
            if t not in node:
                break
            node = node[t]
            hits += 1
        total += len(r.prompt_ids)
        node = roots[r.extra_key]
        for t in r.prompt_ids + r.output_ids:
            node = node.setdefault(t, {})
    return hits / total if total else 0.0
