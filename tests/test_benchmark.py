"""The benchmark library (issue 5) on a tiny size: its FLOP count, its forced-length generation, its report."""

import json

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from modeling_dwlstm import benchmark
from modeling_dwlstm.benchmark import (
    MARIAN,
    BenchmarkSettings,
    build_model,
    compiled,
    decode_matmul_weights,
    format_report,
    generate_forced,
    random_batch,
    registered_members,
    run_benchmark,
    training_flops,
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
    """SPEC §8: the per-side count is what PyTorch counts for forward + backward (math SDPA, which it sees)."""
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
        assert row["train"][8]["batch"] == 4 and row["train"][4]["batch"] == 8  # fixed token budget
        assert row["train"][8]["tokens_per_s"] > 0 and row["train"][8]["flops_per_s"] > 0
        assert row["train_peak_memory_bytes"] > 0
    targets = {check["target"]: check for check in report["targets"]}
    # the other targets need residual-prenorm
    assert set(targets) == {"dwlstm vs Marian, generation (beam4)", "dwlstm vs Marian, generation (greedy)"}
    greedy = targets["dwlstm vs Marian, generation (greedy)"]
    assert greedy["ratio"] == pytest.approx(rows["dwlstm"]["greedy_sentences_per_s"] / rows[MARIAN]["greedy_sentences_per_s"])
    assert greedy["met"] == (greedy["ratio"] >= 1.0)
    table = format_report(report)
    assert "| dwlstm |" in table and "| marian |" in table and ("met" in table or "MISSED" in table)
    path = tmp_path / "out" / "benchmark.json"
    write_report(report, path)
    assert json.loads(path.read_text())["sizes"]["tiny"]["marian"]["parameters"] == rows[MARIAN]["parameters"]


@pytest.mark.parametrize("change, message", [
    (dict(sizes=("huge",)), "Unknown sizes"),
    (dict(lengths=(16, 32), headline_length=64), "headline_length"),
    (dict(token_budget=100), "token_budget"),
    (dict(members=("transformer-xl",)), "Unknown members"),
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
