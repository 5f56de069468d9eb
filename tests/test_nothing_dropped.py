"""Nothing dropped, doubled, replaced or silently wrong: input that is accepted reaches the output
whole and aligned (odd line ends and characters, empty sources and batches, compressed files,
decomposed accents), every pair that must be dropped is counted in the log, and options mean what
they say.

A new test of a result that came out silently wrong, or of input that went missing, goes here."""

import contextlib
import dataclasses
import gzip
import json
import logging
import shutil
import signal
import unicodedata
from pathlib import Path

import pytest
import torch
from conftest import (
    MULTI30K,
    SIX_SENTENCES,
    random_ids,
    read_multi30k,
    save_model_of_pairs,
    tiny_config,
    tiny_model,
    tiny_training,
    write_pair,
)
from safetensors.torch import save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from modeling_dwlstm import DwLstmConfig, HighwayTransformerConfig, building_blocks
from modeling_dwlstm.tokenization_dwlstm import (
    normalizes_unicode,
    tokenizer_model_kwargs,
    train_joint_bpe_tokenizer,
)
from nmt_toolkit.checkpoints import load_saved_model, record_saved_folder
from nmt_toolkit.commands import translate as translate_command
from nmt_toolkit.data import load_parallel_corpus
from nmt_toolkit.evaluation import (
    EvaluationArguments,
    run_evaluation,
    score_translations,
    translate_sentences,
)
from nmt_toolkit.files import read_lines, split_lines
from nmt_toolkit.lab import experiments
from nmt_toolkit.lab.experiments import (
    load_experiment,
    read_record,
    run_experiments,
    write_results_table,
)
from nmt_toolkit.quickstart_corpus import write_corpus
from nmt_toolkit.training import (
    apply_config_overrides,
    parse_training_arguments,
    train_translation,
)

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}"),
]


