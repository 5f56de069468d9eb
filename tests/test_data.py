"""Parallel corpora from every source (Hub schema, Multi30k folder, JSON lines), bad inputs, length
filter, BPE."""

import gzip
import json
import logging

import datasets
import pytest
from conftest import MULTI30K, read_multi30k
from transformers import AutoTokenizer

from modeling_dwlstm.tokenization_dwlstm import SPECIAL_TOKENS
from nmt_toolkit import data
from nmt_toolkit.data import load_parallel_corpus, tokenize_pairs, train_corpus_tokenizer


def translation_features(*languages):
    return datasets.Features({"translation": datasets.Translation(languages=list(languages))})


# --- Local folders: Multi30k itself ---------------------------------------------------------------


def test_multi30k_folder_gives_the_hub_schema_in_file_order():
    corpus = load_parallel_corpus(MULTI30K, "en", "de", split="val")
    english, german = read_multi30k("val", "en", 1014), read_multi30k("val", "de", 1014)
    assert corpus.features == translation_features("en", "de")
    assert len(corpus) == 1014
    assert corpus[0]["translation"] == {"en": english[0], "de": german[0]}
    assert corpus[-1]["translation"] == {"en": english[-1], "de": german[-1]}
    reverse = load_parallel_corpus(MULTI30K, "cs", "fr", split="test_2016_flickr", max_pairs=5)
    assert len(reverse) == 5
    assert reverse[4]["translation"]["fr"] == read_multi30k("test_2016_flickr", "fr", 5)[4]


def write_lines(path, lines, compress=False):
    text = "".join(line + "\n" for line in lines)
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def test_plain_and_gzipped_files_mix(tmp_path):
    write_lines(tmp_path / "train.en", ["a house", "a dog"])
    write_lines(tmp_path / "train.de.gz", ["ein Haus", "ein Hund"], compress=True)
    corpus = load_parallel_corpus(tmp_path, "de", "en")
    assert corpus["translation"] == [
        {"de": "ein Haus", "en": "a house"},
        {"de": "ein Hund", "en": "a dog"},
    ]


@pytest.mark.parametrize(
    "english,german,message",
    [
        (
            ["one", "two", "three"],
            ["eins", "zwei"],
            r"train\.de ends before line 3, but .*train\.en has a line 3",
        ),
        (["one"], ["eins", "zwei"], r"train\.en ends before line 2"),
        (
            ["one", "two", "three"],
            ["eins", "", "drei"],
            r"train\.de, line 2: the sentence is empty",
        ),
        (
            ["one", "  ", "three"],
            ["eins", "zwei", "drei"],
            r"train\.en, line 2: the sentence is empty",
        ),
    ],
)
def test_misaligned_or_empty_lines_name_the_file_and_line(tmp_path, english, german, message):
    write_lines(tmp_path / "train.en", english)
    write_lines(tmp_path / "train.de", german)
    with pytest.raises(ValueError, match=message):
        load_parallel_corpus(tmp_path, "en", "de")


def test_unknown_language_missing_split_and_unreadable_files(tmp_path):
    write_lines(tmp_path / "train.en", ["one", "two"])
    write_lines(tmp_path / "train.de", ["eins", "zwei"])
    with pytest.raises(
        ValueError, match=r"Unknown language 'fr' for split 'train'.*\['de', 'en'\]"
    ):
        load_parallel_corpus(tmp_path, "en", "fr")
    with pytest.raises(ValueError, match=r"No split 'val'.*\['train'\]"):
        load_parallel_corpus(tmp_path, "en", "de", split="val")
    with pytest.raises(ValueError, match="language code"):
        load_parallel_corpus(tmp_path, "English", "de")
    (tmp_path / "bad.en").write_bytes(b"fine\n\xff\xfe broken\n")
    write_lines(tmp_path / "bad.de", ["gut", "kaputt"])
    with pytest.raises(ValueError, match=r"bad\.en, line 2: not valid UTF-8"):
        load_parallel_corpus(tmp_path, "en", "de", split="bad")
    (tmp_path / "gz.en.gz").write_bytes(b"this is not gzip data")
    write_lines(tmp_path / "gz.de", ["eins"])
    with pytest.raises(ValueError, match=r"gz\.en\.gz: cannot be read after line 0"):
        load_parallel_corpus(tmp_path, "en", "de", split="gz")


