"""The translate command: one line in, one line out, in input order, as the evaluation decodes; safe
output files, --resume, and one-line errors for bad inputs."""

import errno
import io
import json
import logging
import re
import sys

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm import DwLstmConfig
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit import translate
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.commands import translate as command
from nmt_toolkit.evaluation import translate_sentences
from nmt_toolkit.quickstart_corpus import generate_pairs
from nmt_toolkit.translate import TranslationInterrupted

pytestmark = pytest.mark.usefixtures("one_thread")

DECODE = {"num_beams": 2, "max_new_tokens": 6}
FLAGS = [
    "--num_beams",
    "2",
    "--max_new_tokens",
    "6",
    "--max_tokens",
    "40",
    "--quiet",
]  # several batches
ONE_A_BATCH = [*FLAGS[:-2], "1", "--quiet"]


@pytest.fixture(scope="module")
def corpus():
    return [english for english, _ in generate_pairs(200, seed=3)]


def save_model(folder, corpus, tags=(), **config):
    tokenizer = train_joint_bpe_tokenizer(corpus, vocab_size=200, language_tags=list(tags))
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(
        DwLstmConfig(
            **tokenizer_model_kwargs(tokenizer),
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            ffn_dim=32,
            max_position_embeddings=64,
            **config,
        )
    ).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


@pytest.fixture(scope="module")
def bilingual(corpus, tmp_path_factory):
    folder = tmp_path_factory.mktemp("translate") / "en-de"
    return (folder, *save_model(folder, corpus, language_pairs=["en-de"]))


@pytest.fixture(scope="module")
def multilingual(corpus, tmp_path_factory):
    folder = tmp_path_factory.mktemp("translate") / "m2m"
    return (
        folder,
        *save_model(folder, corpus, tags=["<2de>", "<2fr>"], language_pairs=["en-de", "en-fr"]),
    )


@pytest.fixture
def lines(corpus):
    return [*corpus[:5], "", corpus[5], "   ", *corpus[6:12]]


def main(argv):
    """The command in this process, with paths as arguments."""
    return command.main([str(arg) for arg in argv])


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_a_file_translates_line_by_line_as_the_evaluation_does(bilingual, lines, tmp_path):
    folder, model, tokenizer = bilingual
    source, output = write(tmp_path / "in.en", lines), tmp_path / "out.de"
    summary = main(["--model", folder, "--input", source, "--output", output, *FLAGS])
    expected = translate_sentences(model, tokenizer, lines, max_tokens=40, **DECODE).hypotheses
    assert read(output) == expected and len(expected) == len(lines)
    assert (
        read(output)[5] == "" and read(output)[7] == ""
    )  # empty and blank lines stay in their places
    assert all(expected[i] for i in (0, 6, 13))
    assert summary["decoded"] == 12 and summary["resumed"] == 0 and summary["cut"] == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "in.en",
        "out.de",
    ]  # no journal, no temporary file
    # each line as generate() translates it alone (a padded batch equals each sentence alone)
    ids = tokenizer(lines[6], return_tensors="pt")
    alone = model.generate(
        **ids, num_beams=2, max_length=ids["input_ids"].shape[1] + 1 + 50, max_new_tokens=None
    )
    assert read(output)[6] == tokenizer.decode(alone[0, :7], skip_special_tokens=True).strip()


def test_the_command_keeps_freed_memory_unless_told_not_to(
    bilingual, lines, tmp_path, kept_memory_calls
):
    """glibc is told to keep the memory decoding frees (each step's cache, a little larger than the
    last, would otherwise come from fresh pages), unless --no_keep_freed_memory; the translations
    are the same either way."""
    folder, _, _ = bilingual
    source = write(tmp_path / "in.en", lines)
    plain, kept = tmp_path / "plain.de", tmp_path / "kept.de"
    main(
        ["--model", folder, "--input", source, "--output", plain, "--no_keep_freed_memory", *FLAGS]
    )
    assert kept_memory_calls == []
    main(["--model", folder, "--input", source, "--output", kept, *FLAGS])
    assert kept_memory_calls == [True] and read(kept) == read(plain)


def test_standard_input_to_standard_output(bilingual, lines, monkeypatch, capsys):
    folder, model, tokenizer = bilingual
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO("\n".join(lines).encode("utf-8")))
    )
    main(["--model", folder, *FLAGS])
    captured = capsys.readouterr()
    assert (
        captured.out.split("\n")[:-1]
        == translate_sentences(model, tokenizer, lines, **DECODE).hypotheses
    )
    assert captured.err == ""  # --quiet: nothing but the translations


def test_an_interrupted_run_leaves_no_output_and_resumes_from_its_last_batch(
    bilingual, lines, tmp_path, monkeypatch
):
    folder = bilingual[0]
    source, output = write(tmp_path / "in.en", lines), tmp_path / "out.de"
    command = ["--model", folder, "--input", source, "--output", output, *FLAGS]
    main(["--model", folder, "--input", source, "--output", tmp_path / "whole.de", *FLAGS])
    decode = translate.decode_batches

    def interrupted(*args, **kwargs):  # Ctrl-C after two batches
        for count, batch in enumerate(decode(*args, **kwargs)):
            if count == 2:
                raise KeyboardInterrupt
            yield batch

    monkeypatch.setattr(translate, "decode_batches", interrupted)
    with pytest.raises(TranslationInterrupted, match="--resume"):
        main(command)
    monkeypatch.undo()
    journal = tmp_path / ".out.de.partial"
    assert not output.exists() and journal.is_file()
    with pytest.raises(ValueError, match="unfinished translation .* --resume"):
        main(command)
    with journal.open("a", encoding="utf-8") as file:
        file.write('{"lines": [3, 4], "transl')  # a batch cut short by a kill
    summary = main([*command, "--resume"])
    assert read(output) == read(tmp_path / "whole.de")
    assert 0 < summary["resumed"] < 12 and summary["decoded"] == 12 - summary["resumed"]
    assert not journal.exists()
    write(source, lines[:3])  # another input: its journal is not continued
    monkeypatch.setattr(translate, "decode_batches", interrupted)
    with pytest.raises(TranslationInterrupted):
        main(["--model", folder, "--input", source, "--output", tmp_path / "x", *ONE_A_BATCH])
    monkeypatch.undo()
    write(source, lines[:4])
    with pytest.raises(ValueError, match="another input"):
        main(
            [
                "--model",
                folder,
                "--input",
                source,
                "--output",
                tmp_path / "x",
                *ONE_A_BATCH,
                "--resume",
            ]
        )


