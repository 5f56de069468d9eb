"""Evaluation: length-sorted beam decoding in input order, BLEU/chrF with signatures, paired
bootstrap, the script."""

import json

import pytest
import sacrebleu
import torch
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm import DwLstmConfig
from modeling_dwlstm.tokenization_dwlstm import (
    tokenizer_model_kwargs,
    train_joint_bpe_tokenizer,
)
from nmt_toolkit.evaluation import (
    EvaluationArguments,
    length_sorted_batches,
    paired_bootstrap,
    run_evaluation,
    score_translations,
    tokenize_for_bleu,
    translate_sentences,
    write_json,
)
from nmt_toolkit.quickstart_corpus import generate_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

DECODE = {"num_beams": 2, "max_new_tokens": 8}
SCRIPT_DECODE = {**DECODE, "max_tokens": 20}  # the same, in several batches


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(300, seed=1)


@pytest.fixture(scope="module")
def tokenizer(pairs):
    return train_joint_bpe_tokenizer(
        [text for pair in pairs for text in pair], vocab_size=300, language_tags=["<2de>"]
    )


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = DwLstmConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
    )
    return AutoModelForSeq2SeqLM.from_config(config).eval()


def generate_one(model, tokenizer, ids: list[int]) -> str:
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        output = model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **DECODE
        )
    return tokenizer.decode(output[0], skip_special_tokens=True).strip()


def test_length_sorted_batches_cover_every_sentence_once_within_the_budget():
    lengths = [5, 1, 9, 3, 3, 7, 2, 30, 4, 6]
    batches = length_sorted_batches(lengths, max_tokens=12)
    assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
    flat = [lengths[index] for batch in batches for index in batch]
    assert flat == sorted(lengths)  # sorted by length
    for batch in batches:
        # 30 alone, over the budget
        assert len(batch) * max(lengths[i] for i in batch) <= 12 or len(batch) == 1
    assert [7] in batches
    with pytest.raises(ValueError, match="max_tokens"):
        length_sorted_batches(lengths, max_tokens=0)


def test_translations_come_back_in_input_order_whatever_the_batching(model, tokenizer, pairs):
    sources = [english for english, _ in pairs[:8]]
    expected = [
        generate_one(model, tokenizer, tokenizer(source)["input_ids"]) for source in sources
    ]
    assert len(set(expected)) > 1  # otherwise order would not be tested
    for max_tokens in (1, 40, 10_000):  # one sentence per batch, a few batches, one batch
        translations = translate_sentences(
            model, tokenizer, sources, max_tokens=max_tokens, **DECODE
        )
        assert translations.hypotheses == expected
        assert translations.seconds > 0 and translations.sentences_per_second > 0


def test_language_tag_is_prepended_once_when_asked(model, tokenizer, pairs):
    sources = [english for english, _ in pairs[:3]]
    tag = tokenizer.convert_tokens_to_ids("<2de>")
    expected = [
        generate_one(model, tokenizer, [tag] + tokenizer(source)["input_ids"]) for source in sources
    ]
    assert (
        translate_sentences(model, tokenizer, sources, language_tag="de", **DECODE).hypotheses
        == expected
    )
    tagged = ["<2de> " + source for source in sources]
    assert (
        translate_sentences(model, tokenizer, tagged, language_tag="de", **DECODE).hypotheses
        == expected
    )
    plain = [generate_one(model, tokenizer, tokenizer(source)["input_ids"]) for source in sources]
    assert plain != expected  # so the tag matters
    # no tag unless asked
    assert translate_sentences(model, tokenizer, sources, **DECODE).hypotheses == plain
    with pytest.raises(ValueError, match="no language tag '<2fr>'"):
        translate_sentences(model, tokenizer, sources, language_tag="fr", **DECODE)


