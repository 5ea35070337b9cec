"""A bytes tokenizer: text → UTF-8 byte values (0–255) and back.

Real engines use BPE vocabularies; for prefix caching only one property matters, that equal text
prefixes give equal token prefixes, and bytes have it with no vocabulary file to download.
"""

from __future__ import annotations

from typing import Sequence


def encode(text: str) -> list[int]:
    """Token ids of ``text``: its UTF-8 bytes."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return list(text.encode("utf-8"))


def decode(token_ids: Sequence[int]) -> str:
    """Text of ``token_ids`` (invalid UTF-8 shows as U+FFFD)."""
    try:
        data = bytes(token_ids)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"token_ids must be integers in 0..255, got {list(token_ids)[:8]!r}...") from exc
    return data.decode("utf-8", errors="replace")


def text_label(token_ids: Sequence[int], max_chars: int = 20) -> str:
    """A drawing label for byte tokens: the text they spell, shortened, with the token count."""
    text = decode(token_ids)
    shown = text if len(text) <= max_chars else text[: max_chars - 1] + "…"
    return f"{shown!r} ({len(token_ids)} tok)"


class ByteTokenizer:
    """The byte tokenizer as an object, the shape a model's ``.tokenizer`` has (the tiny model's):
    ``encode``, ``decode``, ``vocab_size`` 256, and no end-of-sequence token."""

    vocab_size = 256
    eos_token_id = None
    bos_token_id = None

    def encode(self, text: str) -> list[int]:
        return encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return decode([int(t) for t in token_ids])

    def __repr__(self) -> str:
        return "ByteTokenizer(vocab_size=256)"
