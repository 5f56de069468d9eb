"""Batches by token count, as NMT toolkits build them (fairseq's `--max-tokens`, Vaswani et
al. §5.1).

A batch of sentence pairs costs memory and compute in proportion to its *padded* size: the number of
pairs times the length of the longest one. Batching by a fixed number of sentences wastes most of a
batch on padding when lengths vary, and makes the number of tokens per update (what the papers fix,
~25k target tokens) fluctuate. So, like fairseq:

1. Pairs are sorted by length (target length, then source length; ties broken by a permutation fixed
   by the seed, so that neighbouring lines of a document do not always land in the same batch).
2. Consecutive pairs are packed greedily while ``pairs x longest side <= max_tokens``.
3. The batches are fixed for the whole run; their *order* is shuffled every epoch (seeded by
   ``seed + epoch``), so every rank and every resumed run sees the same sequence, and the number of
   batches per epoch (which the Trainer's step counting and resuming rely on) never changes.
4. Under several processes every rank draws the same global order and takes batches ``rank, rank +
   world_size, ...``: disjoint, and equally many per rank (the largest batches are halved until the
   count divides the world size, so no pair is dropped or repeated and no rank waits for a
   missing step).
"""

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class TokenBatchSampler(Sampler[list[int]]):
    """Yield lists of dataset indices whose padded size (pairs x longest side) stays within
    `max_tokens`.

    Args:
        source_lengths / target_lengths: token count of each pair's source and target (same length).
        max_tokens: the padded-token budget of one batch, on each side.
        num_replicas / rank: the data-parallel world size and this process's rank.
        seed: fixes the tie-breaking permutation and, with the epoch, the order of the batches.
        shuffle: shuffle the order of the batches every epoch (training); False keeps length order.

    Call `set_epoch(epoch)` before iterating for a new epoch (the Trainer does).
    """

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int],
        max_tokens: int,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 0,
        shuffle: bool = True,
    ):
        if len(source_lengths) != len(target_lengths):
            raise ValueError(
                f"Got {len(source_lengths)} source lengths but {len(target_lengths)} target "
                "lengths."
            )
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"`max_tokens` must be a positive integer, got {max_tokens!r}.")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"`rank` must be in [0, num_replicas={num_replicas}), got {rank}.")
        self.max_tokens = max_tokens
        self.num_replicas = num_replicas
        self.rank = rank
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        sizes = torch.maximum(torch.as_tensor(source_lengths), torch.as_tensor(target_lengths))
        longest = int(sizes.max()) if len(sizes) else 0
        if longest > max_tokens:
            raise ValueError(
                f"A pair has {longest} tokens on one side, more than `max_tokens`={max_tokens}: "
                "raise `max_tokens` "
                "or drop long pairs first (`max_length`, 256 subword tokens by default)."
            )
        order = _length_order(
            torch.as_tensor(source_lengths), torch.as_tensor(target_lengths), seed
        )
        batches = pack_by_tokens(order.tolist(), sizes.tolist(), max_tokens)
        self.batches = split_to_multiple(batches, num_replicas)

    def set_epoch(self, epoch: int):
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.batches) // self.num_replicas

    def __iter__(self) -> Iterator[list[int]]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(self.batches), generator=generator).tolist()
        else:
            order = range(len(self.batches))
        for position in range(self.rank, len(self.batches), self.num_replicas):
            yield list(self.batches[order[position]])


def pack_by_tokens(order: Sequence[int], sizes: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Greedily cut `order` into consecutive batches with ``len(batch) * max(sizes in batch) <=
    max_tokens``."""
    batches, batch, longest = [], [], 0
    for index in order:
        if batch and (len(batch) + 1) * max(longest, sizes[index]) > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(index)
        longest = max(longest, sizes[index])
    if batch:
        batches.append(batch)
    return batches


def split_to_multiple(batches: list[list[int]], multiple: int) -> list[list[int]]:
    """Halve the largest batches until their count is a multiple of `multiple` (every rank gets
    as many)."""
    batches = list(batches)
    while len(batches) % multiple:
        largest = max(range(len(batches)), key=lambda position: len(batches[position]))
        if len(batches[largest]) < 2:
            raise ValueError(
                f"Cannot give each of {multiple} processes the same number of batches: the data "
                f"has only {sum(map(len, batches))} pairs. Use more data or fewer processes."
            )
        batch = batches.pop(largest)
        half = len(batch) // 2
        batches[largest:largest] = [batch[:half], batch[half:]]
    return batches


def _length_order(
    source_lengths: torch.Tensor, target_lengths: torch.Tensor, seed: int
) -> torch.Tensor:
    """Indices sorted by (target length, source length), ties in a seeded random order."""
    order = torch.randperm(len(source_lengths), generator=torch.Generator().manual_seed(seed))
    order = order[torch.sort(source_lengths[order], stable=True).indices]
    return order[torch.sort(target_lengths[order], stable=True).indices]


__all__ = ["TokenBatchSampler", "pack_by_tokens", "split_to_multiple"]