def test_scores_match_sacrebleu_and_the_tokenized_bleu_splits_compounds():
    references = [
        "Der Hund schläft im Haus.",
        "Eine Frau liest ein Buch.",
        "Das Kind spielt mit dem Ball.",
    ]
    hypotheses = ["Der Hund schläft.", "Eine Frau liest ein Buch.", "Das Kind spielt im Garten."]
    scores = score_translations(hypotheses, references, target_lang="de")
    assert scores["sacrebleu"] == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=0.01
    )
    assert scores["chrf"] == pytest.approx(
        sacrebleu.corpus_chrf(hypotheses, [references]).score, abs=0.01
    )
    assert (
        "case:mixed" in scores["sacrebleu_signature"] and "tok:13a" in scores["sacrebleu_signature"]
    )
    assert scores["sentences"] == 3 and 0 < scores["sacrebleu"] < 100
    assert score_translations(references, references)["tokenized_bleu"] == 100.0
    # Case-sensitive: lower-casing a perfect output costs BLEU.
    assert (
        score_translations([text.lower() for text in references], references)["tokenized_bleu"]
        < 100.0
    )
    # A compound is split at its hyphens, so one wrong half still matches the other half and
    # the hyphen.
    assert (
        tokenize_for_bleu("Ein Open-Air-Konzert, heute.")
        == "Ein Open ##AT##-##AT## Air ##AT##-##AT## Konzert , heute ."
    )
    compound = score_translations(["Das Hotel-Zimmer ist groß."], ["Das Hotel-Bett ist groß."])
    split = sacrebleu.corpus_bleu(
        ["Das Hotel ##AT##-##AT## Zimmer ist groß ."],
        [["Das Hotel ##AT##-##AT## Bett ist groß ."]],
        tokenize="none",
    )
    assert compound["tokenized_bleu"] == pytest.approx(split.score, abs=0.01)
    assert compound["tokenized_bleu"] != compound["sacrebleu"]


@pytest.mark.parametrize(
    "hypotheses, references, message",
    [(["a", "b"], ["a"], "line-aligned"), ([], [], "empty"), ("a text", ["a"], "list of strings")],
)
def test_bad_inputs_to_scoring_raise(hypotheses, references, message):
    with pytest.raises(ValueError, match=message):
        score_translations(hypotheses, references)


def test_paired_bootstrap_finds_a_clearly_better_system_and_not_a_tie(pairs):
    references = [german for _, german in pairs[:120]]
    good = [reference if index % 4 else "Der Hund." for index, reference in enumerate(references)]
    bad = [" ".join(reference.split()[:3]) for reference in references]
    result = paired_bootstrap(good, bad, references, num_samples=200)
    # all sentences, once
    assert result["system_bleu"] == score_translations(good, references)["tokenized_bleu"]
    assert result["baseline_bleu"] == score_translations(bad, references)["tokenized_bleu"]
    assert result["system_bleu"] > result["baseline_bleu"]
    assert result["p_value"] < 0.05 and result["system_wins"] > 0.95
    interval = result["system_interval"]
    assert interval["low"] <= interval["mean"] <= interval["high"]
    reverse = paired_bootstrap(bad, good, references, num_samples=200)
    assert reverse["p_value"] > 0.95
    tie = paired_bootstrap(good, good, references, num_samples=50)
    assert tie["p_value"] == 1.0  # a system is never *better* than itself
    assert paired_bootstrap(good, bad, references, num_samples=50, seed=3) == paired_bootstrap(
        good, bad, references, num_samples=50, seed=3
    )
    with pytest.raises(ValueError, match="line-aligned"):
        paired_bootstrap(good, bad[:-1], references)


