"""Random online back-translation (ROBT; Zhang et al. 2020): synthetic pairs for the directions the
data lacks, made by the model being trained, in the same update as the real batch.

An English-centric model translates de->fr "zero-shot" and often answers in English or in German
(off-target output). ROBT shows it such directions: for a training pair (x, y) whose target language
is t (the tag <2t> in front of x), pick a language l != t at random among the model's target
languages, translate y into l with the current model (greedy, without gradients, dropout off),
giving x', and train on the synthetic pair (<2t> x', y) beside (x, y). The target side is always
real text; the source is the model's own output in a random language, never in
t. Zhang et al. back-translate every pair of every batch (`share` 1) in a short fine-tuning
   stage after
convergence (10k of their 510k steps); `train_translation.py --robt SHARE` does it for a whole run
or, started from a trained model, as that stage.

What is random (which pairs, which languages) is drawn from a generator seeded by the run's seed,
the update, the process and the micro-batch within the update, so a resumed run and every process
count draw what an uninterrupted run draws; the greedy decoding itself is deterministic.
"""

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

# A back-translation may be this many tokens longer than the target it translates (its source-side
# limit aside).
EXTRA_LENGTH = 10


@dataclass
class SyntheticPairs:
    """The synthetic pairs made from one batch: for each back-translated pair `rows[i]` of the
    batch, its target language, the language its target was translated into, and the new source
    `sources[i]` = <2t> x' (token ids)."""

    rows: list[int]
    target_languages: list[str]
    source_languages: list[str]
    sources: list[list[int]]
    seconds: float


