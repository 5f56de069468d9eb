"""Many-to-many translation: directions and tags, temperature sampling, training and resuming, the
pipeline with src_lang / tgt_lang (also as remote code), and the per-direction evaluation (averages,
win ratio, off-target)."""

import gzip
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import datasets
import pytest
import torch
from conftest import MULTI30K, WITHOUT_PACKAGE
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

import modeling_dwlstm
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit import training
from nmt_toolkit.evaluation import (
    EvaluationArguments,
    LanguageIdentifier,
    direction_groups,
    group_averages,
    off_target_rate,
    paired_bootstrap,
    run_evaluation,
    win_ratio,
)
from nmt_toolkit.hub import model_card, read_results
from nmt_toolkit.multilingual import (
    TemperatureTokenBatchSampler,
    balanced_sentences,
    load_multilingual_corpus,
    parse_language_pairs,
    parse_sources,
    tag_source,
    temperature_probabilities,
    tokenize_directions,
)
from nmt_toolkit.training import (
    DataArguments,
    ModelArguments,
    TranslationTrainingArguments,
    train_translation,
)

LANGUAGES = ["cs", "de", "en", "fr"]
TAGS = [f"<2{language}>" for language in LANGUAGES]
PAIRS = ["en-de", "de-en", "en-fr", "fr-en"]
GREEDY = dict(num_beams=1, max_new_tokens=8)
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}"),
]


@pytest.fixture(scope="module")
def tokenizer():
    corpus = load_multilingual_corpus(
        [(str(MULTI30K), parse_language_pairs("all", LANGUAGES))], max_pairs=100
    )
    return train_joint_bpe_tokenizer(
        balanced_sentences(corpus, temperature=5), vocab_size=900, language_tags=TAGS
    )


@pytest.fixture(scope="module")
def saved_model(tokenizer, tmp_path_factory):
    """A tiny untrained multilingual model saved with its tokenizer, as train_translation.py
    leaves it."""
    torch.manual_seed(0)
    config = modeling_dwlstm.DwLstmConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=128,
        language_pairs=PAIRS,
    )
    directory = tmp_path_factory.mktemp("m2m") / "saved"
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def translator_for(directory, task="translation"):
    """The in-process pipeline over a saved model (the package registers the task; no remote
    code)."""
    return pipeline(
        task,
        model=AutoModelForSeq2SeqLM.from_pretrained(directory),
        tokenizer=AutoTokenizer.from_pretrained(directory),
    )


def generate_ids(model, input_ids: list[int]) -> list[int]:
    ids = torch.tensor([input_ids])
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **GREEDY)[
            0
        ].tolist()


# --- directions, sources and tags -----------------------------------------------------------------


