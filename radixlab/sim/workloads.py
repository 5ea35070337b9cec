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

from ..utils.checks import check_int


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
    check_int(value, name, minimum)


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


# ---------------------------------------------------------------------------------------------
# Serving workloads (notebook 09_scheduling_and_serving, ``bench serve``): SGLang's
# generated-shared-prefix, tree of thought / self-consistency fan-out, and prompts that share
# nothing. All seeded; ``as_text`` turns any trace into readable text for a real tokenizer.
# ---------------------------------------------------------------------------------------------


def generated_shared_prefix(num_groups: int = 4, prompts_per_group: int = 8, system_prompt_len: int = 256,
                            question_len: int = 32, output_len: int = 16, ordered: bool = False,
                            vocab: int = 1000, seed: int = 0) -> list[TraceRequest]:
    """SGLang's ``generated-shared-prefix`` dataset, scaled down to a laptop CPU.

    ``num_groups`` system prompts of ``system_prompt_len`` tokens, each followed by
    ``prompts_per_group`` different questions of ``question_len`` tokens; every request generates
    ``output_len`` tokens. SGLang's ``bench_serving`` defaults are 64 groups × 16 prompts, 2048-token
    system prompts, 128-token questions and 256 output tokens, and it shuffles the requests unless
    ``--gsp-ordered``: ``ordered=False`` shuffles here too (seeded), so a first-come-first-served
    scheduler sees the groups interleaved.
    """
    for name, v in (("num_groups", num_groups), ("prompts_per_group", prompts_per_group),
                    ("system_prompt_len", system_prompt_len), ("question_len", question_len),
                    ("output_len", output_len), ("vocab", vocab)):
        _check(name, v)
    rng = random.Random(seed)
    systems = [_tokens(rng, system_prompt_len, vocab) for _ in range(num_groups)]
    trace = [TraceRequest(systems[g] + _tokens(rng, question_len, vocab), _tokens(rng, output_len, vocab),
                          None, f"group{g} q{p}")
             for g in range(num_groups) for p in range(prompts_per_group)]
    if not ordered:
        rng.shuffle(trace)
    return trace


def tree_of_thought(num_problems: int = 2, fan_out: tuple[int, ...] = (3, 2), question_len: int = 64,
                    thought_len: tuple[int, int] = (16, 32), output_len: tuple[int, int] = (16, 32),
                    vocab: int = 1000, seed: int = 0) -> list[TraceRequest]:
    """Branching programs (the SGLang paper's tree-of-thought and self-consistency shapes).

    Each of ``num_problems`` problems is a question of ``question_len`` tokens. Level 1 sends the
    question ``fan_out[0]`` times (``fan_out[0]`` samples of one prompt: self-consistency); each
    answer is a thought of ``thought_len`` tokens. Level k extends every path of level k-1 with its
    thought and sends it ``fan_out[k-1]`` times. The last level's outputs have ``output_len``
    tokens. Requests come level by level (a level needs the previous one's outputs), problems
    interleaved within a level. ``fan_out=(k,)`` is plain self-consistency with k samples.
    """
    for name, v in (("num_problems", num_problems), ("question_len", question_len), ("vocab", vocab)):
        _check(name, v)
    if not isinstance(fan_out, tuple) or not fan_out:
        raise ValueError(f"fan_out must be a non-empty tuple of ints (samples per level), got {fan_out!r}")
    for f in fan_out:
        _check("fan_out", f)
    _check_range("thought_len", thought_len), _check_range("output_len", output_len)
    rng = random.Random(seed)
    # paths[i] = (label, prompt so far) of every open branch, all problems together
    paths = [(f"tot{p}", _tokens(rng, question_len, vocab)) for p in range(num_problems)]
    trace = []
    for level, k in enumerate(fan_out):
        last = level == len(fan_out) - 1
        nxt = []
        for label, prompt in paths:
            for s in range(k):
                out = _tokens(rng, rng.randint(*(output_len if last else thought_len)), vocab)
                trace.append(TraceRequest(prompt, out, None, f"{label}.{s}"))
                nxt.append((f"{label}.{s}", prompt + out))
        paths = nxt
    return trace