class RandomOnlineBackTranslation:
    """ROBT for one training run: `extend(model, batch, ...)` returns the batch with the synthetic
    pairs of a `share` of its pairs appended (they share its loss, so they enter the same update).

    `tag_ids` maps each language to its tag's token id; `languages` are the model's target languages
    (a back- translation goes into one of them). `max_length` bounds a synthetic source, as the
    training data is bounded."""

    def __init__(
        self,
        share: float,
        tag_ids: Mapping[str, int],
        languages: Sequence[str],
        pad_token_id: int,
        eos_token_id: int,
        seed: int = 0,
        max_length: int = 256,
    ):
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ValueError(
                f"--robt is the share of each batch's pairs that get a synthetic twin, in (0, 1] "
                f"(Zhang et al. 2020: 1); got {share!r}."
            )
        untagged = sorted(set(languages) - set(tag_ids))
        if untagged:
            raise ValueError(
                "--robt translates into the model's target languages, and the tokenizer has no "
                f"tag for {untagged}."
            )
        if len(set(languages)) < 2:
            raise ValueError(
                "--robt picks a language other than each pair's target language, so the model "
                f"needs at least two target languages; it has {sorted(set(languages))}."
            )
        self.share, self.languages, self.seed, self.max_length = (
            share,
            sorted(set(languages)),
            seed,
            max_length,
        )
        self.tag_ids = {language: tag_ids[language] for language in self.languages}
        self.language_of_tag = {tag: language for language, tag in self.tag_ids.items()}
        self.pad_token_id, self.eos_token_id = pad_token_id, eos_token_id
        self.pairs, self.seconds = 0, 0.0  # since `take_counts` was last called

    def generator(self, step: int, rank: int, micro_batch: int) -> torch.Generator:
        """The draws of micro-batch `micro_batch` of update `step` on process `rank`: the same in
        every run."""
        state = np.random.SeedSequence([self.seed, step, rank, micro_batch]).generate_state(1)[0]
        return torch.Generator().manual_seed(int(state))

    def choose(
        self, input_ids: torch.Tensor, generator: torch.Generator
    ) -> tuple[list[int], list[str], list[str]]:
        """(rows, their target languages, a random other language for each): `share` of the rows on
        average (the fractional part rounds up at random), in batch order."""
        targets = [self.target_language(int(tag)) for tag in input_ids[:, 0].tolist()]
        expected = self.share * len(targets)
        count = math.floor(expected) + int(
            torch.rand((), generator=generator) < expected - math.floor(expected)
        )
        rows = sorted(torch.randperm(len(targets), generator=generator)[:count].tolist())
        others = [
            [language for language in self.languages if language != targets[row]] for row in rows
        ]
        picks = [
            options[int(torch.randint(len(options), (), generator=generator))] for options in others
        ]
        return rows, [targets[row] for row in rows], picks

    def target_language(self, tag: int) -> str:
        if tag not in self.language_of_tag:
            raise ValueError(
                "--robt reads each pair's target language from the tag its source starts with; "
                f"a source starts with token {tag}, not one of the tags {self.tag_ids} (train "
                "with --language_pairs)."
            )
        return self.language_of_tag[tag]

    @torch.no_grad()
    def synthesize(
        self, model, batch: Mapping[str, torch.Tensor], generator: torch.Generator
    ) -> SyntheticPairs:
        """Back-translate the chosen pairs' targets into their random languages, greedily, with
        dropout off."""
        start = time.perf_counter()
        rows, targets, picks = self.choose(batch["input_ids"], generator)
        if not rows:
            return SyntheticPairs([], [], [], [], 0.0)
        references = [self.target_ids(batch["labels"][row]) for row in rows]
        # <2l> y
        inputs = [[self.tag_ids[pick], *reference] for pick, reference in zip(picks, references)]
        output = self.greedy(
            model, inputs, min(max(map(len, references)) + EXTRA_LENGTH, self.max_length - 2)
        )
        sources = [
            [self.tag_ids[target], *self.until_eos(ids[1:])]
            for target, ids in zip(targets, output.tolist())
        ]
        return SyntheticPairs(rows, targets, picks, sources, time.perf_counter() - start)

    def greedy(self, model, inputs: list[list[int]], max_new_tokens: int) -> torch.Tensor:
        input_ids, attention_mask = pad_rows(inputs, self.pad_token_id, model.device)
        was_training = model.training
        model.eval()
        try:
            return model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                num_beams=1,
                do_sample=False,
                # the decoder start and the new tokens
                max_length=1 + max_new_tokens,
            )
        finally:
            model.train(was_training)

    def target_ids(self, labels: torch.Tensor) -> list[int]:
        """A pair's target token ids (its labels without the padding)."""
        return [token for token in labels.tolist() if token not in (-100, self.pad_token_id)]

    def until_eos(self, ids: list[int]) -> list[int]:
        """Generated ids up to and including the first </s> (one is added when decoding stopped at
        the length limit)."""
        ids = [token for token in ids if token != self.pad_token_id]
        return (
            ids[: ids.index(self.eos_token_id) + 1]
            if self.eos_token_id in ids
            else [*ids, self.eos_token_id]
        )

    def extend(self, model, batch: dict, step: int, rank: int, micro_batch: int) -> dict:
        """`batch` with the synthetic pairs appended: new sources, the chosen pairs' labels (and
        decoder inputs)."""
        synthetic = self.synthesize(model, batch, self.generator(step, rank, micro_batch))
        self.pairs, self.seconds = (
            self.pairs + len(synthetic.rows),
            self.seconds + synthetic.seconds,
        )
        if not synthetic.rows:
            return batch
        real = [
            ids[mask.bool()].tolist()
            for ids, mask in zip(batch["input_ids"], batch["attention_mask"])
        ]
        input_ids, attention_mask = pad_rows(
            real + synthetic.sources, self.pad_token_id, batch["input_ids"].device
        )
        rows = torch.tensor(synthetic.rows, device=batch["input_ids"].device)
        extended = {
            name: torch.cat([value, value[rows]])
            for name, value in batch.items()
            if name not in ("input_ids", "attention_mask")
        }
        return {
            **extended,
            "input_ids": input_ids,
            "attention_mask": attention_mask.to(batch["attention_mask"].dtype),
        }

    def take_counts(self) -> tuple[int, float]:
        """(synthetic pairs, seconds spent making them) since the last call."""
        counts, (self.pairs, self.seconds) = (self.pairs, self.seconds), (0, 0.0)
        return counts


def pad_rows(
    rows: Sequence[Sequence[int]], pad_token_id: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (batch, longest) token ids and their attention mask."""
    longest = max(map(len, rows))
    input_ids = torch.full((len(rows), longest), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[i, : len(row)] = 1
    return input_ids.to(device), attention_mask.to(device)


__all__ = ["RandomOnlineBackTranslation", "SyntheticPairs", "pad_rows", "EXTRA_LENGTH"]