def test_language_pairs_lists_and_all():
    assert parse_language_pairs("en-de, de-en") == [("en", "de"), ("de", "en")]
    assert parse_language_pairs("all", ["en", "fr", "de"]) == [
        ("de", "en"),
        ("de", "fr"),
        ("en", "de"),
        ("en", "fr"),
        ("fr", "de"),
        ("fr", "en"),
    ]
    for bad, message in [
        ("en-de,en-de", "more than once"),
        ("en_de", "looks like"),
        ("en-en", "looks like"),
        ("", "No language pair"),
        ("all", "at least two languages"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_language_pairs(bad, ["en"])
    sources = parse_sources(str(MULTI30K), "all", ["opus100=en-fr,fr-en"])
    assert sources[0] == (str(MULTI30K), parse_language_pairs("all", LANGUAGES))
    assert sources[1] == ("opus100", [("en", "fr"), ("fr", "en")])
    with pytest.raises(ValueError, match="SOURCE=PAIRS|'opus100=en-fr,fr-en'"):
        parse_sources(str(MULTI30K), "en-de", ["opus100"])


def test_tag_placement_for_every_direction(tokenizer):
    directions = parse_language_pairs("all", LANGUAGES)
    corpus = load_multilingual_corpus([(str(MULTI30K), directions)], split="val", max_pairs=2)
    tokenized = tokenize_directions(corpus, tokenizer)
    assert len(tokenized) == 2 * len(directions) == 24
    for row, example in zip(tokenized, corpus):
        source_lang, target_lang = example["source_lang"], example["target_lang"]
        assert row["direction"] == f"{source_lang}-{target_lang}"
        assert row["input_ids"][0] == tokenizer.convert_tokens_to_ids(f"<2{target_lang}>")
        # the tag, then the plain source
        assert row["input_ids"][1:] == tokenizer(example["source"])["input_ids"]
        # no tag on the target side
        assert row["labels"] == tokenizer(example["target"])["input_ids"]
    assert tag_source("<2de> Ein Mann.", "de") == "<2de> Ein Mann."
    untagged = train_joint_bpe_tokenizer(["a b c", "d e f"] * 5, vocab_size=40)
    with pytest.raises(ValueError, match="no language tags"):
        tokenize_directions(corpus, untagged)


def test_sources_mix_json_lines_with_three_languages_and_the_hub(tmp_path, monkeypatch):
    lines = [{"translation": {"en": f"e{n}", "de": f"d{n}", "fr": f"f{n}"}} for n in range(3)]
    (tmp_path / "three.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    # OPUS-100: one sorted config per pair, both directions
    hub = tmp_path / "Helsinki-NLP" / "opus-100" / "de-en"
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    rows = [{"de": f"hub d{n}", "en": f"hub e{n}"} for n in range(4)]
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"translation": rows}, features=features)}
    ).save_to_disk(hub)
    calls = []

    def load_dataset(repository, config, split):
        calls.append((repository, config, split))
        return datasets.load_from_disk(str(tmp_path / repository / config))[split]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    # no probe of the (absent) Hub
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    sources = parse_sources(str(tmp_path / "three.jsonl"), "all", ["opus100=en-de,de-en"])
    corpus = load_multilingual_corpus(sources)
    assert calls == [("Helsinki-NLP/opus-100", "de-en", "train")] * 2
    directions = Counter(f"{s}-{t}" for s, t in zip(corpus["source_lang"], corpus["target_lang"]))
    assert directions == {
        "de-en": 3 + 4,
        "de-fr": 3,
        "en-de": 3 + 4,
        "en-fr": 3,
        "fr-de": 3,
        "fr-en": 3,
    }
    assert {
        "source_lang": "fr",
        "target_lang": "de",
        "source": "f1",
        "target": "d1",
    } in corpus.to_list()
    assert {
        "source_lang": "en",
        "target_lang": "de",
        "source": "hub e2",
        "target": "hub d2",
    } in corpus.to_list()


# --- temperature sampling -------------------------------------------------------------------------


def test_temperature_probabilities_follow_the_formula():
    assert temperature_probabilities({"a": 100, "b": 900}, 1) == pytest.approx({"a": 0.1, "b": 0.9})
    q = 0.1**0.2, 0.9**0.2  # T = 5: p_i ~ q_i^(1/5)
    assert temperature_probabilities({"a": 100, "b": 900}, 5) == pytest.approx(
        {"a": q[0] / sum(q), "b": q[1] / sum(q)}
    )
    assert temperature_probabilities({"a": 1, "b": 10**6}, 1e6) == pytest.approx(
        {"a": 0.5, "b": 0.5}, abs=1e-4
    )
    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="positive number"):
            temperature_probabilities({"a": 1}, bad)


@pytest.mark.parametrize("temperature", [1, 5])
def test_sampler_direction_frequencies_match_the_temperature(temperature):
    sizes = {"en-de": 300, "en-cs": 2700}
    directions = [name for name, size in sizes.items() for _ in range(size)]
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 30, (len(directions),), generator=generator).tolist()
    sampler = TemperatureTokenBatchSampler(
        lengths, lengths, directions, max_tokens=300, temperature=temperature
    )
    expected = temperature_probabilities(sizes, temperature)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)  # the Trainer's steps per epoch never change
        assert all(len(batch) * max(lengths[i] for i in batch) <= 300 for batch in batches)
        drawn = Counter(directions[i] for batch in batches for i in batch)
        total = sum(drawn.values())
        assert total == pytest.approx(len(directions), rel=0.05)
        for name, probability in expected.items():
            assert drawn[name] / total == pytest.approx(probability, abs=0.02), (epoch, name)
    mixed = [batch for batch in batches if len({directions[i] for i in batch}) > 1]
    assert mixed, "batches are packed by length across directions"
    # Two processes: the same draw, disjoint halves of the batches.
    ranks = [
        TemperatureTokenBatchSampler(
            lengths, lengths, directions, 300, temperature, num_replicas=2, rank=rank
        )
        for rank in (0, 1)
    ]
    for rank_sampler in ranks:
        rank_sampler.set_epoch(2)
    shares = [list(rank_sampler) for rank_sampler in ranks]
    assert len(shares[0]) == len(shares[1])
    assert ranks[0].batches_of_epoch(2) == ranks[1].batches_of_epoch(2)
    assert sorted(map(sorted, shares[0] + shares[1])) == sorted(
        map(sorted, ranks[0].batches_of_epoch(2))
    )