def self_consistency(num_problems: int = 4, samples: int = 5, question_len: int = 96,
                     output_len: tuple[int, int] = (16, 32), vocab: int = 1000, seed: int = 0) -> list[TraceRequest]:
    """``samples`` answers to each of ``num_problems`` questions: ``tree_of_thought(fan_out=(samples,))``."""
    return tree_of_thought(num_problems, (samples,), question_len, (1, 1), output_len, vocab, seed)


def random_prompts(num_requests: int = 32, prompt_len: tuple[int, int] = (64, 160),
                   output_len: tuple[int, int] = (8, 24), vocab: int = 1000, seed: int = 0) -> list[TraceRequest]:
    """Prompts that share nothing: the workload where a prefix cache can only cost.

    Every prompt starts with a different token (drawn without replacement, so ``num_requests``
    must be <= ``vocab``): no two requests share even one token of prefix.
    """
    for name, v in (("num_requests", num_requests), ("vocab", vocab)):
        _check(name, v)
    _check_range("prompt_len", prompt_len), _check_range("output_len", output_len)
    if num_requests > vocab:
        raise ValueError(f"num_requests must be <= vocab={vocab} (every prompt starts with its own token), "
                         f"got {num_requests}")
    rng = random.Random(seed)
    firsts = rng.sample(range(vocab), num_requests)
    return [TraceRequest((firsts[i],) + _tokens(rng, rng.randint(*prompt_len) - 1, vocab),
                         _tokens(rng, rng.randint(*output_len), vocab), None, f"rand q{i}")
            for i in range(num_requests)]


WORKLOADS.update({
    "generated_shared_prefix": generated_shared_prefix,
    "tree_of_thought": tree_of_thought,
    "self_consistency": self_consistency,
    "random_prompts": random_prompts,
})

_SYLLABLES = ("ka", "lo", "mi", "nu", "pe", "ri", "sa", "to", "vu", "ze", "bo", "da", "fi", "gu", "he", "ju")


def token_word(token_id: int) -> str:
    """A readable, pronounceable word for a token id (``0 -> "ka"``, ``17 -> "loka"``...): a bijection."""
    if isinstance(token_id, bool) or not isinstance(token_id, int) or token_id < 0:
        raise ValueError(f"token_id must be a non-negative int, got {token_id!r}")
    word = ""
    n = token_id
    while True:
        n, d = divmod(n, len(_SYLLABLES))
        word = _SYLLABLES[d] + word
        if n == 0:
            return word
        n -= 1  # bijective numeration: every word stands for exactly one id


def as_text(trace: Sequence[TraceRequest]) -> list[tuple[str, str]]:
    """``(prompt text, output text)`` for every request: token ids as words joined by spaces.

    Prefix sharing survives: two prompts that share k token ids share their first k words, so a
    real tokenizer (``Engine.generate`` on text) sees a shared text prefix too.
    """
    return [(" ".join(map(token_word, r.prompt_ids)), " ".join(map(token_word, r.output_ids))) for r in trace]


# ---------------------------------------------------------------------------------------------
# The reference tree workload (notebook 11, ``python -m radixlab bench tree``)
# ---------------------------------------------------------------------------------------------


