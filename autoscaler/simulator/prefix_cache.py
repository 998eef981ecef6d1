"""Per-replica prefix cache: LRU over chained prefix-block hashes (Mooncake ``hash_ids``)."""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """LRU set of prefix-block hashes held in one replica's KV cache.

    vLLM keeps freed blocks cached until their space is needed, so the cache can hold as many
    hash blocks as the KV cache has room for: ``capacity_blocks = kv_cache_tokens // block_tokens``.
    Hashes are chained (block i's id depends on blocks 0..i-1), so a hit is the longest leading run
    of a request's ids that is present.
    """

    __slots__ = ("_lru", "block_tokens", "capacity_blocks")

    def __init__(self, kv_cache_tokens: int, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self.capacity_blocks = max(1, kv_cache_tokens // block_tokens)
        self._lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def match_blocks(self, hash_ids: tuple[int, ...]) -> int:
        """Number of leading ``hash_ids`` present (no LRU update)."""
        n = 0
        lru = self._lru
        for h in hash_ids:
            if h not in lru:
                break
            n += 1
        return n

    def lookup_and_insert(self, hash_ids: tuple[int, ...], input_tokens: int) -> int:
        """Tokens of the prompt served from cache, then record the request's blocks as most recent.

        The hit is capped at ``input_tokens - 1``: vLLM always computes the last prompt token to
        produce the first output token.
        """
        hit_blocks = self.match_blocks(hash_ids)
        lru = self._lru
        for h in hash_ids:
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
        while len(lru) > self.capacity_blocks:
            lru.popitem(last=False)
        return min(hit_blocks * self.block_tokens, input_tokens - 1)