# --- training and resuming ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def training_setup(tokenizer, tmp_path_factory):
    directory = tmp_path_factory.mktemp("train")
    tokenizer.save_pretrained(directory / "tokenizer")
    (directory / "tiny.json").write_text(
        json.dumps(
            {
                "model_type": "dwlstm",
                "d_model": 16,
                "ffn_dim": 32,
                "encoder_layers": 2,
                "decoder_layers": 2,
                "encoder_attention_heads": 2,
                "decoder_attention_heads": 2,
                "max_position_embeddings": 128,
            }
        )
    )
    with (
        gzip.open(MULTI30K / "train.fr.gz", "rt") as french,
        gzip.open(MULTI30K / "train.en.gz", "rt") as english,
    ):
        lines = [{"fr": next(french).strip(), "en": next(english).strip()} for _ in range(12)]
    (directory / "fr.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return directory


def multilingual_arguments(setup, output_dir, **changes):
    data_args = DataArguments(
        dataset=str(MULTI30K),
        language_pairs="en-de,de-en",
        more_datasets=[f"{setup / 'fr.jsonl'}=en-fr"],
        sampling_temperature=3,
        max_train_pairs=15,
        max_tokens=160,
        validation_split="val",
        max_validation_pairs=4,
    )
    training_args = TranslationTrainingArguments(
        output_dir=str(output_dir),
        max_steps=12,
        save_steps=5,
        warmup_steps=2,
        learning_rate=3e-3,
        logging_steps=1,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        eval_strategy="steps",
        eval_steps=12,
        **changes,
    )
    return (
        ModelArguments(str(setup / "tiny.json"), str(setup / "tokenizer")),
        data_args,
        training_args,
    )


class RecordingCollator(training.DataCollatorForSeq2Seq):
    """The data collator, noting the source ids of each training batch it builds."""

    batches: list = []

    def __call__(self, features, return_tensors=None):
        if (
            "direction" not in features[0]
            and len(features[0]["input_ids"]) > 0
            and self.model.training
        ):
            RecordingCollator.batches.append(
                sorted(tuple(feature["input_ids"]) for feature in features)
            )
        return super().__call__(features, return_tensors)


class KillAfterFirstCheckpoint(training.TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        raise KeyboardInterrupt(f"killed after saving step {state.global_step}")


def test_multilingual_run_logs_each_direction_and_resumes_with_the_same_batches(
    training_setup, tmp_path, monkeypatch
):
    monkeypatch.setattr(training, "DataCollatorForSeq2Seq", RecordingCollator)
    RecordingCollator.batches = []
    straight = train_translation(*multilingual_arguments(training_setup, tmp_path / "straight"))
    straight_batches, RecordingCollator.batches = RecordingCollator.batches, []
    assert straight.state.epoch > 1, (
        "the run must cross an epoch boundary (a new draw of the pairs)"
    )
    log = (tmp_path / "straight" / "train.log").read_text()
    assert all(f"eval_{pair}_loss" in log for pair in ("en-de", "de-en", "en-fr"))
    saved = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "straight")
    assert saved.config.language_pairs == ["en-de", "de-en", "en-fr"]

    with pytest.raises(KeyboardInterrupt):
        train_translation(
            *multilingual_arguments(training_setup, tmp_path / "killed"),
            callbacks=[KillAfterFirstCheckpoint()],
        )
    killed_batches, RecordingCollator.batches = RecordingCollator.batches, []
    train_translation(
        *multilingual_arguments(training_setup, tmp_path / "killed", resume_from_checkpoint="last")
    )
    assert killed_batches + RecordingCollator.batches == straight_batches
    first, second = (
        load_file(tmp_path / run / "model.safetensors") for run in ("straight", "killed")
    )
    for name in first:
        torch.testing.assert_close(second[name], first[name], rtol=0, atol=1e-6, msg=name)


def test_multilingual_training_errors(training_setup, tmp_path):
    model_args, data_args, training_args = multilingual_arguments(training_setup, tmp_path / "a")
    data_args.source_lang = "en"
    with pytest.raises(ValueError, match="replaces --source_lang"):
        train_translation(model_args, data_args, training_args)
    model_args, data_args, training_args = multilingual_arguments(training_setup, tmp_path / "b")
    data_args.language_pairs = None
    with pytest.raises(ValueError, match="--language_pairs"):
        train_translation(model_args, data_args, training_args)


# --- inference: mixed batches and the pipeline ----------------------------------------------------


def test_a_batch_mixing_directions_decodes_as_each_sentence_alone(saved_model, tokenizer):
    model = AutoModelForSeq2SeqLM.from_pretrained(saved_model).eval()
    sources = ["A man is riding a bike .", "Ein Hund läuft .", "Deux femmes marchent dans la rue ."]
    targets = ["de", "fr", "en"]
    encoded = [
        tokenizer(tag_source(text, target))["input_ids"] for text, target in zip(sources, targets)
    ]
    alone = [generate_ids(model, ids) for ids in encoded]
    batch = tokenizer.pad({"input_ids": encoded}, return_tensors="pt")
    with torch.no_grad():
        together = model.generate(**batch, **GREEDY)
    decode = tokenizer.batch_decode
    assert decode(together, skip_special_tokens=True) == decode(alone, skip_special_tokens=True)
    assert len(set(decode(alone, skip_special_tokens=True))) == 3
    translator = translator_for(saved_model)
    mixed = [{"text": text, "tgt_lang": target} for text, target in zip(sources, targets)]
    expected = [{"translation_text": text} for text in decode(alone, skip_special_tokens=True)]
    assert translator(mixed, batch_size=3, **GREEDY) == expected


def test_pipeline_src_and_tgt_lang_and_task_names_pick_the_tag(saved_model, tokenizer):
    model = AutoModelForSeq2SeqLM.from_pretrained(saved_model).eval()
    sentence = "A man is riding a bike ."
    plain = tokenizer(sentence)["input_ids"]
    expected = {
        target: tokenizer.decode(
            generate_ids(model, [tokenizer.convert_tokens_to_ids(f"<2{target}>")] + plain),
            skip_special_tokens=True,
        )
        for target in ("de", "fr")
    }
    assert expected["de"] != expected["fr"]
    translator = translator_for(saved_model)
    for target in ("de", "fr"):
        assert translator(sentence, src_lang="en", tgt_lang=target, **GREEDY) == [
            {"translation_text": expected[target]}
        ]
        by_task = translator_for(saved_model, f"translation_en_to_{target}")
        assert by_task(sentence, **GREEDY) == [{"translation_text": expected[target]}]
    translator("Ein Hund läuft .", src_lang="de", tgt_lang="fr", **GREEDY)  # zero-shot: allowed


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({}, "needs a target language"),
        ({"tgt_lang": "it"}, "Unsupported target language 'it'"),
        ({"src_lang": "it", "tgt_lang": "de"}, "Unsupported source language 'it'"),
    ],
)
def test_unsupported_directions_list_what_the_model_supports(saved_model, arguments, message):
    translator = translator_for(saved_model)
    with pytest.raises(ValueError, match=message) as error:
        translator("A man .", **arguments, **GREEDY)
    assert "['cs', 'de', 'en', 'fr']" in str(error.value) and "en-fr" in str(error.value)


