"""The benchmark library (speed and deployment runs) on a tiny size: its FLOP count, its forced-length
generation in every precision and in CTranslate2, its report and targets."""

import json
import tempfile

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from nmt_toolkit.lab import benchmark
from nmt_toolkit.lab.benchmark import (
    ENGINE_PRECISIONS,
    MARIAN,
    PRECISIONS,
    BenchmarkSettings,
    EngineProcess,
    build_model,
    compiled,
    ctranslate2_models,
    ctranslate2_translators,
    decode_matmul_weights,
    format_report,
    generate_forced,
    random_batch,
    random_words_tokenizer,
    registered_members,
    run_benchmark,
    training_flops,
    translate_forced,
    write_report,
)

TINY_SIZE = dict(d_model=16, encoder_layers=2, decoder_layers=3, heads=4, ffn_dim=24)
VOCAB = 40
MODELS = [*registered_members(), MARIAN]
OPTIONS = [("dwlstm", dict(decoder_merge="two_lstm")), ("dwlstm", dict(decoder_merge="concat", share_gates="global")),
           ("dwlstm", dict(lstm_hidden="linear", share_gates="none", share_hidden=True))]


@pytest.fixture(autouse=True)
def tiny_size(monkeypatch):
    monkeypatch.setitem(benchmark.SIZES, "tiny", TINY_SIZE)


@pytest.mark.parametrize("member, options", [(m, {}) for m in MODELS] + OPTIONS)
def test_training_flops_match_pytorch_flop_counter(member, options):
    """The per-side count (docs/speed.md) is what PyTorch counts for forward + backward (math SDPA, which it sees)."""
    torch.manual_seed(0)
    model = build_model(member, "tiny", VOCAB, **options)
    batch = random_batch(3, 7, 5, VOCAB)  # source and target lengths differ: cross-attention K/V run over the source
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    assert training_flops(model, 3, 7, 5) == pytest.approx(counter.get_total_flops(), rel=0.005)


def test_decode_matmul_weights_count_what_one_new_token_goes_through():
    d, ffn, layers = TINY_SIZE["d_model"], TINY_SIZE["ffn_dim"], TINY_SIZE["decoder_layers"]
    per_layer = 4 * d * d + 2 * d * d + 2 * d * ffn  # self q/k/v/out, cross q/out (its k/v run once), FFN
    for member in ("residual-prenorm", MARIAN):
        assert decode_matmul_weights(build_model(member, "tiny", VOCAB)) == layers * per_layer + VOCAB * d


def test_forced_generation_emits_the_same_number_of_tokens_for_every_model():
    source = random_batch(3, 6, 1, VOCAB)
    for member in MODELS:
        torch.manual_seed(0)
        model = build_model(member, "tiny", VOCAB)
        # EOS becomes by far the most likely token: only the forcing keeps generation going.
        model.get_output_embeddings().register_forward_hook(lambda module, inputs, logits: logits.index_add(
            -1, torch.tensor([benchmark.EOS]), torch.full((*logits.shape[:-1], 1), 100.0)))
        for beams in (4, 1):
            sequences = generate_forced(model, source, beams, new_tokens=5, device="cpu")
            assert sequences.shape == (3, 1 + 5), (member, beams)
            assert not (sequences[:, 1:-1] == benchmark.EOS).any(), (member, beams)


