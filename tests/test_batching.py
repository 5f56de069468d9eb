"""Token-budget batching: the budget holds, every pair comes once per epoch, ranks get disjoint
equal shares."""

import random

import pytest

from nmt_toolkit.batching import TokenBatchSampler, pack_by_tokens, split_to_multiple


def random_lengths(count: int, seed: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    sources = [rng.randint(1, 60) for _ in range(count)]
    return sources, [max(1, length + rng.randint(-10, 10)) for length in sources]


def padded_size(batch, sources, targets) -> int:
    return len(batch) * max(max(sources[i], targets[i]) for i in batch)


@pytest.mark.parametrize("max_tokens", [70, 256, 1000])
def test_no_batch_exceeds_the_budget_and_every_pair_comes_once_per_epoch(max_tokens):
    sources, targets = random_lengths(997)
    sampler = TokenBatchSampler(sources, targets, max_tokens, seed=3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        assert all(padded_size(batch, sources, targets) <= max_tokens for batch in batches)
        assert sorted(index for batch in batches for index in batch) == list(range(997))


def test_batches_are_full_and_reshuffled_each_epoch():
    sources, targets = random_lengths(500)
    sampler = TokenBatchSampler(sources, targets, 512, seed=0)
    orders = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        orders.append([tuple(batch) for batch in sampler])
    assert orders[0] != orders[1], "the batch order must change between epochs"
    assert sorted(orders[0]) == sorted(orders[1]), (
        "the batches themselves stay fixed (constant steps per epoch)"
    )
    # Greedy packing of length-sorted pairs: taking the next batch's first pair would have broken
    # the budget.
    for batch, following in zip(sampler.batches, sampler.batches[1:]):
        assert padded_size([*batch, following[0]], sources, targets) > 512
    assert TokenBatchSampler(sources, targets, 512, seed=0).batches == sampler.batches, (
        "deterministic for a seed"
    )
    assert TokenBatchSampler(sources, targets, 512, seed=1).batches != sampler.batches, (
        "ties broken by the seed"
    )
    assert pack_by_tokens([0, 1, 2], [10, 10, 30], 40) == [[0, 1], [2]]


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ranks_get_disjoint_equal_shares_covering_every_pair(world_size):
    sources, targets = random_lengths(301, seed=5)
    ranks = [
        TokenBatchSampler(sources, targets, 200, num_replicas=world_size, rank=rank, seed=7)
        for rank in range(world_size)
    ]
    for epoch in (0, 1):
        shares = []
        for sampler in ranks:
            sampler.set_epoch(epoch)
            shares.append(list(sampler))
        assert len({len(share) for share in shares}) == 1, (
            "every rank must take the same number of steps"
        )
        assert len(shares[0]) == len(ranks[0])
        seen = [index for share in shares for batch in share for index in batch]
        assert sorted(seen) == list(range(301)), (
            "ranks are disjoint and together see every pair once"
        )
        assert all(
            padded_size(batch, sources, targets) <= 200 for share in shares for batch in share
        )


def test_split_to_multiple_halves_the_largest_batches():
    batches = [[0, 1, 2, 3], [4], [5, 6]]
    assert split_to_multiple(batches, 2) == [[0, 1], [2, 3], [4], [5, 6]]
    assert split_to_multiple(batches, 3) == batches
    with pytest.raises(ValueError, match="only 2 pairs"):
        split_to_multiple([[0], [1]], 3)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"max_tokens": 20}, "more than `max_tokens`=20"),
        ({"max_tokens": 0}, "positive integer"),
        ({"max_tokens": 100, "rank": 2, "num_replicas": 2}, "rank"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenBatchSampler([5, 30], [8, 25], **kwargs)
