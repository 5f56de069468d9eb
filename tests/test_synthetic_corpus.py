"""Synthetic corpora of a real corpus's shape: the files' schema, the length distribution, the
Zipfian words, OPUS-100's size profile, and the script."""

import gzip
import json
import time

import numpy as np
import pytest
from conftest import MULTI30K, run_as_main, run_script

from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.multilingual import parse_sources
from nmt_toolkit.synthetic_corpus import (
    ZipfVocabulary,
    opus100_pair_sizes,
    read_length_pairs,
    synthetic_pairs,
    write_opus100_shaped_corpus,
    write_parallel_corpus,
)


@pytest.fixture(scope="module")
def multi30k_lengths():
    return read_length_pairs(MULTI30K, ("en", "de"))


def read_gzip_lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


def test_aligned_files_and_json_lines_in_the_hubs_schema(tmp_path, multi30k_lengths, monkeypatch):
    counts = write_parallel_corpus(
        tmp_path / "a",
        ("en", "de"),
        {"train": 300, "val": 20},
        multi30k_lengths,
        formats=("text", "jsonl"),
        vocabulary_size=500,
        seed=3,
    )
    assert counts == {"train": 300, "val": 20}
    english, german = (
        read_gzip_lines(tmp_path / "a" / "train.en.gz"),
        read_gzip_lines(tmp_path / "a" / "train.de.gz"),
    )
    records = [json.loads(line) for line in read_gzip_lines(tmp_path / "a" / "train.jsonl.gz")]
    assert records[0] == {"translation": {"en": english[0], "de": german[0]}}
    assert [record["translation"]["de"] for record in records] == german and len(english) == 300
    assert all(text and text[0].isupper() and text.endswith(".") for text in english + german)
    corpus = load_parallel_corpus(tmp_path / "a", "en", "de", split="val")
    assert (
        len(corpus) == 20
        and corpus[0]["translation"]["en"] == read_gzip_lines(tmp_path / "a" / "val.en.gz")[0]
    )
    # written again a day later: the same bytes (gzip would put the time in its header)
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 86400)
    write_parallel_corpus(
        tmp_path / "b", ("en", "de"), {"train": 300}, multi30k_lengths, vocabulary_size=500, seed=3
    )
    assert (tmp_path / "b" / "train.de.gz").read_bytes() == (
        tmp_path / "a" / "train.de.gz"
    ).read_bytes()
    assert not list(tmp_path.glob("*/*.tmp"))
    with pytest.raises(ValueError, match="'text' and/or 'jsonl'"):
        write_parallel_corpus(
            tmp_path / "c", ("en", "de"), {"train": 3}, multi30k_lengths, formats=("csv",)
        )


def test_sentence_lengths_are_drawn_from_the_length_source(multi30k_lengths):
    vocabularies = {language: ZipfVocabulary(language, 300) for language in ("en", "de")}
    real = {tuple(pair) for pair in multi30k_lengths.tolist()}

    def word_counts(**stretch):
        chunks = synthetic_pairs(
            3000, ("en", "de"), vocabularies, multi30k_lengths, seed=1, **stretch
        )
        return np.array(
            [
                (len(source.split()), len(target.split()))
                for sources, targets in chunks
                for source, target in zip(sources, targets)
            ]
        )

    drawn = word_counts()
    assert {tuple(pair) for pair in drawn.tolist()} <= real  # each pair's lengths are a real pair's
    np.testing.assert_allclose(drawn.mean(axis=0), multi30k_lengths.mean(axis=0), rtol=0.05)
    stretched = word_counts(length_scale=2.0, length_spread=0.3)
    np.testing.assert_allclose(
        np.median(stretched, axis=0), 2 * np.median(multi30k_lengths, axis=0), rtol=0.15
    )
    assert stretched.max() > 2 * multi30k_lengths.max() * 0.9  # the spread gives a longer tail


def test_words_are_zipfian_distinct_and_frequent_ones_short():
    vocabulary = ZipfVocabulary("de", 2000, seed=0)
    assert len(set(vocabulary.words)) == 2000
    words = vocabulary.draw(200_000, np.random.default_rng(0))
    index = {word: rank for rank, word in enumerate(vocabulary.words)}
    counts = np.bincount([index[word] for word in words], minlength=2000)
    expected = np.diff(np.concatenate([[0.0], vocabulary.cumulative]))
    np.testing.assert_allclose(counts[:5] / len(words), expected[:5], rtol=0.05)
    assert counts[0] / counts[9] == pytest.approx(10**1.07, rel=0.15)  # rank 1 vs rank 10: r^-s
    lengths = np.array([len(word) for word in vocabulary.words])
    assert lengths[:100].mean() < lengths[-100:].mean()
    assert any(character in "äöüßéèàçñøåłšžčőűîâêœæ" for character in "".join(vocabulary.words))
    russian = ZipfVocabulary("ru", 50)
    assert all("\u0430" <= character <= "\u044f" for word in russian.words for character in word)


def test_opus100_sizes_have_the_papers_shape_at_any_scale():
    sizes = np.array(list(opus100_pair_sizes().values()))
    assert len(sizes) == 99 and abs(sizes.sum() - 55_000_000) < 100
    assert ((sizes >= 1_000_000).sum(), (sizes >= 100_000).sum(), (sizes >= 10_000).sum()) == (
        44,
        73,
        95,
    )
    small = opus100_pair_sizes(2_000_000)
    assert abs(sum(small.values()) - 2_000_000) < 100 and list(small) == list(opus100_pair_sizes())
    np.testing.assert_allclose(np.array(list(small.values())) / 2e6, sizes / 55e6, atol=1e-4)


