"""The scalable data path: tokenisation into Arrow (the tokenizer's own ids, cached), and streaming
(temperature sampling, token batches in a bounded window, exact resume, through the Trainer's
checkpoints)."""

import itertools
import json
import logging

import datasets
import numpy as np
import pytest
import torch
from conftest import MULTI30K, read_multi30k
from safetensors.torch import load_file

from modeling_dwlstm.tokenization_dwlstm import train_joint_bpe_tokenizer
from nmt_toolkit import data, streaming
from nmt_toolkit.data import (
    encode_pairs,
    load_parallel_corpus,
    tokenize_pairs,
    train_corpus_tokenizer,
)
from nmt_toolkit.multilingual import (
    language_tag,
    load_multilingual_corpus,
    temperature_probabilities,
    tokenize_directions,
)
from nmt_toolkit.streaming import (
    STATE_FILE,
    StreamDirection,
    StreamingTokenBatches,
    pair_stream,
    stream_directions,
)
from nmt_toolkit.synthetic_corpus import write_opus100_shaped_corpus
from nmt_toolkit.training import (
    DataArguments,
    ModelArguments,
    TranslationTrainingArguments,
    train_translation,
    training_stream,
)

pytestmark = pytest.mark.usefixtures("one_thread")
LANGUAGES = ("de", "fr", "ru")


@pytest.fixture(scope="module")
def opus(tmp_path_factory):
    """An OPUS-100-shaped corpus of three pairs with English (uneven sizes) and a tokenizer with
    every tag."""
    root = tmp_path_factory.mktemp("opus")
    sizes = write_opus100_shaped_corpus(
        root / "corpus", 1500, vocabulary_size=300, languages=LANGUAGES
    )
    corpus = load_multilingual_corpus(
        [(str(root / "corpus"), [("en", "de"), ("en", "fr"), ("en", "ru")])]
    )
    tags = [language_tag(language) for language in ("en", *LANGUAGES)]
    tokenizer = train_joint_bpe_tokenizer(
        list(corpus["source"]) + list(corpus["target"]), 700, tags
    )
    tokenizer.save_pretrained(root / "tokenizer")
    return root / "corpus", tokenizer, sizes


def directions_of(root, split="train"):
    pairs = [(a, b) for language in LANGUAGES for a, b in (("en", language), (language, "en"))]
    return stream_directions([(str(root), pairs)], split)


def batches(root, tokenizer, buffer_pairs=400, **options) -> StreamingTokenBatches:
    return StreamingTokenBatches(
        pair_stream(directions_of(root), temperature=5, seed=3),
        tokenizer,
        max_tokens=300,
        add_language_tag=True,
        buffer_pairs=buffer_pairs,
        seed=3,
        **options,
    )


# --- Tokenisation ---------------------------------------------------------------------------------


def old_tokenize_pairs(dataset, tokenizer, source_lang, target_lang, max_length, prefix=""):
    """The reference: the Python tokenizer's call per batch, then a filter over every row."""

    def encode(batch):
        return tokenizer(
            [prefix + pair[source_lang] for pair in batch["translation"]],
            text_target=[pair[target_lang] for pair in batch["translation"]],
        )

    tokenized = dataset.map(encode, batched=True, remove_columns=["translation"])
    return tokenized.filter(
        lambda pair: len(pair["input_ids"]) <= max_length and len(pair["labels"]) <= max_length
    )