def test_run_evaluation_writes_hypotheses_and_json(model, tokenizer, pairs, tmp_path):
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    test = pairs[:4]
    (tmp_path / "test.en").write_text(
        "".join(english + "\n" for english, _ in test), encoding="utf-8"
    )
    (tmp_path / "test.de").write_text(
        "".join(german + "\n" for _, german in test), encoding="utf-8"
    )
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("".join(german + "\n" for _, german in test), encoding="utf-8")
    args = EvaluationArguments(
        model=str(tmp_path / "model"),
        output_dir=str(tmp_path / "eval"),
        data=str(tmp_path),
        split="test",
        source_lang="en",
        target_lang="de",
        add_language_tag=True,
        baseline_hypotheses=str(baseline),
        bootstrap_samples=20,
        **SCRIPT_DECODE,
    )
    results = run_evaluation(args)
    hypotheses = (tmp_path / "eval" / "hypotheses.txt").read_text(encoding="utf-8").splitlines()
    sources = [english for english, _ in test]
    assert (
        hypotheses
        == translate_sentences(model, tokenizer, sources, language_tag="de", **DECODE).hypotheses
    )
    assert json.loads((tmp_path / "eval" / "results.json").read_text(encoding="utf-8")) == results
    assert results["sentences"] == 4 and results["sentences_per_second"] > 0
    assert results["paired_bootstrap"]["p_value"] == 1.0  # the references as "baseline" always win
    # The same test set given as two files.
    files = EvaluationArguments(
        model=str(tmp_path / "model"),
        output_dir=str(tmp_path / "eval2"),
        source_file=str(tmp_path / "test.en"),
        reference_file=str(tmp_path / "test.de"),
        target_lang="de",
        add_language_tag=True,
        **SCRIPT_DECODE,
    )
    assert run_evaluation(files)["sacrebleu"] == results["sacrebleu"]


def test_the_evaluation_keeps_freed_memory_unless_told_not_to_and_says_which(
    model, tokenizer, pairs, tmp_path, kept_memory_calls
):
    """results.json says whether the process kept the memory it freed (the speed depends on it):
    not with --no_keep_freed_memory, else glibc is told to (once per process, as it stays)."""
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    for column, name in enumerate(("en", "de")):
        text = "".join(pair[column] + "\n" for pair in pairs[:3])
        (tmp_path / f"test.{name}").write_text(text, encoding="utf-8")
    settings = dict(
        model=str(tmp_path / "model"),
        source_file=str(tmp_path / "test.en"),
        reference_file=str(tmp_path / "test.de"),
        target_lang="de",
        add_language_tag=True,
        **SCRIPT_DECODE,
    )
    plain = run_evaluation(
        EvaluationArguments(output_dir=str(tmp_path / "plain"), keep_freed_memory=False, **settings)
    )
    assert plain["freed_memory_kept"] is False and kept_memory_calls == []
    kept = run_evaluation(EvaluationArguments(output_dir=str(tmp_path / "kept"), **settings))
    assert kept["freed_memory_kept"] is True and kept_memory_calls == [True]
    assert json.loads((tmp_path / "kept" / "results.json").read_text())["freed_memory_kept"]
    assert kept["sacrebleu"] == plain["sacrebleu"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({}, "Give either --data"),
        ({"source_file": "test.en"}, "go together"),
        (
            {"data": ".", "source_file": "test.en", "reference_file": "test.de"},
            "Give either --data",
        ),
        ({"data": "."}, "needs --source_lang"),
        ({"source_file": "missing.en", "reference_file": "test.de"}, "Cannot read"),
        ({"source_file": "test.en", "reference_file": "short.de"}, "line-aligned"),
    ],
)
def test_run_evaluation_rejects_bad_arguments(overrides, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test.en").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "test.de").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "short.de").write_text("a\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        run_evaluation(EvaluationArguments(model="unused", output_dir="out", **overrides))


def test_write_json_replaces_the_file_whole(tmp_path):
    path = tmp_path / "sub" / "results.json"
    write_json({"bleu": 1.5, "text": "Größe"}, path)
    write_json({"bleu": 2.5}, path)
    assert json.loads(path.read_text(encoding="utf-8")) == {"bleu": 2.5}
    assert [file.name for file in path.parent.iterdir()] == ["results.json"]