def test_benchmark_runs_and_writes_its_report(tmp_path):
    settings = BenchmarkSettings(
        sizes=("tiny",), lengths=(4, 8), headline_length=8, token_budget=64, generation_batch=2, source_length=5,
        new_tokens=3, repeats=1, vocab_size=VOCAB, members=("dwlstm", MARIAN), device="cpu", peak_matmul_size=64,
    )
    report = run_benchmark(settings, log=lambda message: None)
    rows = report["sizes"]["tiny"]
    assert set(rows) == {"dwlstm", MARIAN}
    for row in rows.values():
        assert row["beam4_sentences_per_s"] > 0 and row["greedy_sentences_per_s"] > 0
        assert row["generation"]["float32"]["beam4"] == row["beam4_sentences_per_s"]
        assert row["train"][8]["batch"] == 4 and row["train"][4]["batch"] == 8  # fixed token budget
        assert row["train"][8]["tokens_per_s"] > 0 and row["train"][8]["flops_per_s"] > 0
        assert row["train_peak_memory_bytes"] > 0
    assert report["targets"] == []  # every deployment target needs rows this run did not measure
    table = format_report(report)
    assert "| dwlstm |" in table and "| marian |" in table
    path = tmp_path / "out" / "benchmark.json"
    write_report(report, path)
    assert json.loads(path.read_text())["sizes"]["tiny"]["marian"]["parameters"] == rows[MARIAN]["parameters"]


@pytest.mark.usefixtures("native_bfloat16")
def test_precisions_engines_bf16_training_and_the_depth_pair_are_measured_and_checked(monkeypatch):
    """The deployment rows: every precision, CTranslate2, bf16 training, the pair of Xu et al. 2024, Table 6;
    each target's ratio is the quotient of the rows it names."""
    monkeypatch.setitem(benchmark.SIZES, "base", dict(TINY_SIZE, decoder_layers=2))  # the depth pair is at base
    settings = BenchmarkSettings(
        sizes=("tiny",), lengths=(8,), headline_length=8, token_budget=64, generation_batch=2, source_length=5,
        new_tokens=3, repeats=1, vocab_size=VOCAB, members=("dwlstm", "residual-prenorm", MARIAN), device="cpu",
        peak_matmul_size=64, measure_memory=False, precisions=tuple(PRECISIONS), train_bf16=True, ctranslate2=True,
        depth_pair=True,
    )
    report = run_benchmark(settings, log=lambda message: None)
    rows, engines, pair = report["sizes"]["tiny"], report["engines"]["tiny"], report["depth_pair"]
    for row in rows.values():
        assert set(row["generation"]) == set(PRECISIONS) and row["train_bf16"]["tokens_per_s"] > 0
    assert set(engines) == {"marian (CTranslate2)", "residual-prenorm (CTranslate2)"}
    assert all(set(rates) == set(ENGINE_PRECISIONS) for rates in engines.values())
    assert set(pair) == {"dwlstm 12+12", "residual-prenorm 24+24"}
    assert pair["residual-prenorm 24+24"]["parameters"] > pair["dwlstm 12+12"]["parameters"]
    checks = {check["target"]: check for check in report["targets"]}
    anchor = engines["marian (CTranslate2)"]["int8"]
    residual = [rates["beam4"] for rates in rows["residual-prenorm"]["generation"].values()]
    residual += [rates["beam4"] for rates in engines["residual-prenorm (CTranslate2)"].values()]
    fastest = checks["residual pre-norm, fastest CPU path vs CTranslate2 int8 Marian (beam4)"]
    assert fastest["ratio"] == pytest.approx(max(residual) / anchor["beam4"]) and fastest["met"] == (fastest["ratio"] >= 0.9)
    dwlstm = checks["depth-wise LSTM, fastest CPU path vs CTranslate2 int8 Marian (beam4)"]
    assert dwlstm["ratio"] == pytest.approx(max(r["beam4"] for r in rows["dwlstm"]["generation"].values()) / anchor["beam4"])
    bf16 = checks["bf16 vs fp32 training tokens/s, marian"]
    assert bf16["ratio"] == pytest.approx(rows[MARIAN]["train_bf16"]["tokens_per_s"] / rows[MARIAN]["train"][8]["tokens_per_s"])
    deep, wide = pair["dwlstm 12+12"]["generation"], pair["residual-prenorm 24+24"]["generation"]
    float32 = checks["12+12 depth-wise LSTM vs 24+24 residual pre-norm, decoding (beam4, float32)"]
    assert float32["ratio"] == pytest.approx(deep["float32"]["beam4"] / wide["float32"]["beam4"]) and float32["met"] is None
    share = checks["residual pre-norm fp32 training step, share of the matmul peak"]
    peak = report["machine"]["matmul_peak_flops_per_s"]
    assert len(report["machine"]["matmul_peak_measurements"]) == 2 and peak == max(report["machine"]["matmul_peak_measurements"])
    assert share["ratio"] == pytest.approx(rows["residual-prenorm"]["train"][8]["flops_per_s"] / peak)
    table = format_report(report)
    assert "| marian (CTranslate2) |" in table and "| dwlstm 12+12 |" in table and "bfloat16+int8 beam4" in table