def test_fast_tokenisation_gives_the_ids_of_the_tokenizers_own_call(tmp_path):
    corpus = load_parallel_corpus(MULTI30K, "en", "de", max_pairs=600)
    tokenizer = train_corpus_tokenizer([corpus], ["en", "de"], merges=300, language_tags=["<2de>"])
    odd = [
        " leading space",
        "tab\there",
        "U+2028\u2028inside",
        "<2de> already tagged",
        "\u00e9t\u00e9 \u4e2d\u6587 \U0001f600",
    ]
    sources, targets = (
        read_multi30k("val", "en", 50) + odd,
        read_multi30k("val", "de", 50) + odd[::-1],
    )
    table, keep = encode_pairs(tokenizer, sources, targets)
    expected = tokenizer(sources, text_target=targets)
    assert keep == [True] * len(sources)
    assert table.column("input_ids").to_pylist() == expected["input_ids"]
    assert table.column("labels").to_pylist() == expected["labels"]
    assert table.column("attention_mask").to_pylist() == expected["attention_mask"]

    new = tokenize_pairs(
        corpus, tokenizer, "en", "de", max_length=20, add_language_tag=True, num_proc=2
    )
    old = old_tokenize_pairs(corpus, tokenizer, "en", "de", 20, prefix="<2de> ")
    assert 0 < len(new) == len(old) < len(corpus)
    for column in ("input_ids", "attention_mask", "labels"):
        assert new[column] == old[column], column

    multilingual = load_multilingual_corpus(
        [(str(MULTI30K), [("en", "de"), ("de", "en")])], split="val", max_pairs=40
    )
    tagged = train_corpus_tokenizer(
        [corpus], ["en", "de"], merges=300, language_tags=["<2de>", "<2en>"]
    )
    directions = tokenize_directions(multilingual, tagged, max_length=None)
    first = multilingual[40]  # the first de-en pair
    assert directions[40]["input_ids"] == tagged(f"<2en> {first['source']}")["input_ids"]
    assert directions[40]["direction"] == "de-en" and directions[0]["direction"] == "en-de"


def test_local_corpora_and_their_tokenisation_are_cached_and_reused(tmp_path, monkeypatch, caplog):
    for language, sentences in (
        ("en", ["a house .", "a dog ."] * 50),
        ("de", ["ein Haus .", "ein Hund ."] * 50),
    ):
        (tmp_path / f"train.{language}").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    corpus = load_parallel_corpus(tmp_path, "en", "de")
    tokenizer = train_corpus_tokenizer([corpus], ["en", "de"], merges=20)
    assert corpus.cache_files and corpus.cache_files[0]["filename"].startswith(
        str(data.corpus_cache_dir())
    )
    first = tokenize_pairs(corpus, tokenizer, "en", "de")

    calls = []
    monkeypatch.setattr(data, "_folder_pairs", lambda *args: calls.append(args) or iter([]))
    monkeypatch.setattr(data, "encode_pairs", lambda *args: calls.append(args))
    again = load_parallel_corpus(tmp_path, "en", "de")
    with caplog.at_level(logging.INFO, logger="nmt_toolkit.data"):
        second = tokenize_pairs(again, tokenizer, "en", "de")
    assert calls == [] and second["input_ids"] == first["input_ids"]
    assert second.cache_files == first.cache_files
    assert "Dropped 0 of 100 pairs" in caplog.text

    (tmp_path / "train.de").write_text(
        "ein Haus .\nein Hund .\n" * 49 + "eine Katze .\nein Hund .\n", encoding="utf-8"
    )
    monkeypatch.undo()
    changed = load_parallel_corpus(tmp_path, "en", "de")  # another size and time: read again
    assert changed[98]["translation"]["de"] == "eine Katze ."


# --- Streaming ------------------------------------------------------------------------------------