def test_long_lines_are_cut_with_a_warning_that_counts_them(bilingual, corpus, tmp_path, caplog):
    folder = bilingual[0]
    long = " ".join(corpus[:20])
    source = write(tmp_path / "in.en", [long, corpus[0], long])
    with caplog.at_level(logging.WARNING, logger="nmt_toolkit.translate"):
        summary = main(["--model", folder, "--input", source, "--output", tmp_path / "out", *FLAGS])
    assert summary["cut"] == 2 and "2 line(s) longer than the model's 64 positions" in caplog.text
    assert all(read(tmp_path / "out"))


def test_json_lines_choose_the_direction_per_line(multilingual, corpus, tmp_path):
    folder, model, tokenizer = multilingual
    requests = [
        {"text": corpus[0], "src_lang": "en", "tgt_lang": "de"},
        {"text": corpus[1], "tgt_lang": "fr"},
        {"text": ""},
        {"text": corpus[2]},
    ]
    source = write(tmp_path / "in.jsonl", [json.dumps(request) for request in requests])
    json_flags = ["--json_lines", "--target_lang", "de", *FLAGS]
    main(["--model", folder, "--input", source, "--output", tmp_path / "out", *json_flags])
    expected = [
        _alone(model, tokenizer, corpus[0], "de"),
        _alone(model, tokenizer, corpus[1], "fr"),
        "",
        _alone(model, tokenizer, corpus[2], "de"),
    ]
    assert read(tmp_path / "out") == expected
    english = write(tmp_path / "in.en", corpus[:3])
    main(
        [
            "--model",
            folder,
            "--input",
            english,
            "--output",
            tmp_path / "out.fr",
            "--target_lang",
            "fr",
            *FLAGS,
        ]
    )
    assert read(tmp_path / "out.fr") == [
        _alone(model, tokenizer, text, "fr") for text in corpus[:3]
    ]


def _alone(model, tokenizer, text, target):
    return translate_sentences(model, tokenizer, [text], language_tag=target, **DECODE).hypotheses[
        0
    ]


@pytest.mark.parametrize(
    "model_name, flags, content, message",
    [
        ("missing", [], b"A man.\n", "does not exist|not found|no such"),
        ("en-de", [], b"\x00\x01\x02binary\n", "NUL bytes .* binary file"),
        ("en-de", [], b"caf\xe9\n", "not UTF-8"),
        (
            "en-de",
            ["--source_lang", "de", "--target_lang", "en"],
            b"Ein Mann.\n",
            r"translates \['en-de'\] .* not de-en",
        ),
        ("m2m", [], b"A man.\n", "multilingual .* give --target_lang"),
        ("m2m", ["--target_lang", "cs"], b"A man.\n", "no tag <2cs>"),
        (
            "m2m",
            ["--json_lines", "--target_lang", "de"],
            b'{"txt": "A man."}\n',
            'line 1 has no "text"',
        ),
        ("en-de", ["--resume"], b"A man.\n", "--resume continues a translation into a file"),
    ],
)
def test_bad_inputs_end_in_one_line_and_write_nothing(
    model_name, flags, content, message, bilingual, multilingual, tmp_path, capsys
):
    models = {"en-de": bilingual[0], "m2m": multilingual[0], "missing": tmp_path / "no-model"}
    source = tmp_path / "in.txt"
    source.write_bytes(content)
    output = ["--output", tmp_path / "out"] if "--resume" not in flags else []
    with pytest.raises(SystemExit) as exit:
        exit_on_error(
            main, ["--model", models[model_name], "--input", source, *output, *flags, "--quiet"]
        )
    error = capsys.readouterr().err
    assert exit.value.code == 1 and len(error.strip().splitlines()) == 1, error
    assert re.search(message, error, flags=re.IGNORECASE), error
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


def test_an_existing_output_is_kept_unless_overwrite_is_asked(bilingual, corpus, tmp_path):
    folder = bilingual[0]
    source, output = write(tmp_path / "in.en", corpus[:2]), write(tmp_path / "out.de", ["mine"])
    for target in (output, source):
        with pytest.raises(ValueError, match="exists: pass --overwrite|is the input file"):
            main(["--model", folder, "--input", source, "--output", target, *FLAGS])
    assert read(output) == ["mine"] and read(source) == corpus[:2]
    main(["--model", folder, "--input", source, "--output", output, "--overwrite", *FLAGS])
    assert len(read(output)) == 2 and read(output) != ["mine"]


def test_a_full_disk_ends_in_one_line_and_leaves_no_output(
    bilingual, corpus, tmp_path, monkeypatch, capsys
):
    folder = bilingual[0]
    source, output = write(tmp_path / "in.en", corpus[:6]), tmp_path / "out.de"

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(translate.os, "fsync", full)  # the journal's first batch
    with pytest.raises(SystemExit):
        exit_on_error(main, ["--model", folder, "--input", source, "--output", output, *FLAGS])
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "No space left" in error and "--resume" in error
    assert not output.exists()