REMOTE_SCRIPT = WITHOUT_PACKAGE + textwrap.dedent(
    """
    import json, sys
    from transformers import pipeline
    settings = json.loads(sys.argv[1])
    translator = pipeline("translation", model="saved", trust_remote_code=True)
    results = [translator("A man is riding a bike .", src_lang="en", tgt_lang=target, **settings) for target in "de fr".split()]
    results.append(pipeline("translation_en_to_fr", model="saved", trust_remote_code=True)("A man is riding a bike .", **settings))
    try:
        translator("A man .", tgt_lang="it", **settings)
    except ValueError as error:
        results.append(str(error))
    # Tasks the saved config does not list: a zero-shot direction translates, an unknown target is refused.
    results.append(pipeline("translation_de_to_fr", model="saved", trust_remote_code=True)("Ein Hund läuft .", **settings))
    try:
        pipeline("translation_en_to_it", model="saved", trust_remote_code=True)
    except ValueError as error:
        results.append(str(error))
    print(json.dumps(results))
    """  # noqa: E501
)


def test_saved_multilingual_model_translates_without_the_package(saved_model):
    translator = translator_for(saved_model)
    expected = [
        translator("A man is riding a bike .", src_lang="en", tgt_lang=target, **GREEDY)
        for target in "de fr".split()
    ]
    expected.append(expected[1])
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(saved_model.parent / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, json.dumps(GREEDY)],
        cwd=saved_model.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = json.loads(result.stdout.strip().splitlines()[-1])
    assert output[:3] == expected
    assert output[3].startswith("Unsupported target language 'it'")
    assert output[4] == translator_for(saved_model, "translation_de_to_fr")(
        "Ein Hund läuft .", **GREEDY
    )
    assert output[5] == output[3]  # the same list of languages and directions, for the task name


