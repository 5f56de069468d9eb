"""Building the vocabulary shortlist from a corpus, using it from the pipeline and the scripts, and
CTranslate2's vocabulary map made from the same table."""

import gzip
import json
from pathlib import Path

import ctranslate2
import pytest
import torch
from conftest import run_script, tiny_benchmark_settings
from transformers import AutoModelForSeq2SeqLM, pipeline

from modeling_dwlstm import DwLstmConfig, ResidualTransformerConfig, generation_translation
from modeling_dwlstm.generation_translation import SHORTLIST_FILE, Shortlist
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.checkpoints import weights_digest
from nmt_toolkit.ctranslate2_export import (
    ctranslate2_tokens,
    export_ctranslate2,
    generate_kwargs_like_ctranslate2,
)
from nmt_toolkit.files import CHECKSUMS_NAME, verify_checksums, write_checksums
from nmt_toolkit.lab import speed
from nmt_toolkit.lab.speed import build_model, generate_forced, random_batch, synthetic_shortlist
from nmt_toolkit.quickstart_corpus import generate_pairs
from nmt_toolkit.shortlist import (
    build_shortlist,
    cooccurrence_counts,
    coverage,
    shortlist_from_texts,
    vocabulary_map_lines,
)

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = generate_pairs(200, seed=1)
SOURCES = [english for english, _ in PAIRS[:4]]


@pytest.fixture(scope="module")
def tokenizer():
    return train_joint_bpe_tokenizer([text for pair in PAIRS for text in pair], vocab_size=300)