# --- JSON lines -----------------------------------------------------------------------------------


def test_json_lines_in_hub_and_flat_form(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [
        {"translation": {"en": "a cat", "de": "eine Katze"}},
        {"en": "a dog", "de": "ein Hund", "id": 7},
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n", encoding="utf-8")
    corpus = load_parallel_corpus(path, "de", "en")
    assert corpus.features == translation_features("de", "en")
    assert corpus["translation"] == [
        {"de": "eine Katze", "en": "a cat"},
        {"de": "ein Hund", "en": "a dog"},
    ]


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"en": "a cat", "de": ', r"line 2: not valid JSON"),
        (
            '{"en": "a cat", "fr": "un chat"}',
            r"line 2: no 'de' side \(unknown language\?\); the line has \['en', 'fr'\]",
        ),
        ('{"en": "a cat", "de": ""}', r"line 2: the 'de' side is empty"),
        ('["a cat", "eine Katze"]', r"line 2: expected an object"),
    ],
)
def test_bad_json_lines_name_the_line(tmp_path, line, message):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"en": "a dog", "de": "ein Hund"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_parallel_corpus(path, "en", "de")
    with pytest.raises(ValueError, match="missing.jsonl"):
        load_parallel_corpus(tmp_path / "missing.jsonl", "en", "de")


# --- The Hub, with a local dataset of the Hub's exact schema and split names ----------------------


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """`datasets.load_dataset` answered from DatasetDicts saved to disk, as wmt14 / wmt15 / opus-100
    lay them out."""
    stored = {
        ("wmt/wmt14", "de-en"): ("de", "en"),
        ("wmt/wmt15", "cs-en"): ("cs", "en"),
        ("Helsinki-NLP/opus-100", "en-fr"): ("en", "fr"),
    }
    calls = []
    for (repository, config), languages in stored.items():
        splits = {}
        for split, count in (("train", 6), ("validation", 3), ("test", 2)):
            rows = [
                {language: f"{split} {number} {language}" for language in languages}
                for number in range(count)
            ]
            if split == "train":
                rows[2][languages[0]] = ""  # the Hub's WMT training data has a few empty sides
            splits[split] = datasets.Dataset.from_dict(
                {"translation": rows}, features=translation_features(*languages)
            )
        datasets.DatasetDict(splits).save_to_disk(tmp_path / repository / config)

    def load_dataset(repository, config, split):
        calls.append((repository, config, split))
        if (repository, config) not in stored:
            raise FileNotFoundError(f"Couldn't find '{repository}' on the Hugging Face Hub")
        return datasets.load_from_disk(str(tmp_path / repository / config))[split]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    # no probe of the (absent) Hub
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    return calls


@pytest.mark.parametrize(
    "name,source_lang,target_lang,location",
    [
        ("wmt14", "en", "de", ("wmt/wmt14", "de-en")),
        ("wmt14", "de", "en", ("wmt/wmt14", "de-en")),
        ("wmt15", "cs", "en", ("wmt/wmt15", "cs-en")),
        ("opus100", "fr", "en", ("Helsinki-NLP/opus-100", "en-fr")),
        ("Helsinki-NLP/opus-100", "en", "fr", ("Helsinki-NLP/opus-100", "en-fr")),
    ],
)
def test_hub_corpora_by_name_with_their_splits(
    fake_hub, caplog, name, source_lang, target_lang, location
):
    with caplog.at_level(logging.INFO, logger="nmt_toolkit.data"):
        train = load_parallel_corpus(name, source_lang, target_lang, split="train")
    assert fake_hub[-1] == (*location, "train")
    assert len(train) == 5 and "Dropped 1 of 6 pairs" in caplog.text
    assert train[0]["translation"][source_lang] == f"train 0 {source_lang}"
    assert train[0]["translation"][target_lang] == f"train 0 {target_lang}"
    assert len(load_parallel_corpus(name, source_lang, target_lang, split="validation")) == 3
    assert len(load_parallel_corpus(name, source_lang, target_lang, split="test", max_pairs=1)) == 1