def test_directions_are_counted_and_misaligned_files_refused_before_training(opus, tmp_path):
    root, _, sizes = opus
    counted = {direction.name: direction.pairs for direction in directions_of(root)}
    assert counted == {
        f"{a}-{b}": sizes["-".join(sorted((a, b)))]
        for a, b in [
            (a, b) for language in LANGUAGES for a, b in (("en", language), (language, "en"))
        ]
    }
    (tmp_path / "train.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "train.de").write_text("eins\nzwei\n")
    with pytest.raises(
        ValueError, match="Line counts differ: .*train.en has 3 lines, .*train.de has 2"
    ):
        stream_directions([(str(tmp_path), [("en", "de")])])


def test_temperature_sampling_draws_directions_in_their_proportions(tmp_path):
    sizes = {"aa": 2000, "bb": 200, "cc": 20}
    directions = []
    for language, size in sizes.items():
        for side in (language, "en"):
            (tmp_path / f"train.{side}").write_text(
                "".join(f"{language} {index}\n" for index in range(size))
            )
        files = (tmp_path / f"{language}.{language}", tmp_path / f"{language}.en")
        for side, file in zip((language, "en"), files):
            (tmp_path / f"train.{side}").rename(file)
        directions.append(StreamDirection(language, "en", size, files=tuple(map(str, files))))
    drawn = [
        row["direction"]
        for row in itertools.islice(pair_stream(directions, temperature=5, seed=0), 20_000)
    ]
    expected = temperature_probabilities(
        {f"{language}-en": size for language, size in sizes.items()}, 5
    )
    for name, probability in expected.items():
        assert drawn.count(name) / len(drawn) == pytest.approx(probability, abs=0.015), name
    # the small direction is drawn far above its share of the data
    assert expected["cc-en"] > 0.15 > 20 / 2220


def test_resumed_stream_yields_the_batches_of_an_uninterrupted_one(opus):
    root, tokenizer, _ = opus
    straight = list(itertools.islice(batches(root, tokenizer), 120))
    assert all(
        len(batch) * max(max(len(row["input_ids"]), len(row["labels"])) for row in batch) <= 300
        for batch in straight
    )
    for stop in (1, 37, 95):  # inside the first window, and windows later
        interrupted = batches(root, tokenizer)
        before = list(itertools.islice(interrupted, stop))
        state = json.loads(json.dumps(interrupted.state_dict()))  # as saved in a checkpoint
        resumed = batches(root, tokenizer)
        resumed.load_state_dict(state)
        assert before + list(itertools.islice(resumed, 120 - stop)) == straight, stop
    assert state["window"] > 0 and state["stream"] is not None
    other = batches(root, tokenizer, buffer_pairs=500)
    with pytest.raises(
        ValueError, match="belongs to another stream \\(buffer_pairs 400 then, 500 now\\)"
    ):
        other.load_state_dict(state)


def test_two_processes_share_one_sequence_and_one_position(opus):
    root, tokenizer, _ = opus
    single = list(itertools.islice(batches(root, tokenizer), 60))
    ranks = [batches(root, tokenizer, num_replicas=2, rank=rank) for rank in (0, 1)]
    shares = [list(itertools.islice(rank, 30)) for rank in ranks]
    assert [batch for pair in zip(*shares) for batch in pair] == single
    assert ranks[0].state_dict() == ranks[1].state_dict()


def test_the_stream_is_read_lazily_in_bounded_windows(opus, monkeypatch):
    root, tokenizer, _ = opus
    read = []
    original = StreamingTokenBatches._read_window

    def counting(self, examples):
        table = original(self, examples)
        read.append(None if table is None else len(table))
        return table

    monkeypatch.setattr(StreamingTokenBatches, "_read_window", counting)
    stream = batches(root, tokenizer, buffer_pairs=250)
    # one window read for the first batch, not the corpus
    assert next(iter(stream)) and read == [250]
    list(itertools.islice(iter(stream), 200))
    assert stream.dropped == 0 and len(read) > 3 and max(read) == 250


def test_long_pairs_are_dropped_and_tags_put_in_front(opus):
    root, tokenizer, _ = opus
    stream = StreamingTokenBatches(
        pair_stream(directions_of(root), seed=1),
        tokenizer,
        max_tokens=400,
        max_length=12,
        add_language_tag=True,
        buffer_pairs=300,
        seed=1,
    )
    rows = [row for batch in itertools.islice(stream, 40) for row in batch]
    assert stream.dropped > 0 and all(
        len(row["input_ids"]) <= 12 and len(row["labels"]) <= 12 for row in rows
    )
    tag_ids = {
        tokenizer.convert_tokens_to_ids(language_tag(language)) for language in ("en", *LANGUAGES)
    }
    assert all(row["input_ids"][0] in tag_ids for row in rows)
    window = stream.first_window()
    assert isinstance(window, datasets.Dataset) and set(window.column_names) == {
        "input_ids",
        "labels",
        "direction",
    }


def test_streaming_training_resumes_to_the_weights_of_an_uninterrupted_run(opus, tmp_path):
    root, tokenizer, _ = opus
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    (tmp_path / "tiny.json").write_text(
        json.dumps(
            {
                "model_type": "dwlstm",
                "d_model": 16,
                "ffn_dim": 32,
                "encoder_layers": 1,
                "decoder_layers": 1,
                "encoder_attention_heads": 2,
                "decoder_attention_heads": 2,
                "dropout": 0.1,
                "max_position_embeddings": 128,
            }
        )
    )

    def run(output, steps, **extra):
        model_args = ModelArguments(str(tmp_path / "tiny.json"), str(tmp_path / "tokenizer"))
        data_args = DataArguments(
            dataset=str(root),
            language_pairs="all",
            streaming=True,
            stream_buffer_pairs=300,
            max_tokens=200,
            sampling_temperature=5,
        )
        training_args = TranslationTrainingArguments(
            output_dir=str(tmp_path / output),
            max_steps=steps,
            save_steps=3,
            warmup_steps=2,
            learning_rate=3e-3,
            gradient_accumulation_steps=2,
            logging_steps=1,
            use_cpu=True,
            disable_tqdm=True,
            seed=0,
            **extra,
        )
        return train_translation(model_args, data_args, training_args)

    run("straight", 6)
    run("killed", 3)
    state = json.loads((tmp_path / "killed" / "checkpoint-3" / STATE_FILE).read_text())
    assert state["batches_done"] + state["window"] > 0
    manifest = json.loads((tmp_path / "killed" / "checkpoint-3" / "checksums.json").read_text())
    assert STATE_FILE in json.dumps(manifest)
    run("killed", 6, resume_from_checkpoint="last")
    straight, resumed = (
        load_file(tmp_path / name / "model.safetensors") for name in ("straight", "killed")
    )
    for name in straight:
        torch.testing.assert_close(resumed[name], straight[name], rtol=0, atol=0, msg=name)
    (tmp_path / "killed" / "checkpoint-6" / STATE_FILE).unlink()
    with pytest.raises(ValueError, match="checksums|stream_state.json"):
        run("killed", 9, resume_from_checkpoint="last")
    assert np.isfinite(
        json.loads((tmp_path / "straight" / "trainer_state.json").read_text())["log_history"][-1][
            "train_loss"
        ]
    )


def test_settings_a_stream_cannot_honour_are_refused_before_reading(opus, tmp_path):
    with pytest.raises(
        ValueError, match="a stream has no such prefix: drop --streaming, or --max_train_pairs"
    ):
        DataArguments(
            dataset=str(opus[0]), language_pairs="all", streaming=True, max_train_pairs=100
        )
    with pytest.raises(
        ValueError, match="--stream_buffer_pairs sizes the windows of a stream: add --streaming"
    ):
        DataArguments(dataset=str(opus[0]), language_pairs="all", stream_buffer_pairs=500)
    with pytest.raises(ValueError, match="--stream_buffer_pairs must be a positive integer, got 0"):
        DataArguments(
            dataset=str(opus[0]), language_pairs="all", streaming=True, stream_buffer_pairs=0
        )
    data_args = DataArguments(dataset=str(opus[0]), language_pairs="all", streaming=True)
    training_args = TranslationTrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, dataloader_num_workers=2
    )
    with pytest.raises(ValueError, match="leave --dataloader_num_workers at 0"):
        training_stream(
            [(str(opus[0]), [("en", "de")])],
            opus[1],
            data_args,
            training_args,
            add_language_tag=True,
        )


def test_a_hub_corpus_streams_with_its_empty_pairs_dropped(monkeypatch):
    rows = [
        {"translation": {"de": f"Satz {index}", "en": f"sentence {index}" if index % 3 else " "}}
        for index in range(12)
    ]
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    hub = datasets.Dataset.from_list(rows, features=features).to_iterable_dataset()
    asked = []
    monkeypatch.setattr(
        datasets, "load_dataset", lambda *args, **kwargs: asked.append((args, kwargs)) or hub
    )
    monkeypatch.setattr(streaming, "_hub_size", lambda repository, config, split: 12)
    (direction,) = stream_directions([("wmt14", [("en", "de")])], split="train")
    assert direction.hub == ("wmt/wmt14", "de-en", "train") and direction.pairs == 12
    pairs = list(itertools.islice(pair_stream([direction]), 10))
    assert asked[0][1] == {"split": "train", "streaming": True}
    assert pairs[:2] == [
        {"source": "sentence 1", "target": "Satz 1", "direction": "en-de"},
        {"source": "sentence 2", "target": "Satz 2", "direction": "en-de"},
    ]
    # 8 non-empty pairs, then read again
    assert len(pairs) == 10 and pairs[8]["source"] == "sentence 1"