class ReferenceTreeWorkload:
    """``num_prompts`` system prompts of ``system_len`` tokens, each followed by ``turns`` distinct
    turns of ``turn_len`` tokens: the workload ``bench tree`` (and the
    course team's shared comparison script) time both caches on (defaults: 100 x 50 = 5,000 requests of 1,200 tokens,
    5,100 nodes, 1.1 M tokens).

    First tokens are distinct among system prompts and among the turns of one prompt, so the tree
    is exactly ``num_prompts`` internal nodes + ``num_prompts * turns`` leaves. Every token list
    is made of its own int objects (``array('q').tolist()``), as a tokenizer would hand them over,
    so no compare can take CPython's identity shortcut on shared ints.
    """

    def __init__(self, num_prompts: int = 100, turns: int = 50, system_len: int = 1000, turn_len: int = 200,
                 vocab: int = 32_000, seed: int = 0) -> None:
        for name, v in (("num_prompts", num_prompts), ("turns", turns), ("system_len", system_len),
                        ("turn_len", turn_len)):
            _check(name, v)
        _check("vocab", vocab, 2)
        if num_prompts > vocab - 1 or turns > vocab - 1:
            raise ValueError(f"num_prompts and turns must be < vocab ({vocab}) so first tokens can differ")
        self.turns, self.system_len, self.turn_len, self.vocab = turns, system_len, turn_len, vocab
        self.rng = random.Random(seed)
        self._root_firsts: set[int] = set()
        self.system = [self._run(system_len, self._root_firsts) for _ in range(num_prompts)]
        self._turn_firsts: list[set[int]] = [set() for _ in range(num_prompts)]

    def _run(self, n: int, avoid_first: set[int]) -> list[int]:
        r = self.rng.randrange
        first = r(self.vocab)
        while first in avoid_first:
            first = r(self.vocab)
        avoid_first.add(first)
        return [first] + [r(self.vocab) for _ in range(n - 1)]

    @property
    def num_prompts(self) -> int:
        return len(self.system)

    def new_turn(self, p: int, reserve: bool = True) -> list[int]:
        """A turn for prompt ``p`` whose first token no cached turn of ``p`` starts with."""
        turn = self._run(self.turn_len, self._turn_firsts[p])
        if not reserve:  # a query that will not be inserted: don't use up its first token
            self._turn_firsts[p].discard(turn[0])
        return turn

    def requests(self) -> list[list[int]]:
        """Every request of the workload (turn-major, round-robin over prompts), fresh ints each."""
        return [fresh(self.system[p] + self.new_turn(p)) for _ in range(self.turns) for p in range(self.num_prompts)]

    def system_hit(self) -> list[int]:
        """A cached system prompt + an unseen turn: the match ends at the system prompt's node."""
        p = self.rng.randrange(self.num_prompts)
        return fresh(self.system[p] + self.new_turn(p, reserve=False))

    def new_request(self) -> list[int]:
        """A request to insert: a cached system prompt + a new turn (reserved)."""
        p = self.rng.randrange(self.num_prompts)
        return fresh(self.system[p] + self.new_turn(p))

    def mid_edge_hit(self, cached: Sequence[int]) -> tuple[list[int], int]:
        """(query, expected hit) sharing ``cached``'s system prompt and the first k tokens of its turn
        (1 <= k < turn_len), then diverging: the match ends inside the turn's edge, so the tree splits it."""
        if self.turn_len < 2:
            raise ValueError(f"a hit inside a turn needs turn_len >= 2, got {self.turn_len}")
        k = self.rng.randrange(1, self.turn_len)
        head = list(cached[: self.system_len + k])
        tail = [self.rng.randrange(self.vocab) for _ in range(self.turn_len - k)]
        if tail[0] == cached[self.system_len + k]:
            tail[0] = (tail[0] + 1) % self.vocab
        return fresh(head + tail), self.system_len + k

    def miss(self) -> list[int]:
        """A request sharing nothing with the tree (its first token starts no root edge)."""
        first = self.rng.randrange(self.vocab)
        while first in self._root_firsts:
            first = self.rng.randrange(self.vocab)
        return [first] + [self.rng.randrange(self.vocab) for _ in range(self.system_len + self.turn_len - 1)]


def fresh(tokens: Sequence[int]) -> list[int]:
    """The same token ids as new int objects (as separately tokenized requests have)."""
    from array import array

    return array("q", tokens).tolist()