# --- evaluation over many directions --------------------------------------------------------------


def test_group_averages_and_win_ratio_on_known_numbers():
    names = ["en-de", "de-en", "en-fr", "fr-en", "de-fr"]
    groups = direction_groups(names, subset=["en-de", "de-en"])
    assert groups == {
        "out_of_english": ["en-de", "en-fr"],
        "into_english": ["de-en", "fr-en"],
        "zero_shot": ["de-fr"],
        "all": names,
        "subset": ["en-de", "de-en"],
    }
    scores = {
        name: {"sacrebleu": bleu, "off_target_rate": off}
        for name, bleu, off in zip(names, [20, 30, 10, 40, 5], [0.0, 0.0, 0.1, 0.0, 0.5])
    }
    averages = group_averages(scores, groups, metrics=("sacrebleu", "off_target_rate"))
    assert averages["out_of_english"] == {
        "directions": 2,
        "sacrebleu": 15.0,
        "off_target_rate": 0.05,
    }
    assert (
        averages["into_english"]["sacrebleu"] == 35.0
        and averages["zero_shot"]["off_target_rate"] == 0.5
    )
    assert averages["all"]["sacrebleu"] == 21.0 and averages["subset"]["sacrebleu"] == 25.0
    baseline = {"en-de": 19, "de-en": 30, "en-fr": 12, "fr-en": 39, "de-fr": 4, "cs-en": 3}
    assert win_ratio({name: scores[name]["sacrebleu"] for name in names}, baseline) == {
        "directions": 5,
        "wins": 3,
        "ties": 1,
        "win_ratio": 0.6,
    }
    with pytest.raises(ValueError, match="not evaluated"):
        direction_groups(names, subset=["cs-en"])
    with pytest.raises(ValueError, match="none of the evaluated directions"):
        win_ratio({"en-de": 1}, {"de-en": 2})


def test_off_target_detection_on_known_sentences():
    identifier = LanguageIdentifier(LANGUAGES)
    german = ["Ein Mann fährt mit dem Fahrrad durch die Stadt.", "Zwei Hunde spielen im Schnee."]
    french = ["Un homme fait du vélo dans la ville.", "Deux chiens jouent dans la neige."]
    czech = ["Muž jede na kole po městě.", "Dva psi si hrají ve sněhu."]
    assert identifier.classify(german + french + czech) == ["de"] * 2 + ["fr"] * 2 + ["cs"] * 2
    assert off_target_rate(german, "de", identifier) == 0.0
    assert off_target_rate(german + french, "de", identifier) == 0.5
    assert (
        off_target_rate(czech + ["", "A man is riding a bike through the city."], "cs", identifier)
        == 0.5
    )
    with pytest.raises(ValueError, match="does not know"):
        LanguageIdentifier(["en", "xx"])