def test_ctranslate2_runs_marian_and_our_export_as_generate_does():
    """The anchor row decodes what transformers decodes (greedy, float32, forced length): Marian through
    CTranslate2's own loader, the residual member through our export, both from the random-words vocabulary."""
    source = random_batch(3, 6, 1, VOCAB)
    with tempfile.TemporaryDirectory() as directory:
        for member in ("residual-prenorm", MARIAN):
            torch.manual_seed(0)
            model = build_model(member, "tiny", VOCAB).eval()
            settings = BenchmarkSettings(vocab_size=VOCAB, threads=1)
            paths = ctranslate2_models({member: model}, settings, directory)
            translator = ctranslate2_translators(paths, threads=1)[member, "float32"]
            words = translate_forced(translator, [[f"w{i}" for i in row] for row in source["input_ids"].tolist()], 1, 5)
            expected = generate_forced(model, source, 1, new_tokens=5, device="cpu")[:, 1:]
            tokenizer = random_words_tokenizer(VOCAB, pad_last=member == MARIAN)
            assert [tokenizer.convert_tokens_to_ids(sentence) for sentence in words] == expected.tolist(), member


def test_the_engine_process_translates_on_request_and_reports_its_errors(tmp_path):
    """The benchmark's CTranslate2 rows run in a child process (EngineProcess): a request returns when the child
    has translated; a failure there is raised here with its message instead of hanging the benchmark."""
    torch.manual_seed(0)
    model = build_model("residual-prenorm", "tiny", VOCAB).eval()
    paths = ctranslate2_models({"residual-prenorm": model}, BenchmarkSettings(vocab_size=VOCAB, threads=1), str(tmp_path))
    engine = EngineProcess(paths, threads=1, source_tokens=[["w7", "w8", "w9"], ["w10"]])
    try:
        engine.request((("residual-prenorm", "int8"), 2, 3))
        with pytest.raises(RuntimeError, match="CTranslate2 worker failed: KeyError"):
            engine.request((("marian", "int8"), 2, 3))  # never converted
    finally:
        engine.close()
    assert not engine.process.is_alive()


@pytest.mark.parametrize("change, message", [
    (dict(sizes=("huge",)), "Unknown sizes"),
    (dict(lengths=(16, 32), headline_length=64), "headline_length"),
    (dict(token_budget=100), "token_budget"),
    (dict(members=("transformer-xl",)), "Unknown members"),
    (dict(precisions=("bfloat16",)), "precisions must include float32"),
    (dict(precisions=("float32", "float16")), "precisions must include float32"),
])
def test_bad_settings_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        BenchmarkSettings(**change).check()


def test_compiled_model_generates_and_trains_like_the_eager_one():
    """The torch.compile path, traced by dynamo (the `eager` backend keeps the test fast; inductor
    compiles the same graphs)."""
    torch.manual_seed(0)
    model = build_model("dwlstm", "tiny", VOCAB).eval()
    source, batch = random_batch(2, 6, 1, VOCAB), random_batch(2, 6, 4, VOCAB)
    expected_sequences = generate_forced(model, source, 4, new_tokens=4, device="cpu")
    with torch.no_grad():
        expected_loss = model(**batch).loss
    compiled(model, backend="eager")
    assert torch.equal(generate_forced(model, source, 4, new_tokens=4, device="cpu"), expected_sequences)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).loss, expected_loss)