@contextlib.contextmanager
def at_most(seconds: int):
    """A hang becomes a failure (SIGALRM; the tests run in the main thread)."""

    def stop(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def nfd(texts: list[str]) -> list[str]:
    return [unicodedata.normalize("NFD", text) for text in texts]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A tiny saved en-de model with its tokenizer, checksums and fingerprint."""
    tokenizer = train_joint_bpe_tokenizer(SIX_SENTENCES, vocab_size=80)
    torch.manual_seed(0)
    config = DwLstmConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=16,
        max_position_embeddings=64,
        language_pairs=["en-de"],
    )
    folder = tmp_path_factory.mktemp("model") / "model"
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record_saved_folder(folder)
    return folder


@pytest.mark.parametrize(
    "inside", ["\u2028", "\u2029", "\u0085", "\x0c", "\x0b", "\x1c", "\x1d", "\x1e", "\r"]
)
def test_characters_that_splitlines_breaks_on_stay_inside_a_line_everywhere(inside, tmp_path):
    text = f"one{inside}sentence\nsecond\r\nthird\n"
    assert split_lines(text) == [f"one{inside}sentence", "second", "third"]
    for language in ("en", "de"):
        (tmp_path / f"test.{language}").write_bytes(text.encode("utf-8"))
    assert read_lines(tmp_path / "test.en") == split_lines(text)
    # the training reader: same lines
    corpus = load_parallel_corpus(tmp_path, "en", "de", "test")["translation"]
    assert [pair["en"] for pair in corpus] == split_lines(text)


def test_evaluation_keeps_sources_and_references_aligned_across_odd_characters(
    saved_with_checksums, tmp_path
):
    folder, _, _ = saved_with_checksums
    (tmp_path / "src.txt").write_text(
        "a man\u2028rides .\ntwo\x0cdogs .\n\nzwei hunde\u0085 .\n", encoding="utf-8"
    )
    (tmp_path / "ref.txt").write_text(
        "ein mann reitet .\nzwei hunde .\n\nzwei hunde .\n", encoding="utf-8"
    )
    results = run_evaluation(
        EvaluationArguments(
            model=str(folder),
            output_dir=str(tmp_path / "eval"),
            source_file=str(tmp_path / "src.txt"),
            reference_file=str(tmp_path / "ref.txt"),
            num_beams=1,
            max_new_tokens=3,
        )
    )
    hypotheses = read_lines(tmp_path / "eval" / "hypotheses.txt")
    assert results["sentences"] == 4 and len(hypotheses) == 4
    assert hypotheses[2] == "", "an empty source line gets an empty translation, in its own place"


def test_empty_sources_translate_to_empty_text_without_decoding(saved_with_checksums, monkeypatch):
    _, model, tokenizer = saved_with_checksums
    calls = []
    original = model.generate
    monkeypatch.setattr(
        model,
        "generate",
        lambda **kwargs: calls.append(kwargs["input_ids"].shape[0]) or original(**kwargs),
    )
    translations = translate_sentences(
        model, tokenizer, ["", "  ", "a man ."], num_beams=1, max_new_tokens=3
    )
    assert translations.hypotheses[:2] == ["", ""] and calls == [1]
    assert translate_sentences(model, tokenizer, [""], num_beams=1).hypotheses == [
        ""
    ] and calls == [1]


def test_pipeline_empty_text_none_and_empty_list(saved_with_checksums, monkeypatch):
    _, model, tokenizer = saved_with_checksums
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    calls = []
    original = model.generate
    monkeypatch.setattr(
        model, "generate", lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs)
    )
    assert translator("") == [{"translation_text": ""}] and not calls
    assert translator("   ", num_return_sequences=2, num_beams=2) == [{"translation_text": ""}] * 2
    mixed = translator(["", "a man .", ""], max_new_tokens=3, num_beams=1)
    assert mixed[0] == mixed[2] == {"translation_text": ""} and isinstance(
        mixed[1]["translation_text"], str
    )
    assert calls == [1]
    assert translator([]) == []
    with pytest.raises(ValueError, match="needs a text or a list of texts, got None"):
        translator(None)
    with pytest.raises(ValueError, match="item 1 is a int"):
        translator(["a", 3])


def test_config_overrides_accept_spaces_after_commas():
    config = DwLstmConfig()
    apply_config_overrides(config, "dropout=0.3, encoder_layers=2 ,d_model = 64")
    assert (config.dropout, config.encoder_layers, config.d_model) == (0.3, 2, 64)


def test_config_round_trips_through_dict():
    config = tiny_config("dwlstm-two-lstm", language_pairs=["en-de"])
    again = DwLstmConfig.from_dict(config.to_dict())
    assert again.to_dict() == config.to_dict()


@pytest.mark.parametrize("attention", ["sdpa", "eager", "decoding_step"])
def test_an_empty_batch_gives_empty_logits(case, attention, monkeypatch):
    """Cross-attention keys of fewer rows than the queries are shared by beams; an empty batch has
    no rows at all and must not be taken for that (it divided by zero). Every member, SDPA, eager
    attention, and the two matrix products of a decoding step (forced by a threshold of 0), with and
    without the cache."""
    model = tiny_model(case)
    model.set_attn_implementation("eager" if attention == "eager" else "sdpa")
    steps = []
    if attention == "decoding_step":
        monkeypatch.setattr(building_blocks, "DECODING_STEP_MIN_QUERIES", 0)
        real = building_blocks.decoding_step_attention
        monkeypatch.setattr(
            building_blocks,
            "decoding_step_attention",
            lambda *args, **kwargs: steps.append(1) or real(*args, **kwargs),
        )
    source = random_ids(2, 5)[:0]
    with torch.no_grad():
        whole = model(input_ids=source, decoder_input_ids=random_ids(2, 3)[:0])
        first = model(input_ids=source, decoder_input_ids=random_ids(2, 1)[:0], use_cache=True)
        encoded = model.get_encoder()(input_ids=source)
        second = model(
            encoder_outputs=encoded,
            decoder_input_ids=random_ids(2, 1)[:0],
            past_key_values=first.past_key_values,
        )
    assert whole.logits.shape == (0, 3, 40)
    assert first.logits.shape == second.logits.shape == (0, 1, 40)
    assert (len(steps) > 0) == (attention == "decoding_step")


def test_a_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    folder = write_pair(
        tmp_path / "data", "\ufeffa man .\ntwo dogs .\n", "\ufeffein mann .\nzwei hunde .\n"
    )
    assert read_lines(folder / "test.de") == ["ein mann .", "zwei hunde ."]
    assert load_parallel_corpus(folder, "en", "de", "test")["translation"][0] == {
        "en": "a man .",
        "de": "ein mann .",
    }
    (tmp_path / "pairs.jsonl").write_text(
        '\ufeff{"en": "a man .", "de": "ein mann ."}\n', encoding="utf-8"
    )
    assert len(load_parallel_corpus(tmp_path / "pairs.jsonl", "en", "de")) == 1


def test_training_still_takes_epochs_with_max_steps_minus_one(tmp_path):
    *_, training = parse_training_arguments(
        [
            "--model_name_or_path",
            "m.json",
            "--dataset",
            "d",
            "--output_dir",
            str(tmp_path),
            "--max_steps",
            "-1",
            "--num_train_epochs",
            "2",
        ]
    )
    assert (training.max_steps, training.num_train_epochs) == (-1, 2)


def test_the_pipeline_tags_a_many_to_one_models_input_and_refuses_to_guess_a_target(
    models, tmp_path
):
    tokenizer = AutoTokenizer.from_pretrained(models["multilingual"])  # tags <2de>, <2en>, <2fr>
    many_to_one = pipeline(
        "translation",
        model=str(save_model_of_pairs(tmp_path / "m2o", tokenizer, ["de-en", "fr-en"])),
    )
    tag = tokenizer.convert_tokens_to_ids("<2en>")
    assert many_to_one.preprocess("Ein Mann.")["input_ids"][0, 0] == tag
    settings = dict(num_beams=1, max_new_tokens=3)
    assert many_to_one("Ein Mann.", **settings) == many_to_one(
        "Ein Mann.", tgt_lang="en", **settings
    )
    unknown = pipeline(
        "translation", model=str(save_model_of_pairs(tmp_path / "no-pairs", tokenizer, []))
    )
    with pytest.raises(
        ValueError, match=r"reserves the language tags \['de', 'en', 'fr'\].*Pass tgt_lang"
    ):
        unknown("Ein Mann.", **settings)


def test_streaming_logs_the_pairs_it_drops_and_stops_when_it_can_keep_none(tmp_path, caplog):
    model_args, data_args, training_args = tiny_training(tmp_path, tmp_path / "run", max_steps=2)
    long_pair = " ".join(["word"] * 3000)
    write_pair(
        tmp_path / "data",
        f"a man .\n{long_pair}\ntwo dogs .\n",
        f"ein mann .\n{long_pair}\nzwei hunde .\n",
        "train",
    )
    streamed = dataclasses.replace(data_args, streaming=True, stream_buffer_pairs=3)
    with caplog.at_level(logging.INFO, logger="nmt_toolkit.streaming"):
        train_translation(model_args, streamed, training_args)
    assert "dropped 1 of 3 pairs longer than 256 tokens on a side" in caplog.text
    training_args = dataclasses.replace(training_args, output_dir=str(tmp_path / "run-2"))
    with (
        at_most(120),
        pytest.raises(
            ValueError,
            match=r"Every one of the (stream's|first) 3 pairs .* longer than "
            r"--max_length 3 tokens on a side.*raise --max_length",
        ),
    ):
        train_translation(model_args, dataclasses.replace(streamed, max_length=3), training_args)


def test_a_config_override_of_a_field_that_defaults_to_none_is_applied():
    config = HighwayTransformerConfig(
        d_model=16, encoder_attention_heads=2, decoder_attention_heads=2
    )
    # a TypeError from transformers before (no type to convert to)
    apply_config_overrides(config, "sdu_layers=1")
    assert config.sdu_layers == 1
    with pytest.raises(ValueError, match="`sdu_layers` must be an integer >= 1, got 'x'"):
        apply_config_overrides(
            HighwayTransformerConfig(
                d_model=16, encoder_attention_heads=2, decoder_attention_heads=2
            ),
            "sdu_layers=x",
        )


def test_decomposed_accents_read_as_composed_ones_in_new_tokenizers(models, tmp_path, caplog):
    german = read_multi30k("val", "de", 20)
    # umlauts and ß to decompose
    assert sum(text != unicodedata.normalize("NFD", text) for text in german) >= 10
    tokenizer = train_joint_bpe_tokenizer(nfd(read_multi30k("train", "de", 300)), vocab_size=300)
    # trained on NFD, read as NFC
    assert tokenizer(nfd(german))["input_ids"] == tokenizer(german)["input_ids"]
    assert "ü" in "".join(tokenizer.get_vocab()) and "\u0308" not in "".join(tokenizer.get_vocab())
    tokenizer.save_pretrained(tmp_path / "new")
    assert normalizes_unicode(AutoTokenizer.from_pretrained(tmp_path / "new"))
    # Scoring compares in NFC too: a decomposed reference matches the composed hypothesis.
    assert score_translations(german, nfd(german))["sacrebleu"] == 100.0

    # A tokenizer saved before keeps its behaviour (no normalizer), and says so when text is not
    # in NFC.
    old = AutoTokenizer.from_pretrained(models["bilingual"])
    old.backend_tokenizer.normalizer = None
    old.save_pretrained(tmp_path / "old")
    old = AutoTokenizer.from_pretrained(tmp_path / "old")
    assert not normalizes_unicode(old) and old(nfd(german))["input_ids"] != old(german)["input_ids"]
    model = load_saved_model(models["bilingual"])
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.data"):
        translate_sentences(model, old, german, num_beams=1, max_new_tokens=2)
        assert "not in Unicode NFC" not in caplog.text
        translate_sentences(model, old, nfd(german), num_beams=1, max_new_tokens=2)
    assert (
        "of 20 sources are not in Unicode NFC" in caplog.text
        and "train a new tokenizer" in caplog.text
    )


def test_a_compressed_test_set_is_evaluated_like_a_plain_one(model, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for language, text in (("en", "a man .\ntwo dogs .\n"), ("de", "ein mann .\nzwei hunde .\n")):
        (folder / f"test.{language}.gz").write_bytes(gzip.compress(text.encode()))
    results = run_evaluation(
        EvaluationArguments(
            model=str(model),
            output_dir=str(tmp_path / "eval"),
            num_beams=1,
            max_new_tokens=2,
            source_file=str(folder / "test.en.gz"),
            reference_file=str(folder / "test.de.gz"),
            target_lang="de",
        )
    )
    assert results["sentences"] == 2


def test_generate_derives_the_mask_of_padded_sources_given_without_it():
    model = tiny_model("dwlstm")
    # the second sentence padded with the pad id 1
    input_ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 1, 1]])
    settings = dict(num_beams=1, max_new_tokens=4, output_scores=True, return_dict_in_generate=True)
    masked = model.generate(input_ids=input_ids, attention_mask=input_ids.ne(1).long(), **settings)
    unmasked = model.generate(input_ids=input_ids, **settings)
    assert torch.equal(masked.sequences, unmasked.sequences)
    assert all(torch.allclose(a, b) for a, b in zip(masked.scores, unmasked.scores))


# --- Records that cannot disagree with the experiment as it is now --------------------------------


def flag(command: list[str], name: str, default=None):
    return command[command.index(name) + 1] if name in command else default


class FakeStages:
    """The runner's stages without their processes: each script writes what the runner reads of its
    outputs (a model of d_model parameters trained for --max_steps), so the runner's own decisions
    run as they are."""

    def __init__(self, interrupt_training: bool = False):
        self.interrupt_training, self.scripts = interrupt_training, []

    def __call__(self, command, environment, log, what):
        script, output = Path(command[1]).name, Path(flag(command, "--output_dir"))
        self.scripts.append(script)
        output.mkdir(parents=True, exist_ok=True)
        if script == "train_tokenizer.py":
            (output / "tokenizer.json").write_text("{}")
        elif script == "train_translation.py":
            (output / "checkpoint-1").mkdir()
            if self.interrupt_training:
                raise KeyboardInterrupt
            steps = int(flag(command, "--max_steps"))
            config = json.loads(Path(flag(command, "--model_name_or_path")).read_text())
            (output / "config.json").write_text(json.dumps(config))
            (output / "trainer_state.json").write_text(
                json.dumps(
                    {
                        "global_step": steps,
                        "log_history": [
                            {"step": steps, "loss": 1.0, "eval_loss": 1.0, "wall_time": 1.0}
                        ],
                    }
                )
            )
            (output / "train_results.json").write_text(json.dumps({"train_loss": 1.0}))
        elif script == "average_checkpoints.py":
            config = json.loads((Path(flag(command, "--run_dir")) / "config.json").read_text())
            (output / "config.json").write_text(json.dumps(config))
            save_file({"weight": torch.zeros(config["d_model"])}, output / "model.safetensors")
        else:
            (output / "results.json").write_text(
                json.dumps(
                    {  # the references themselves: BLEU 100
                        "sacrebleu": 100.0,
                        "chrf": 100.0,
                        "tokenized_bleu": 100.0,
                        "sentences_per_second": 1.0,
                        "sacrebleu_signature": "fake",
                    }
                )
            )
            shutil.copy(Path(flag(command, "--data")) / "test.de", output / "hypotheses.txt")


def small_experiment(folder: Path, max_steps: int = 1, d_model: int = 16, merges: int = 40) -> Path:
    write_corpus(folder / "corpus", splits={"train": 4, "valid": 4, "test": 4}, seed=3)
    (folder / "tiny.json").write_text(json.dumps({"model_type": "dwlstm", "d_model": d_model}))
    path = folder / "experiment.json"
    path.write_text(
        json.dumps(
            {
                "name": "tiny",
                "data": {
                    "dataset": "corpus",
                    "source_lang": "en",
                    "target_lang": "de",
                    "validation_split": "valid",
                },
                "tokenizer": {"merges": merges},
                "training": {"max_steps": max_steps},
                "runs": [{"name": "tiny", "config": "tiny.json"}],
            }
        )
    )
    return path


def test_an_edited_experiment_runs_again_and_no_table_shows_its_old_record(tmp_path, monkeypatch):
    monkeypatch.setattr(experiments, "_run", FakeStages())
    campaign = dict(output_dir=tmp_path / "runs", record_dir=tmp_path / "record")
    record = campaign["record_dir"]
    run_experiments(small_experiment(tmp_path), **campaign)
    assert run_experiments(tmp_path / "experiment.json", **campaign) == ["skip tiny-seed1"]
    first = read_record(record, "tiny-seed1")["info"]
    assert (first["steps"], first["parameters"]) == (1, 16)

    # the config file's contents changed too
    edited = small_experiment(tmp_path, max_steps=2, d_model=32)
    with pytest.raises(
        ValueError,
        match=r"record of tiny-seed1 \(config.d_model, training.max_steps\) was made "
        "with other settings than tiny's experiment file has now",
    ):
        write_results_table(load_experiment(edited), record)
    done = run_experiments(edited, **campaign)
    assert (
        done[0] == "redo tiny-seed1: its settings changed (config.d_model, training.max_steps)"
    ), done
    assert [line.split(" (")[0] for line in done[1:]] == [
        "train tiny-seed1",
        "average tiny-seed1",
        "evaluate tiny-seed1",
        "record tiny-seed1",
        f"table {record / 'results.md'}",
    ]
    again = read_record(record, "tiny-seed1")["info"]
    assert (again["steps"], again["parameters"]) == (2, 32)
    assert json.loads((record / "results.json").read_text())["rows"][0]["steps"] == 2


def test_a_record_from_before_settings_were_kept_is_compared_by_its_commands(tmp_path, monkeypatch):
    monkeypatch.setattr(experiments, "_run", FakeStages())
    campaign = dict(output_dir=tmp_path / "runs", record_dir=tmp_path / "record", table=False)
    run_experiments(small_experiment(tmp_path), **campaign)
    path = experiments.record_file(tmp_path / "record", "tiny-seed1")
    packed = json.loads(gzip.decompress(path.read_bytes()))
    del packed["record"]["settings"]  # as packed before records kept their settings
    path.write_bytes(gzip.compress(json.dumps(packed).encode()))
    assert run_experiments(tmp_path / "experiment.json", **campaign) == [
        "skip tiny-seed1 (its record keeps no settings: its config file was not compared)"
    ]
    done = run_experiments(small_experiment(tmp_path, max_steps=3), **campaign)
    assert done[0] == "redo tiny-seed1: its settings changed (train --max_steps)", done


def test_an_edited_tokenizer_and_an_unfinished_run_of_other_settings_start_again(
    tmp_path, monkeypatch
):
    stages = FakeStages(interrupt_training=True)
    monkeypatch.setattr(experiments, "_run", stages)
    campaign = dict(output_dir=tmp_path / "runs", record_dir=tmp_path / "record", table=False)
    with pytest.raises(KeyboardInterrupt):  # interrupted in training, after its first checkpoint
        run_experiments(small_experiment(tmp_path), **campaign)
    assert (tmp_path / "runs" / "tiny-seed1" / "train" / "checkpoint-1").is_dir()

    stages.interrupt_training = False
    done = run_experiments(small_experiment(tmp_path, merges=30), **campaign)
    assert done[:3] == [
        "redo tokenizer: its settings changed (tokenizer.merges)",
        f"tokenizer {tmp_path / 'record' / 'tokenizer'}",
        "restart tiny-seed1: its settings changed since it started (tokenizer.merges)",
    ], done
    assert done[3] == "train tiny-seed1", "not resumed from the checkpoint of the old settings"
    assert stages.scripts.count("train_tokenizer.py") == 2
    assert read_record(tmp_path / "record", "tiny-seed1")["info"]["settings"]["tokenizer"] == {
        "merges": 30
    }


def test_the_pipeline_warns_about_decomposed_text_with_a_tokenizer_saved_before_nfc(
    models, tmp_path, caplog
):
    german = [
        text
        for text in read_multi30k("val", "de", 20)
        if text != unicodedata.normalize("NFD", text)
    ][:3]
    old = AutoTokenizer.from_pretrained(models["bilingual"])
    old.backend_tokenizer.normalizer = None  # as saved before NFC normalization was added
    old.save_pretrained(tmp_path / "old")
    model = AutoModelForSeq2SeqLM.from_pretrained(models["bilingual"])
    translator = pipeline(
        "translation",
        model=model,
        tokenizer=AutoTokenizer.from_pretrained(tmp_path / "old"),
        num_beams=1,
        max_new_tokens=2,
    )
    with caplog.at_level(logging.WARNING, logger="modeling_dwlstm.pipeline_translation"):
        translator(german)
        assert "not in Unicode NFC" not in caplog.text
        translator(nfd(german) + ["a man ."])
    assert (
        "3 of 4 texts are not in Unicode NFC" in caplog.text
        and "train a new tokenizer" in caplog.text
    )
    caplog.clear()
    new = pipeline(
        "translation",
        model=model,
        tokenizer=AutoTokenizer.from_pretrained(models["bilingual"]),
        num_beams=1,
        max_new_tokens=2,
    )
    with caplog.at_level(logging.WARNING, logger="modeling_dwlstm.pipeline_translation"):
        new(nfd(german))  # composed by the tokenizer itself
    assert "not in Unicode NFC" not in caplog.text


def test_an_empty_input_translates_to_an_empty_output(models, tmp_path):
    (tmp_path / "empty.en").write_text("")
    summary = translate_command.main(
        [
            "--model",
            str(models["bilingual"]),
            "--input",
            str(tmp_path / "empty.en"),
            "--output",
            str(tmp_path / "out.de"),
            "--num_beams",
            "1",
        ]
    )
    assert summary["lines"] == 0 and (tmp_path / "out.de").read_text() == ""
    assert not list(tmp_path.glob(".out.de*")), "no journal left"
    model, tokenizer = (
        load_saved_model(models["bilingual"]),
        AutoTokenizer.from_pretrained(models["bilingual"]),
    )
    assert translate_sentences(model, tokenizer, [], num_beams=1).hypotheses == []


@pytest.mark.parametrize(
    "settings",
    [
        {"num_beams": 1},
        {"num_beams": 2},
        {"do_sample": True},
        {"num_beams": 2, "return_dict_in_generate": True, "output_scores": True},
    ],
)
def test_generate_on_an_empty_batch_gives_no_sequences(models, settings):
    model = load_saved_model(models["bilingual"])
    ids = AutoTokenizer.from_pretrained(models["bilingual"])(["a man ."], return_tensors="pt")
    output = model.generate(
        input_ids=ids["input_ids"][:0],
        attention_mask=ids["attention_mask"][:0],
        max_new_tokens=3,
        **settings,
    )
    sequences = output.sequences if settings.get("return_dict_in_generate") else output
    assert sequences.shape == (0, 1) and sequences.dtype == torch.long