def test_evaluation_writes_every_direction_with_averages_win_ratio_and_bootstrap(
    saved_model, tmp_path
):
    common = dict(
        model=str(saved_model),
        data=str(MULTI30K),
        split="test_2016_flickr",
        max_pairs=4,
        num_beams=1,
        max_new_tokens=6,
        bootstrap_samples=50,
        language_pairs="en-de,de-en,de-fr",
    )
    baseline = run_evaluation(EvaluationArguments(output_dir=str(tmp_path / "baseline"), **common))
    assert set(baseline["directions"]) == {"en-de", "de-en", "de-fr"}
    assert set(baseline["averages"]) == {"out_of_english", "into_english", "zero_shot", "all"}
    assert (
        baseline["averages"]["zero_shot"]["sacrebleu"]
        == baseline["directions"]["de-fr"]["sacrebleu"]
    )
    assert all(0 <= scores["off_target_rate"] <= 1 for scores in baseline["directions"].values())
    hypotheses = (tmp_path / "baseline" / "de-fr" / "hypotheses.txt").read_text().splitlines()
    assert len(hypotheses) == 4
    # The same model against itself: every direction a tie, and no bootstrap sample where it wins.
    results = run_evaluation(
        EvaluationArguments(
            output_dir=str(tmp_path / "same"),
            average_subset="en-de",
            baseline_results=str(tmp_path / "baseline" / "results.json"),
            **common,
        )
    )
    tie = {"directions": 1, "wins": 0, "ties": 1, "win_ratio": 0.0}
    assert results["win_ratio"] == {
        "baseline": str(tmp_path / "baseline" / "results.json"),
        "metric": "sacrebleu",
        "directions": 3,
        "wins": 0,
        "ties": 3,
        "win_ratio": 0.0,
        "groups": dict.fromkeys(("out_of_english", "into_english", "zero_shot", "subset"), tie),
    }
    assert all(
        scores["paired_bootstrap"]["p_value"] == 1.0 for scores in results["directions"].values()
    )
    assert results["averages"]["subset"]["directions"] == 1
    saved = json.loads((tmp_path / "same" / "results.json").read_text())
    assert saved["directions"].keys() == results["directions"].keys()
    with pytest.raises(ValueError, match="lacks the directions"):
        run_evaluation(
            EvaluationArguments(
                output_dir=str(tmp_path / "x"),
                **{**common, "language_pairs": "en-fr"},
                baseline_results=str(tmp_path / "baseline" / "results.json"),
            )
        )


def test_paired_bootstrap_against_a_clearly_worse_system():
    references = [f"a man number {n} rides a red bike down the street" for n in range(30)]
    worse = ["the the the"] * 30
    result = paired_bootstrap(references, worse, references, num_samples=100)
    assert result["p_value"] == 0.0 and result["system_bleu"] == 100.0


def test_model_card_lists_languages_and_per_direction_results(saved_model, tmp_path):
    directions = {
        name: {"sacrebleu": bleu, "chrf": 50.0, "off_target_rate": off}
        for name, bleu, off in [("en-de", 30.0, 0.01), ("de-fr", 9.5, 0.25)]
    }
    results = {
        "test_set": "multi30k",
        "split": "test_2016_flickr",
        "num_beams": 4,
        "directions": directions,
        "averages": group_averages(directions, direction_groups(list(directions))),
    }
    (tmp_path / "results.json").write_text(json.dumps(results))
    card = model_card(
        AutoModelForSeq2SeqLM.from_pretrained(saved_model),
        "Multi30k",
        read_results(tmp_path / "results.json"),
        repo_id="user/m2m",
    )
    assert 'language:\n- "en"\n- "de"\n- "fr"\n' in card
    assert "| en-de | 30.00 | 50.00 | 1.0% |" in card and "| de-fr | 9.50 | 50.00 | 25.0% |" in card
    assert "| **zero shot** (1) | 9.50 |" in card
    assert 'translator("A man rides a horse.", src_lang="en", tgt_lang="de", num_beams=4)' in card


@pytest.mark.parametrize(
    "name, model_type",
    [("dwlstm-opus100", "dwlstm"), ("residual-prenorm-opus100", "dwlstm-residual")],
)
def test_hub_configs_hold_the_opus100_setting_of_xu_et_al_2024(name, model_type):
    """Xu et al. 2024, §3.5 / Zhang et al. 2020: 6+6 base, a 64k vocabulary, both directions of
    every English pair."""

    config = AutoConfig.from_pretrained(
        Path(__file__).resolve().parents[1] / "hub_configs" / f"{name}-base-6l.json"
    )
    assert (config.model_type, config.d_model, config.encoder_layers, config.decoder_layers) == (
        model_type,
        512,
        6,
        6,
    )
    # 99 languages with English, both ways
    assert config.vocab_size == 64000 and len(set(config.language_pairs)) == 198
    assert {"en-de", "de-en", "en-zu", "zu-en"} <= set(config.language_pairs)
    assert all("en" in pair.split("-") for pair in config.language_pairs)