def saved_model(tokenizer, directory: Path, config_class=DwLstmConfig, shortlist: bool = True):
    torch.manual_seed(0)
    config = config_class(
        **tokenizer_model_kwargs(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        language_pairs=["en-de"],
    )
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    if shortlist:
        model.shortlist = shortlist_from_texts(
            tokenizer,
            [e for e, _ in PAIRS],
            [g for _, g in PAIRS],
            config.vocab_size,
            top_k=4,
            frequent=10,
            min_count=1,
        )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model


# --- Counting and choosing ------------------------------------------------------------------------


def test_cooccurrences_count_each_token_once_per_sentence_pair():
    sources, targets = [[1, 1, 2], [2, 3], []], [[5, 6, 5], [5], [6]]
    keys, counts, source_counts, target_counts, frequency = cooccurrence_counts(
        sources, targets, vocab_size=7
    )
    pairs = {(int(key) // 7, int(key) % 7): int(count) for key, count in zip(keys, counts)}
    assert pairs == {(1, 5): 1, (1, 6): 1, (2, 5): 2, (2, 6): 1, (3, 5): 1}
    assert source_counts.tolist() == [0, 1, 2, 1, 0, 0, 0]
    assert target_counts.tolist() == [0, 0, 0, 0, 0, 2, 2]
    assert frequency.tolist() == [0, 0, 0, 0, 0, 3, 2]  # every occurrence
    with pytest.raises(ValueError, match="must be parallel"):
        cooccurrence_counts(sources, targets[:2], 7)
    with pytest.raises(ValueError, match=r"lie in \[0, 7\)"):
        cooccurrence_counts([[9]], [[1]], 7)


def test_each_source_token_keeps_its_best_targets_by_dice():
    # Source 1 is always translated 10, which is rare elsewhere; 11 is frequent everywhere (a
    # function word).
    sources = [[1, 2]] * 3 + [[2]] * 5 + [[3]] * 2
    targets = [[10, 11]] * 3 + [[11]] * 5 + [[12, 11]] * 2
    shortlist = build_shortlist(
        sources, targets, vocab_size=13, top_k=1, frequent=1, min_count=1, special_ids=[0]
    )
    assert shortlist.table[1].tolist() == [10]  # Dice 1.0 against 11's 0.6
    assert shortlist.table[2].tolist() == [11]
    assert shortlist.table[3].tolist() == [12]
    assert shortlist.table[4].tolist() == [-1]  # never seen
    assert shortlist.always.tolist() == [0, 11]  # the most frequent target, and the special token
    assert shortlist.metadata["score"] == "dice" and shortlist.metadata["pairs"] == "10"
    rare = build_shortlist(sources, targets, vocab_size=13, top_k=2, frequent=0, min_count=3)
    assert rare.table[3].tolist() == [-1, -1]  # seen twice only
    with pytest.raises(ValueError, match="`top_k` must be an integer >= 1"):
        build_shortlist(sources, targets, vocab_size=13, top_k=0)


def test_coverage_counts_reference_tokens_inside_the_union():
    shortlist = Shortlist(torch.tensor([[-1], [5], [6], [-1]]), torch.tensor([3]))
    kept = coverage(shortlist, [[1], [2]], [[5, 3], [5, 6]], batch_size=1)
    assert kept["tokens"] == 3 / 4 and kept["sentences"] == 1 / 2 and kept["union_size"] == 2
    together = coverage(shortlist, [[1], [2]], [[5, 3], [5, 6]], batch_size=2)
    assert together["tokens"] == 1 and together["union_size"] == 3


def test_the_vocabulary_map_lists_the_table_and_the_tokens_always_allowed():
    shortlist = Shortlist(torch.tensor([[-1, -1], [2, 3], [-1, -1], [1, -1]]), torch.tensor([0]))
    assert vocabulary_map_lines(shortlist, ["<s>", "▁a", "▁b", "c"]) == [
        "\t<s>",
        "▁a\t▁b c",
        "c\t▁a",
    ]
    with pytest.raises(ValueError, match="whitespace"):
        vocabulary_map_lines(shortlist, ["<s>", "a b", "▁b", "c"])


# --- Using it -------------------------------------------------------------------------------------


def test_the_script_writes_the_shortlist_into_the_model_folder_and_records_it(
    tokenizer, tmp_path, capsys
):
    data = tmp_path / "data"
    data.mkdir()
    for split, pairs in (("train", PAIRS[:150]), ("val", PAIRS[150:])):
        for index, language in enumerate(("en", "de")):
            with gzip.open(data / f"{split}.{language}.gz", "wt", encoding="utf-8") as file:
                file.write("".join(pair[index] + "\n" for pair in pairs))
    saved_model(tokenizer, tmp_path / "model", shortlist=False)
    write_checksums(tmp_path / "model")
    weights = weights_digest(tmp_path / "model")
    run_script(
        "build_shortlist",
        "--model",
        tmp_path / "model",
        "--data",
        data,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--top_k",
        5,
        "--frequent",
        20,
        "--min_count",
        1,
        "--validation_split",
        "val",
    )
    printed = capsys.readouterr().out
    assert "val, batches of 1:" in printed and "val, batches of 32:" in printed
    assert json.loads((tmp_path / "model" / CHECKSUMS_NAME).read_text())["sha256"][SHORTLIST_FILE]
    assert verify_checksums(tmp_path / "model", required=True)
    # evaluation results of the model still name its weights
    assert weights_digest(tmp_path / "model") == weights
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "model")
    assert model.shortlist.table.shape == (model.config.vocab_size, 5)
    assert model.shortlist.metadata["corpus"].endswith("train en-de")


def test_the_pipeline_and_the_evaluation_decode_over_the_shortlist(tokenizer, tmp_path):
    model = saved_model(tokenizer, tmp_path / "model")
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    settings = dict(num_beams=2, max_new_tokens=8, use_shortlist=True)
    inputs = tokenizer([SOURCES[0]], return_tensors="pt")
    expected = tokenizer.decode(model.generate(**inputs, **settings)[0], skip_special_tokens=True)
    assert translator(SOURCES[0], **settings) == [{"translation_text": expected}]
    assert expected != tokenizer.decode(
        model.generate(**inputs, num_beams=2, max_new_tokens=8)[0], skip_special_tokens=True
    )  # the shortlist mattered
    sources, references = tmp_path / "sources.txt", tmp_path / "references.txt"
    sources.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    references.write_text("\n".join(german for _, german in PAIRS[:4]) + "\n", encoding="utf-8")
    run_script(
        "evaluate_translation",
        "--model",
        tmp_path / "model",
        "--source_file",
        sources,
        "--reference_file",
        references,
        "--output_dir",
        tmp_path / "evaluation",
        "--num_beams",
        2,
        "--use_shortlist",
        "true",
    )
    assert (
        json.loads((tmp_path / "evaluation" / "results.json").read_text())["use_shortlist"] is True
    )
    saved_model(tokenizer, tmp_path / "plain", shortlist=False)
    with pytest.raises(
        ValueError, match="has no shortlist.safetensors; build it with scripts/build_shortlist.py"
    ):
        run_script(
            "evaluate_translation",
            "--model",
            tmp_path / "plain",
            "--source_file",
            sources,
            "--reference_file",
            references,
            "--output_dir",
            tmp_path / "evaluation2",
            "--use_shortlist",
            "true",
        )


@pytest.mark.parametrize("beam_size", [1, 2])
def test_ctranslate2_with_the_vocabulary_map_decodes_what_the_shortlist_decodes(
    tokenizer, beam_size, tmp_path
):
    model = saved_model(tokenizer, tmp_path / "model", ResidualTransformerConfig)
    export_ctranslate2(tmp_path / "model", tmp_path / "ct2")
    assert (tmp_path / "ct2" / "vmap.txt").is_file()
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", compute_type="float32")
    settings = generate_kwargs_like_ctranslate2(beam_size, max_decoding_length=12)
    special = {tokenizer.pad_token_id, tokenizer.eos_token_id}
    for use_vmap in (True, False):
        results = translator.translate_batch(
            ctranslate2_tokens(tokenizer, SOURCES),
            beam_size=beam_size,
            max_decoding_length=12,
            use_vmap=use_vmap,
        )
        generated = model.generate(
            **tokenizer(SOURCES, return_tensors="pt", padding=True),
            use_shortlist=use_vmap,
            **settings,
        )
        ours = [
            tokenizer.convert_ids_to_tokens([i for i in ids[1:].tolist() if i not in special])
            for ids in generated
        ]
        assert [result.hypotheses[0] for result in results] == ours


def test_the_benchmark_decodes_with_the_same_shortlist_on_both_sides(monkeypatch):
    monkeypatch.setitem(
        speed.SIZES,
        "tiny",
        dict(d_model=16, encoder_layers=2, decoder_layers=2, heads=4, ffn_dim=24),
    )
    monkeypatch.setattr(speed, "SHORTLIST_FREQUENT", 5)
    settings = tiny_benchmark_settings(200, ctranslate2=True, shortlist=True)
    report = speed.run_benchmark(settings, log=lambda message: None)
    row, engines = report["sizes"]["tiny"]["dwlstm"], report["engines"]["tiny"]
    assert set(row["generation_shortlist"]) == {"float32", "int8"} and row["shortlist_union"] < 200
    assert set(engines["marian (CTranslate2) shortlist"]) == set(speed.ENGINE_PRECISIONS)
    checks = {check["target"]: check for check in report["targets"]}
    check = checks[
        "depth-wise LSTM with a shortlist vs CTranslate2 int8 Marian with the same table (beam4)"
    ]
    fastest = max(rates["beam4"] for rates in row["generation_shortlist"].values())
    assert check["ratio"] == pytest.approx(
        fastest / engines["marian (CTranslate2) shortlist"]["int8"]["beam4"]
    )
    assert checks["shortlist gain, CTranslate2 int8 Marian (beam4)"]["met"] is None
    assert "| dwlstm shortlist (" in speed.format_report(report)


def test_the_benchmarks_forced_length_with_a_shortlist_stays_in_the_loop(monkeypatch):
    calls = []
    monkeypatch.setattr(
        generation_translation, "logger", type("Log", (), {"info": staticmethod(calls.append)})
    )
    torch.manual_seed(0)
    model = build_model(
        "dwlstm",
        "small",
        vocab_size=300,
        d_model=16,
        ffn_dim=32,
        encoder_layers=1,
        decoder_layers=1,
    ).eval()
    model.shortlist = synthetic_shortlist(300, frequent=5)
    source = random_batch(2, 5, 1, 300)
    union = model.shortlist.candidates(source["input_ids"])
    for beams in (1, 4):
        output = generate_forced(model, source, beams, 6, "cpu", use_shortlist=True)
        assert (
            output.shape == (2, 7)
            and torch.isin(output[:, 1:], union).all()
            and not (output[:, 1:] == 2).any()
        )
    assert calls == []  # never sent to transformers' loop