def test_opus100_shaped_corpus_reads_as_pair_folders(tmp_path):
    sizes = write_opus100_shaped_corpus(
        tmp_path, 400, vocabulary_size=300, languages=("de", "fr", "ru"), validation_pairs=5
    )
    assert sorted(sizes) == ["de-en", "en-fr", "en-ru"] and sum(sizes.values()) == 400
    first = json.loads(read_gzip_lines(tmp_path / "en-fr" / "train.jsonl.gz")[0])
    assert sorted(first["translation"]) == ["en", "fr"]
    corpus = load_parallel_corpus(tmp_path, "fr", "en")
    assert len(corpus) == sizes["en-fr"] and corpus[0]["translation"] == first["translation"]
    assert len(load_parallel_corpus(tmp_path, "en", "ru", split="validation")) == 5
    ((_, directions),) = parse_sources(str(tmp_path), "all")
    assert sorted(directions) == [
        ("de", "en"),
        ("en", "de"),
        ("en", "fr"),
        ("en", "ru"),
        ("fr", "en"),
        ("ru", "en"),
    ]
    with pytest.raises(
        ValueError, match="no subfolder en-it for the pair it-en; its pairs: \\['de-en', 'en-fr'"
    ):
        load_parallel_corpus(tmp_path, "it", "en")


def test_script_writes_both_shapes(tmp_path):
    run_script(
        "make_synthetic_corpus",
        "--output_dir",
        tmp_path / "wmt",
        "--train_pairs",
        200,
        "--validation_pairs",
        10,
        "--lengths_from",
        MULTI30K,
        "--length_scale",
        2,
        "--formats",
        "text",
        "jsonl",
        "--vocabulary_size",
        300,
    )
    assert sorted(path.name for path in (tmp_path / "wmt").iterdir()) == [
        "corpus.json",
        "train.de.gz",
        "train.en.gz",
        "train.jsonl.gz",
        "val.de.gz",
        "val.en.gz",
        "val.jsonl.gz",
    ]
    assert json.loads((tmp_path / "wmt" / "corpus.json").read_text())["splits"] == {
        "train": 200,
        "val": 10,
    }
    run_script(
        "make_synthetic_corpus",
        "--output_dir",
        tmp_path / "opus",
        "--opus100_shaped",
        "--train_pairs",
        300,
        "--languages",
        "de",
        "fr",
        "--vocabulary_size",
        300,
    )
    assert sorted(path.name for path in (tmp_path / "opus").iterdir()) == [
        "corpus.json",
        "de-en",
        "en-fr",
    ]
    with pytest.raises(ValueError, match="is not empty"):
        run_script("make_synthetic_corpus", "--output_dir", tmp_path / "wmt", "--train_pairs", 5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--opus100_shaped", "--length_scale", "2"],
            "--length_scale shape a one-direction corpus",
        ),
        (
            ["--opus100_shaped", "--source_lang", "fr", "--formats", "jsonl"],
            "--source_lang, --formats shape a one-dir",
        ),
        (["--opus100_shaped", "--languages", "de", "en"], "each once; got en"),
        (["--opus100_shaped", "--languages", "de", "fr", "de"], "each once; got repeats of de"),
        (["--languages", "de", "fr"], "--languages is for --opus100_shaped"),
        (["--source_lang", "de"], "--source_lang and --target_lang are both 'de'"),
        (["--length_scale", "0"], "--length_scale must be positive"),
        (["--length_spread", "-0.5"], "--length_spread must be 0 or more"),
        (["--validation_pairs", "-1"], "--validation_pairs: must be zero or a positive integer"),
    ],
)
def test_script_refuses_flags_it_would_ignore_or_cannot_use_before_writing(tmp_path, argv, message):
    code, stderr = run_as_main(
        "make_synthetic_corpus", "--output_dir", tmp_path / "out", "--train_pairs", 10, *argv
    )
    assert code == 2 and message in stderr, stderr
    assert not (tmp_path / "out").exists()


def test_train_tokenizer_learns_from_a_seeded_sample_of_pairs(tmp_path, multi30k_lengths, caplog):
    write_parallel_corpus(
        tmp_path / "corpus", ("en", "de"), {"train": 300}, multi30k_lengths, vocabulary_size=400
    )
    common = [
        "--dataset",
        tmp_path / "corpus",
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--merges",
        60,
    ]
    with caplog.at_level("INFO"):
        for name in ("a", "b"):
            run_script(
                "train_tokenizer", *common, "--sample_pairs", 100, "--output_dir", tmp_path / name
            )
        run_script(
            "train_tokenizer",
            *common,
            "--sample_pairs",
            100,
            "--seed",
            1,
            "--output_dir",
            tmp_path / "c",
        )
        run_script(
            "train_tokenizer", *common, "--sample_pairs", 1000, "--output_dir", tmp_path / "all"
        )
    assert caplog.text.count("BPE sample: 100 of 300 pairs.") == 3
    assert "BPE on all 300 pairs: --sample_pairs 1000 is not fewer." in caplog.text
    vocabulary = {
        name: json.loads((tmp_path / name / "tokenizer.json").read_text())["model"]["vocab"]
        for name in ("a", "b", "c")
    }
    # seeded: the same draw
    assert vocabulary["a"] == vocabulary["b"] and vocabulary["a"] != vocabulary["c"]
    code, stderr = run_as_main(
        "train_tokenizer",
        "--dataset",
        tmp_path / "corpus",
        "--language_pairs",
        "en-de",
        "--sample_pairs",
        100,
        "--output_dir",
        tmp_path / "multi",
    )
    assert code == 2 and "--sample_pairs is for one direction" in stderr
