"""The quickstart: its generated corpus follows German grammar, and a much shorter run goes through
every step."""

import json
import random

import pytest
from transformers import AutoTokenizer

from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.quickstart import (
    QuickstartSettings,
    format_summary,
    run_quickstart,
)
from nmt_toolkit.quickstart_corpus import (
    AUXILIARIES,
    INTRANSITIVE,
    TRANSITIVE,
    adjective_ending,
    clause,
    generate_pairs,
    write_corpus,
)

pytestmark = pytest.mark.usefixtures("one_thread")

FINITE_VERBS = (
    {verb.german_third for verb in TRANSITIVE + INTRANSITIVE}
    | {verb.german_plural for verb in TRANSITIVE + INTRANSITIVE}
    | set(AUXILIARIES.values())
)


def test_corpus_is_deterministic_distinct_and_split_without_overlap(tmp_path):
    pairs = generate_pairs(500, seed=3)
    assert pairs == generate_pairs(500, seed=3) and pairs != generate_pairs(500, seed=4)
    assert len(set(pairs)) == 500
    write_corpus(tmp_path, {"train": 300, "valid": 50, "test": 50}, seed=3)
    splits = {
        split: load_parallel_corpus(tmp_path, "en", "de", split)["translation"]
        for split in ("train", "valid", "test")
    }
    assert {split: len(rows) for split, rows in splits.items()} == {
        "train": 300,
        "valid": 50,
        "test": 50,
    }
    seen = [{(row["en"], row["de"]) for row in rows} for rows in splits.values()]
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])
    with pytest.raises(ValueError, match="positive integer"):
        generate_pairs(0)


@pytest.mark.parametrize(
    "article, case, gender, plural, ending",
    [
        ("the", "nom", "m", False, "e"),
        ("the", "acc", "m", False, "en"),
        ("the", "acc", "f", False, "e"),
        ("a", "nom", "m", False, "er"),
        ("a", "acc", "m", False, "en"),
        ("a", "nom", "n", False, "es"),
        ("a", "acc", "n", False, "es"),
        ("a", "nom", "f", False, "e"),
        ("the", "nom", "n", True, "en"),
        ("", "acc", "m", True, "e"),
    ],
)
def test_adjective_endings_follow_german_declension(article, case, gender, plural, ending):
    assert adjective_ending(article, case, gender, plural) == ending


def test_word_order_rules_hold_in_generated_sentences():
    rng = random.Random(0)
    for _ in range(300):
        english, german = clause(rng, subordinate=True)
        assert german.split()[-1] in FINITE_VERBS, german  # verb last in a "weil" clause
    for english, german in generate_pairs(400, seed=5):
        words = german.rstrip(".").replace(",", "").split()
        if english.split()[0] in ("Today", "Now", "Sometimes"):
            assert words[1] in FINITE_VERBS, german  # verb second after a fronted adverb
        if " ran" in english.split(" because")[0] or " came" in english.split(" because")[0]:
            # sein, not haben
            assert words[words.index("ist" if "ist" in words else "sind") - 1] != "hat", german
        assert german[0].isupper() and german.endswith(".") and english.endswith(".")


def test_short_quickstart_runs_every_step(tmp_path):
    settings = QuickstartSettings(
        train_pairs=400,
        valid_pairs=20,
        test_pairs=20,
        merges=100,
        max_steps=40,
        warmup_steps=10,
        learning_rate=3e-3,
        max_tokens=512,
        num_beams=2,
        max_new_tokens=12,
        model={
            "model_type": "dwlstm",
            "d_model": 32,
            "ffn_dim": 64,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "encoder_attention_heads": 2,
            "decoder_attention_heads": 2,
            "dropout": 0.0,
            "max_position_embeddings": 64,
        },
    )
    summary = run_quickstart(tmp_path / "out", settings)
    out = tmp_path / "out"
    assert len((out / "data" / "train.en").read_text(encoding="utf-8").splitlines()) == 400
    assert len(AutoTokenizer.from_pretrained(out / "tokenizer")) == len(
        AutoTokenizer.from_pretrained(out / "model")
    )
    for name in (
        "config.json",
        "model.safetensors",
        "modeling_dwlstm.py",
        "pipeline_translation.py",
        "README.md",
    ):
        assert (out / "model" / name).is_file(), name
    assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == summary
    losses = summary["validation_loss"]
    assert len(losses) == 3 and losses[-1] < losses[0]  # before training, halfway, at the end
    assert summary["untrained"]["sentences"] == summary["trained"]["sentences"] == 20
    assert [record["source"] for record in summary["pipeline"]] == [
        "The old teacher found a red ball.",
        "Today the children see the small horses.",
        "A young woman slept because the dog sang.",
    ]
    assert all(isinstance(record["translation"], str) for record in summary["pipeline"])
    text = format_summary(summary)
    assert (
        f"untrained {summary['untrained']['sacrebleu']:.1f} -> trained "
        f"{summary['trained']['sacrebleu']:.1f}" in text
    )
    with pytest.raises(ValueError, match="not empty"):
        run_quickstart(out, settings)