def test_hub_errors_are_clear(fake_hub):
    with pytest.raises(ValueError, match="English with another language"):
        load_parallel_corpus("wmt14", "de", "fr")
    with pytest.raises(ValueError, match="Unknown language 'de' for wmt/wmt15"):
        load_parallel_corpus("wmt15", "de", "en", hub_config="cs-en")
    with pytest.raises(
        ValueError, match="neither a local folder, a JSON-lines file nor a reachable Hub dataset"
    ):
        load_parallel_corpus("someone/no-such-corpus", "en", "de")


# --- Tokenization, the length filter and the joint BPE --------------------------------------------


@pytest.fixture(scope="module")
def multi30k_tokenizer():
    corpus = load_parallel_corpus(MULTI30K, "en", "de", max_pairs=1000)
    return corpus, train_corpus_tokenizer(
        [corpus], ["en", "de"], merges=300, language_tags=["<2en>", "<2de>"]
    )


def test_joint_bpe_has_the_requested_merges_and_reserved_tags(multi30k_tokenizer, tmp_path):
    corpus, tokenizer = multi30k_tokenizer
    characters = {
        character for pair in corpus["translation"] for text in pair.values() for character in text
    }
    alphabet = (characters - {" "}) | {"\u2581"}
    assert len(tokenizer) == len(SPECIAL_TOKENS) + 2 + len(alphabet) + 300
    assert tokenizer.convert_tokens_to_ids(["<2en>", "<2de>"]) == [4, 5]
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    text = corpus[3]["translation"]["de"]
    assert reloaded("<2de> " + text)["input_ids"] == [5, *tokenizer(text)["input_ids"]]
    assert reloaded.decode(reloaded(text)["input_ids"], skip_special_tokens=True) == text


def test_tokenize_pairs_drops_long_pairs_and_logs_the_count(multi30k_tokenizer, caplog):
    corpus, tagged_tokenizer = multi30k_tokenizer
    tokenizer = train_corpus_tokenizer([corpus], ["en", "de"], merges=300)  # bilingual: no tags
    assert "<2de>" not in tokenizer.get_vocab()
    lengths = [
        max(len(tokenizer(pair["en"])["input_ids"]), len(tokenizer(pair["de"])["input_ids"]))
        for pair in corpus["translation"][:200]
    ]
    limit = sorted(lengths)[150]
    expected = sum(length <= limit for length in lengths)
    with caplog.at_level(logging.INFO, logger="nmt_toolkit.data"):
        tokenized = tokenize_pairs(
            corpus.select(range(200)), tokenizer, "en", "de", max_length=limit
        )
    assert len(tokenized) == expected < 200
    assert f"Dropped {200 - expected} of 200 pairs longer than {limit} tokens" in caplog.text
    first = corpus[0]["translation"]
    assert tokenized[0]["input_ids"] == tokenizer(first["en"])["input_ids"]
    assert tokenized[0]["labels"] == tokenizer(first["de"])["input_ids"]
    tagged = tokenize_pairs(
        corpus.select(range(3)), tagged_tokenizer, "en", "de", add_language_tag=True
    )
    assert tagged[0]["input_ids"] == [5, *tagged_tokenizer(first["en"])["input_ids"]]
    with pytest.raises(ValueError, match="no language tag '<2fr>'"):
        tokenize_pairs(corpus.select(range(3)), tagged_tokenizer, "de", "fr", add_language_tag=True)
    with pytest.raises(ValueError, match="reserves the language tag '<2de>'.*--add_language_tag"):
        tokenize_pairs(corpus.select(range(3)), tagged_tokenizer, "en", "de")
    with pytest.raises(ValueError, match="Every one of the 3 pairs is longer"):
        tokenize_pairs(corpus.select(range(3)), tokenizer, "en", "de", max_length=2)


def test_hub_corpus_location_is_the_public_name_of_the_papers_data():
    assert data.hub_corpus_location("wmt14", ("en", "fr")) == ("wmt/wmt14", "fr-en")
    assert data.hub_corpus_location("opus100", ("zh", "en")) == ("Helsinki-NLP/opus-100", "en-zh")
