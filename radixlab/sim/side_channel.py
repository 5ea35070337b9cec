"""The prefix cache as a timing side channel, and the namespace that closes it (notebook 10_timing_side_channel).

Tenant A sends a public template followed by a secret (one of ``num_candidates`` documents);
tenant B sends every candidate behind the same template and times the first token: the cached one
is A's. ``run_attack`` plays this through a real ``Engine``, unsalted (one namespace: B hits A's
entry) or salted (each tenant's ``extra_key``, vLLM's ``cache_salt``: every candidate looks the
same). Each probe is read by two clocks: ``measured`` (the engine's TTFT, varies run to run) and
``simulated`` (a seeded model, ``base + per_token x tokens computed + noise``, whose only input
from the run is the deterministic ``cached_tokens``; nbval compares this one). SGLang has no such
module: the attack is on any prefix cache shared across tenants.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Sequence


def roc_auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """Area under the ROC curve of "higher score = positive": P(pos > neg) + ½ P(pos == neg).

    The Mann-Whitney form, exact for small samples. 1.0 separates perfectly, 0.5 is chance.
    """
    if not positives or not negatives:
        raise ValueError("roc_auc needs at least one positive and one negative score")
    wins = 0.0
    for p in positives:
        for n in negatives:
            wins += 1.0 if p > n else 0.5 if p == n else 0.0
    return wins / (len(positives) * len(negatives))


@dataclass(frozen=True)
class SimulatedClock:
    """TTFT = ``base_s + per_token_s × computed tokens + N(0, jitter_s)``, from a seeded generator."""

    base_s: float = 0.050
    per_token_s: float = 0.003
    jitter_s: float = 0.020

    def ttft(self, computed_tokens: int, rng: random.Random) -> float:
        return max(0.0, self.base_s + self.per_token_s * computed_tokens + rng.gauss(0.0, self.jitter_s))


@dataclass
class AttackResult:
    """Every probe of every trial, and the attacker's score under both clocks."""

    salted: bool
    num_candidates: int
    trials: int
    secrets: list[int] = field(default_factory=list)  # the victim's candidate, per trial
    probes: list[dict] = field(default_factory=list)  # trial, candidate, is_secret, cached_tokens, measured, simulated

    def guesses(self, clock: str) -> list[int]:
        """The attacker's guess per trial: the candidate with the smallest TTFT on ``clock``."""
        out = []
        for t in range(self.trials):
            mine = [p for p in self.probes if p["trial"] == t]
            out.append(min(mine, key=lambda p: p[clock])["candidate"])
        return out

    def accuracy(self, clock: str) -> float:
        return sum(g == s for g, s in zip(self.guesses(clock), self.secrets)) / self.trials

    def auc(self, clock: str) -> float:
        """ROC AUC of "fast = the secret" over all probes (score = -TTFT)."""
        pos = [-p[clock] for p in self.probes if p["is_secret"]]
        neg = [-p[clock] for p in self.probes if not p["is_secret"]]
        return roc_auc(pos, neg)

    @property
    def chance(self) -> float:
        return 1 / self.num_candidates

    def summary(self, clock: str) -> str:
        ns = "per-tenant extra_key" if self.salted else "one shared namespace"
        return (f"{ns:<21} {clock:>9} clock: guessed {self.accuracy(clock):6.1%} of {self.trials} secrets "
                f"(chance {self.chance:.1%}), ROC AUC {self.auc(clock):.2f}")


def candidates(num_candidates: int, secret_len: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``num_candidates`` secrets of ``secret_len`` tokens that differ from their first token on."""
    if num_candidates < 2 or num_candidates > vocab:
        raise ValueError(f"num_candidates must be in 2 .. {vocab}, got {num_candidates}")
    if secret_len < 1:
        raise ValueError(f"secret_len must be >= 1, got {secret_len}")
    rng = random.Random(seed)
    firsts = rng.sample(range(vocab), num_candidates)
    return [[f] + [rng.randrange(vocab) for _ in range(secret_len - 1)] for f in firsts]


def run_attack(engine: Any, trials: int = 8, num_candidates: int = 6, template_len: int = 16,
               secret_len: int = 192, salted: bool = False, clock: SimulatedClock = SimulatedClock(),
               seed: int = 0, progress: bool = False, forged_key: str | None = None) -> AttackResult:
    """Play ``trials`` rounds of the attack on ``engine`` (a radix-cache ``Engine``); see the module docstring.

    Each round: flush the cache; A sends template + secret + A's question; B sends one warm-up probe
    (its own template entry, so every real probe starts equal) and then every candidate, in a random
    order, behind the template with B's question. ``salted`` gives A and B their own ``extra_key``.
    ``forged_key``: B sends this ``extra_key`` instead of its own, as a client could if the server
    took the salt from the request (notebook 10: why the salt must come from a trusted layer).
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    vocab = engine.model.config.vocab_size
    rng = random.Random(seed)
    noise = random.Random(seed + 1)
    template = [rng.randrange(vocab) for _ in range(template_len)]
    docs = candidates(num_candidates, secret_len, vocab, seed)
    a_key, b_key = ("tenant-A", "tenant-B") if salted else (None, None)
    if forged_key is not None:
        b_key = forged_key
    one = {"max_new_tokens": 1}
    result = AttackResult(salted, num_candidates, trials)
    rounds = range(trials)
    if progress:
        from tqdm.auto import tqdm
        rounds = tqdm(rounds, desc=f"attack ({'salted' if salted else 'shared'})", leave=False)
    for t in rounds:
        engine.flush_cache()
        secret = rng.randrange(num_candidates)
        result.secrets.append(secret)
        engine.generate(template + docs[secret] + [rng.randrange(vocab) for _ in range(8)], one, extra_key=a_key)
        firsts = {d[0] for d in docs}
        junk = [next(t for t in range(vocab) if t not in firsts)] + [rng.randrange(vocab) for _ in range(secret_len - 1)]
        engine.generate(template + junk + [1, 2, 3], one, extra_key=b_key)  # B's warm-up probe
        for c in rng.sample(range(num_candidates), num_candidates):
            prompt = template + docs[c] + [rng.randrange(vocab) for _ in range(4)]
            meta = engine.generate(prompt, one, extra_key=b_key)["meta_info"]
            computed = len(prompt) - meta["cached_tokens"]
            result.probes.append(dict(trial=t, candidate=c, is_secret=c == secret, cached_tokens=meta["cached_tokens"],
                                      measured=meta["ttft"], simulated=clock.ttft(computed, noise)))
    return result
