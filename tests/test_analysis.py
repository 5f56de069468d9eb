"""Looking inside models: the layer non-linearity analysis (Xu et al. 2020, §4), gate and
layer-weight statistics, their plots and the two scripts, on tiny models."""

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import run_script
from matplotlib.patches import Rectangle
from torch import nn
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm import (
    DlclConfig,
    DwLstmConfig,
    HighwayTransformerConfig,
    ResidualTransformerConfig,
    TransparentAttentionConfig,
)
from modeling_dwlstm.modeling_translation import LayerOutput, LayerState
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.lab.analysis import (
    AffineDecoderLayer,
    RunningStatistics,
    depthwise_lstm_gate_statistics,
    fit_affine_layers,
    layer_nonlinearity,
    model_internals,
    replaced_layer,
    sdu_gate_statistics,
    source_variation,
    state_features,
    tokenized_batches,
    transparent_attention_weights,
)
from nmt_toolkit.lab.plotting_analysis import (
    plot_gate_statistics,
    plot_layer_nonlinearity,
    plot_model_internals,
    plot_sdu_gates,
    plot_source_variation,
    plot_transparent_attention_weights,
)
from nmt_toolkit.quickstart_corpus import generate_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = dict(
    d_model=16,
    ffn_dim=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    max_position_embeddings=128,
    dropout=0.0,
)
DECODE = {"num_beams": 2, "max_new_tokens": 8}


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(60, seed=3)


@pytest.fixture(scope="module")
def tokenizer(pairs):
    return train_joint_bpe_tokenizer([text for pair in pairs for text in pair], vocab_size=200)


def build(config_class, tokenizer, seed: int = 0, **options):
    torch.manual_seed(seed)
    config = config_class(**tokenizer_model_kwargs(tokenizer), **{**SIZE, **options})
    return AutoModelForSeq2SeqLM.from_config(config).eval()


def logits(model, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


class AffineStub(nn.Module):
    """A layer whose function is affine in its state: y = A x + a on [o; c] (or o). The layer it
    stands in for still runs, so a decoder layer's KV cache fills as before, but its output is
    dropped."""

    def __init__(self, layer: nn.Module, features: int):
        super().__init__()
        self.layer, self.initial_state = layer, layer.initial_state
        self.linear = nn.Linear(features, features)

    def forward(self, output, cell=None, *args, **kwargs):
        weights = self.layer(output, cell, *args, **kwargs)[2:]
        state = LayerState(output, cell)
        features = self.linear(state_features(state))
        if cell is None:
            return LayerOutput(features, None, *weights)
        return LayerOutput(*features.chunk(2, dim=-1), *weights)


# ---------------------------------------------------------------------------------------------
# Layer non-linearity
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config_class", [DwLstmConfig, ResidualTransformerConfig])
def test_an_affine_layer_is_fitted_exactly_and_its_replacement_changes_nothing(
    config_class, tokenizer, pairs, tmp_path
):
    model = build(config_class, tokenizer)
    # [o; c] or o
    features = 2 * SIZE["d_model"] if config_class is DwLstmConfig else SIZE["d_model"]
    torch.manual_seed(1)
    # decoder layer 1: its input is a real layer's output
    for stack, index in (("encoder", 0), ("decoder", 1)):
        layers = (model.get_encoder() if stack == "encoder" else model.get_decoder()).layers
        layers[index] = AffineStub(layers[index], features)
    results = layer_nonlinearity(
        model, tokenizer, pairs[:40], pairs[40:48], fit_steps=3, batch_size=16, **DECODE
    )

    rows = {(row["stack"], row["layer"]): row for row in results["layers"]}
    assert list(rows) == [("encoder", 1), ("encoder", 2), ("decoder", 1), ("decoder", 2)]
    for key in (("encoder", 1), ("decoder", 2)):
        assert rows[key]["unexplained_variance"] < 1e-8
        assert rows[key]["sacrebleu"] == results["full"]["sacrebleu"]
        assert results["hypotheses"][f"{key[0]}-{key[1]}"] == results["hypotheses"]["full"]
    assert rows["encoder", 2]["unexplained_variance"] > 1e-3  # a real layer is not affine
    assert results["fit"]["objective"].startswith("mse")

    batch = next(tokenized_batches(tokenizer, pairs[:8], 8))
    fits = fit_affine_layers(model, [batch], [("decoder", 1)])
    replacement, fit = fits["decoder", 1]
    assert fit["positions"] == int((batch["labels"] != tokenizer.pad_token_id).sum())
    before = logits(model, batch)
    with replaced_layer(model, "decoder", 1, replacement):
        torch.testing.assert_close(logits(model, batch), before, rtol=1e-4, atol=1e-4)
    # post-norm inputs have zero mean over features: there W is not unique
    if config_class is DwLstmConfig:
        stub = model.get_decoder().layers[1]
        torch.testing.assert_close(
            replacement.linear.weight, stub.linear.weight, rtol=1e-4, atol=1e-4
        )
        torch.testing.assert_close(replacement.linear.bias, stub.linear.bias, rtol=1e-4, atol=1e-4)


def test_swapping_a_layer_and_restoring_it_leaves_the_model_bit_identical(tokenizer, pairs):
    # encoder layer 0 owns the shared gates
    model = build(DwLstmConfig, tokenizer, share_gates="global")
    batch = next(tokenized_batches(tokenizer, pairs[:6], 6))
    before, keys = logits(model, batch), list(model.state_dict())
    fits = fit_affine_layers(model, [batch])
    for (stack, index), (replacement, _) in fits.items():
        with replaced_layer(model, stack, index, replacement):
            assert not torch.equal(logits(model, batch), before)
        assert torch.equal(logits(model, batch), before)
    with (
        pytest.raises(RuntimeError, match="inside"),
        replaced_layer(model, "encoder", 0, fits["encoder", 0][0]),
    ):
        raise RuntimeError("inside")
    assert torch.equal(logits(model, batch), before) and list(model.state_dict()) == keys


@pytest.mark.parametrize(
    "config_class, options",
    [
        (DwLstmConfig, {}),
        (DwLstmConfig, {"decoder_merge": "two_lstm"}),
        (ResidualTransformerConfig, {}),
        (TransparentAttentionConfig, {}),
        (HighwayTransformerConfig, {}),
        (DlclConfig, {"norm_position": "pre"}),
    ],
)
def test_a_model_with_a_replaced_decoder_layer_generates_the_same_with_and_without_cache(
    config_class, options, tokenizer, pairs
):
    model = build(config_class, tokenizer, **options)
    batches = list(tokenized_batches(tokenizer, pairs[:24], 8))
    fits = fit_affine_layers(model, batches, [("decoder", 0), ("decoder", 1)])
    inputs = tokenizer([source for source, _ in pairs[30:34]], padding=True, return_tensors="pt")
    for index in (0, 1):  # layer 0's cache slot is the one the decoder reads its past length from
        replacement = fits["decoder", index][0]
        assert isinstance(replacement, AffineDecoderLayer)
        with replaced_layer(model, "decoder", index, replacement), torch.no_grad():
            outputs = {
                (beams, cache): model.generate(
                    **inputs, num_beams=beams, do_sample=False, max_new_tokens=10, use_cache=cache
                )
                for beams in (1, 2)
                for cache in (True, False)
            }
        assert torch.equal(outputs[1, True], outputs[1, False])
        assert torch.equal(outputs[2, True], outputs[2, False])


# ---------------------------------------------------------------------------------------------
# Gates and layer weights
# ---------------------------------------------------------------------------------------------


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def set_constant_gates(gates: nn.Module, values: tuple[float, float, float]):
    """sigmoid(LN(W c + b) * 0 + logit(v)) = v for every position: the three gates become constants."""  # noqa: E501
    with torch.no_grad():
        gates.weight.zero_()
        gates.bias.zero_()
        gates.norm_weight.zero_()
        gates.norm_bias.copy_(torch.tensor([[logit(v)] * gates.d_model for v in values]))


def gate_values(stack: str, layer: int, step: int = 0) -> tuple[float, float, float]:
    base = 0.1 * layer + 0.05 * step + (0.4 if stack == "decoder" else 0.0)
    return (0.1 + base, 0.3 + base, 0.5 - base / 2)


@pytest.mark.parametrize("merge", ["add", "two_lstm"])
def test_gate_statistics_give_hand_set_gate_values_per_layer_counting_only_real_positions(
    merge, tokenizer, pairs
):
    model = build(DwLstmConfig, tokenizer, share_gates="none", decoder_merge=merge)
    for stack in ("encoder", "decoder"):
        for layer_index, layer in enumerate(
            (model.get_encoder() if stack == "encoder" else model.get_decoder()).layers
        ):
            steps = [
                module
                for module in layer.modules()
                if isinstance(getattr(module, "gates", None), nn.Module)
            ]
            for step_index, step in enumerate(steps):
                set_constant_gates(step.gates, gate_values(stack, layer_index, step_index))
    batches = list(tokenized_batches(tokenizer, pairs[:10], 4))  # padded batches
    statistics = depthwise_lstm_gate_statistics(model, batches)

    real = {
        "encoder": sum(int(b["attention_mask"].sum()) for b in batches),
        "decoder": sum(int((b["labels"] != tokenizer.pad_token_id).sum()) for b in batches),
    }
    steps_per_layer = {"encoder": 1, "decoder": 2 if merge == "two_lstm" else 1}
    for stack in ("encoder", "decoder"):
        rows = statistics[stack]
        assert len(rows) == 2 * steps_per_layer[stack]
        for position, row in enumerate(rows):
            layer_index, step_index = divmod(position, steps_per_layer[stack])
            assert row["layer"] == layer_index + 1
            for gate, value in zip(
                ("input", "forget", "output"), gate_values(stack, layer_index, step_index)
            ):
                summary = row[gate]
                assert summary["mean"] == pytest.approx(value, abs=1e-6) and summary[
                    "std"
                ] == pytest.approx(0, abs=1e-6)
                assert summary["p10"] == pytest.approx(value, abs=1e-3) and summary[
                    "p90"
                ] == pytest.approx(value, abs=1e-3)
                assert summary["count"] == real[stack] * SIZE["d_model"]
    if merge == "two_lstm":
        assert [row["step"] for row in statistics["decoder"][:2]] == [
            "self_attn_lstm",
            "cross_attn_lstm",
        ]


def test_shared_gates_are_recorded_once_per_layer(tokenizer, pairs):
    model = build(DwLstmConfig, tokenizer, share_gates="global")
    set_constant_gates(model.get_encoder().layers[0].depthwise_lstm.gates, (0.2, 0.6, 0.7))
    batches = list(tokenized_batches(tokenizer, pairs[:6], 3))
    statistics = depthwise_lstm_gate_statistics(model, batches)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    assert [row["layer"] for row in statistics["encoder"]] == [1, 2]
    for row in statistics["encoder"]:
        assert row["forget"]["count"] == tokens * SIZE["d_model"]
        assert row["forget"]["mean"] == pytest.approx(0.6, abs=1e-6)


@pytest.mark.parametrize(
    "config_class, statistics_of",
    [
        (DwLstmConfig, depthwise_lstm_gate_statistics),
        (HighwayTransformerConfig, sdu_gate_statistics),
    ],
)
def test_padding_does_not_change_the_statistics(config_class, statistics_of, tokenizer, pairs):
    model = build(config_class, tokenizer)
    padded = statistics_of(model, tokenized_batches(tokenizer, pairs[:6], 6))
    alone = statistics_of(model, tokenized_batches(tokenizer, pairs[:6], 1))

    def summaries(statistics):  # a gate row holds three summaries, an SDU row is one
        rows = [row for stack_rows in statistics.values() for row in stack_rows]
        return [
            summary
            for row in rows
            for summary in ([v for v in row.values() if isinstance(v, dict)] or [row])
        ]

    for with_padding, without in zip(summaries(padded), summaries(alone), strict=True):
        assert with_padding["count"] == without["count"]
        assert with_padding["mean"] == pytest.approx(without["mean"], abs=1e-6)
        assert with_padding["std"] == pytest.approx(without["std"], abs=1e-6)


def test_sdu_gate_statistics_give_hand_set_gate_values_per_layer_and_sublayer(tokenizer, pairs):
    # only layer 1 of each stack is gated
    model = build(HighwayTransformerConfig, tokenizer, sdu_layers=1)
    expected = {}
    for stack in ("encoder", "decoder"):
        layer = (model.get_encoder() if stack == "encoder" else model.get_decoder()).layers[0]
        for number, name in enumerate(("self_attn", "cross_attn", "ffn")):
            connection = getattr(layer, f"{name}_residual", None)
            if connection is None:
                continue
            expected[stack, name] = 0.15 + 0.2 * number + (0.1 if stack == "decoder" else 0.0)
            with torch.no_grad():
                connection.gate.weight.zero_()
                connection.gate.bias.fill_(logit(expected[stack, name]))
    statistics = sdu_gate_statistics(model, tokenized_batches(tokenizer, pairs[:5], 5))
    assert [(row["layer"], row["sublayer"]) for row in statistics["encoder"]] == [
        (1, "self_attn"),
        (1, "ffn"),
    ]
    assert [row["sublayer"] for row in statistics["decoder"]] == ["self_attn", "cross_attn", "ffn"]
    for stack, rows in statistics.items():
        for row in rows:
            assert row["mean"] == pytest.approx(expected[stack, row["sublayer"]], abs=1e-6)
            assert row["p90"] == pytest.approx(expected[stack, row["sublayer"]], abs=1e-3)
    # the wrapper is gone
    assert "transform_gate" not in vars(model.get_encoder().layers[0].self_attn_residual)


def test_transparent_attention_weights_are_the_softmax_of_the_scores(tokenizer):
    model = build(TransparentAttentionConfig, tokenizer, encoder_layers=3)
    scores = torch.arange(8.0).reshape(2, 4)
    with torch.no_grad():
        model.get_decoder().cross_attention_source.weights.copy_(scores)
    weights = transparent_attention_weights(model)
    assert weights.shape == (2, 4)  # decoder layers x (encoder layers + 1)
    torch.testing.assert_close(weights, scores.softmax(-1))
    assert model_internals(model) == ("transparent_attention_weights", weights.tolist())
    with pytest.raises(ValueError, match="no transparent attention"):
        transparent_attention_weights(build(ResidualTransformerConfig, tokenizer))
    with pytest.raises(ValueError, match="statistics over a corpus"):
        model_internals(build(DwLstmConfig, tokenizer))


def test_running_statistics_match_the_exact_ones():
    values = torch.rand(10_000, generator=torch.Generator().manual_seed(0)) * 1.6 - 0.8
    statistics = RunningStatistics()
    for chunk in values.split(777):
        statistics.add(chunk)
    summary = statistics.summary()
    assert summary["count"] == 10_000
    assert summary["mean"] == pytest.approx(float(values.double().mean()), abs=1e-9)
    assert summary["std"] == pytest.approx(float(values.double().std(correction=0)), abs=1e-9)
    assert summary["p10"] == pytest.approx(float(values.quantile(0.1)), abs=2e-3)
    assert summary["p90"] == pytest.approx(float(values.quantile(0.9)), abs=2e-3)


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def bars(axis) -> list:
    return [patch for patch in axis.patches if isinstance(patch, Rectangle)]


def summary(mean: float) -> dict:
    return {"mean": mean, "std": 0.05, "p10": mean - 0.1, "p90": mean + 0.1, "count": 10}


def test_each_plot_writes_a_png_with_one_bar_or_cell_per_entry(tmp_path):
    results = {
        "full": {"sacrebleu": 20.0, "tokenized_bleu": 21.0},
        "layers": [
            {
                "stack": stack,
                "layer": layer,
                "sacrebleu": 20.0 - layer,
                "tokenized_bleu": 21.0 - layer,
                "sacrebleu_delta_percent": -5.0 * layer,
                "tokenized_bleu_delta_percent": -4.8 * layer,
            }
            for stack, count in (("encoder", 3), ("decoder", 2))
            for layer in range(1, count + 1)
        ],
    }
    figure = plot_layer_nonlinearity(results, tmp_path / "layers.png")
    assert [len(bars(axis)) for axis in figure.axes] == [3, 2, 3, 2]  # BLEU row, then Δ row
    assert [patch.get_height() for patch in bars(figure.axes[2])] == [-5.0, -10.0, -15.0]
    assert [tick.get_text() for tick in figure.axes[2].get_xticklabels()] == ["1", "2", "3"]

    gates = {
        "encoder": [
            {
                "layer": layer,
                "step": "depthwise_lstm",
                **{gate: summary(0.2 * layer) for gate in ("input", "forget", "output")},
            }
            for layer in (1, 2, 3)
        ],
        "decoder": [
            {
                "layer": layer,
                "step": step,
                **{gate: summary(0.5) for gate in ("input", "forget", "output")},
            }
            for layer in (1, 2)
            for step in ("self_attn_lstm", "cross_attn_lstm")
        ],
    }
    figure = plot_gate_statistics(gates, tmp_path / "gates.png")
    assert [len(bars(axis)) for axis in figure.axes] == [3 * 3, 3 * 4]
    assert figure.axes[0].get_ylabel() and figure.axes[0].get_xlabel() == "encoder layer"

    sdu = {
        "encoder": [
            {"layer": 1, "sublayer": name, **summary(0.3)} for name in ("self_attn", "ffn")
        ],
        "decoder": [
            {"layer": layer, "sublayer": name, **summary(0.6)}
            for layer in (1, 2)
            for name in ("self_attn", "cross_attn", "ffn")
        ],
    }
    figure = plot_sdu_gates(sdu, tmp_path / "sdu.png")
    assert [len(bars(axis)) for axis in figure.axes] == [2, 6]

    figure = plot_transparent_attention_weights(torch.rand(2, 4).softmax(-1), tmp_path / "ta.png")
    assert figure.axes[0].images[0].get_array().shape == (2, 4)
    assert len(figure.axes[0].texts) == 8

    assert (
        plot_model_internals(
            "dlcl_weights",
            {"encoder": [[1.0, 0], [0.5, 0.5]], "decoder": [[1.0]]},
            tmp_path / "dlcl.png",
        )
        == tmp_path / "dlcl.png"
    )
    for name in ("layers", "gates", "sdu", "ta", "dlcl"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------------------------
# Scripts
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory, pairs):
    folder = tmp_path_factory.mktemp("corpus")
    for split, chunk in (("train", pairs[:40]), ("test", pairs[40:46])):
        for side, language in enumerate(("en", "de")):
            (folder / f"{split}.{language}").write_text(
                "".join(pair[side] + "\n" for pair in chunk), encoding="utf-8"
            )
    return folder


def save(model, tokenizer, folder: Path) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_analyze_layers_script_writes_the_table_the_plot_and_the_hypotheses(
    tokenizer, corpus_folder, tmp_path
):
    model_dir = save(
        build(DwLstmConfig, tokenizer, max_position_embeddings=48), tokenizer, tmp_path / "model"
    )
    arguments = [
        "--model",
        model_dir,
        "--data",
        corpus_folder,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--split",
        "test",
        "--train_split",
        "train",
        "--fit_steps",
        "2",
        "--fit_batch_size",
        "8",
        "--max_sentences",
        "4",
        "--num_beams",
        "2",
        "--threads",
        "1",
        "--output_dir",
        tmp_path / "out",
    ]
    run_script("analyze_layers", *arguments)
    results = json.loads((tmp_path / "out" / "layer_nonlinearity.json").read_text(encoding="utf-8"))
    assert [(row["stack"], row["layer"]) for row in results["layers"]] == [
        ("encoder", 1),
        ("encoder", 2),
        ("decoder", 1),
        ("decoder", 2),
    ]
    assert results["decoding"]["test_pairs"] == 4 and results["fit"]["steps"] == 2
    assert (tmp_path / "out" / "layer_nonlinearity.png").read_bytes()[:4] == b"\x89PNG"
    hypotheses = sorted(path.name for path in (tmp_path / "out" / "hypotheses").iterdir())
    assert hypotheses == [
        "decoder-1.txt",
        "decoder-2.txt",
        "encoder-1.txt",
        "encoder-2.txt",
        "full.txt",
    ]
    with pytest.raises(ValueError, match="not empty"):
        run_script("analyze_layers", *arguments)


def test_plot_internals_script_picks_what_the_model_has(tokenizer, corpus_folder, tmp_path):
    corpus = [
        "--data",
        corpus_folder,
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--split",
        "test",
    ]
    for name, config_class, internals in [
        ("dwlstm", DwLstmConfig, "depthwise_lstm_gates"),
        ("highway", HighwayTransformerConfig, "sdu_gates"),
        ("ta", TransparentAttentionConfig, "transparent_attention_weights"),
        ("dlcl", DlclConfig, "dlcl_weights"),
    ]:
        model_dir = save(build(config_class, tokenizer), tokenizer, tmp_path / name)
        run_script(
            "plot_internals",
            "--model",
            model_dir,
            *corpus,
            "--output_dir",
            tmp_path / f"{name}-out",
        )
        assert sorted(path.name for path in (tmp_path / f"{name}-out").iterdir()) == [
            f"{internals}.json",
            f"{internals}.png",
        ]
    with pytest.raises(ValueError, match="statistics over a corpus"):
        run_script(
            "plot_internals", "--model", tmp_path / "dwlstm", "--output_dir", tmp_path / "no-data"
        )
    residual = save(build(ResidualTransformerConfig, tokenizer), tokenizer, tmp_path / "residual")
    with pytest.raises(ValueError, match="no gates or layer weights"):
        run_script("plot_internals", "--model", residual, "--output_dir", tmp_path / "residual-out")


@pytest.mark.parametrize("config_class", [DwLstmConfig, ResidualTransformerConfig])
def test_source_variation_is_zero_between_identical_sources_and_does_not_depend_on_padding(
    config_class, tokenizer, pairs
):
    model = build(config_class, tokenizer)
    rows = source_variation(model, tokenized_batches(tokenizer, pairs[:6], 6))
    assert [row["layer"] for row in rows] == list(range(SIZE["encoder_layers"] + 1))
    assert all(row["between sources"] > 1e-3 and row["within a source"] > 1e-3 for row in rows)
    alone = source_variation(model, tokenized_batches(tokenizer, pairs[:6], 1))  # no padding at all
    for padded, unpadded in zip(rows, alone, strict=True):
        for name in ("between sources", "within a source", "mean square"):
            assert padded[name] == pytest.approx(unpadded[name], rel=1e-6)
    same = source_variation(model, tokenized_batches(tokenizer, [pairs[0]] * 4 + [pairs[1]], 5))
    repeated = source_variation(model, tokenized_batches(tokenizer, [pairs[0]] * 4, 4))
    # one source four times: nothing varies
    assert all(row["between sources"] < 1e-12 for row in repeated)
    assert all(row["between sources"] > 1e-4 for row in same)  # the fifth source differs


def test_source_variation_is_zero_within_a_source_whose_positions_are_all_alike(tokenizer, pairs):
    model = build(ResidualTransformerConfig, tokenizer, position_embedding_type="learned")
    with torch.no_grad():  # every position of every source gets the same input vector
        model.get_input_embeddings().weight.fill_(0.5)
        model.get_encoder().embeddings.positions.weight.zero_()
    rows = source_variation(model, tokenized_batches(tokenizer, pairs[:4], 4))
    assert all(row["within a source"] < 1e-12 < row["mean square"] for row in rows)
    assert all(row["between sources"] < 1e-12 for row in rows)


def test_the_source_variation_picture_draws_a_line_per_model_in_each_panel(
    tokenizer, pairs, tmp_path
):
    rows = {
        name: source_variation(
            build(config_class, tokenizer), tokenized_batches(tokenizer, pairs[:4], 4)
        )
        for name, config_class in (
            ("dwlstm", DwLstmConfig),
            ("residual", ResidualTransformerConfig),
        )
    }
    figure = plot_source_variation(rows, tmp_path / "variation.png")
    assert (tmp_path / "variation.png").read_bytes()[:4] == b"\x89PNG"
    for axis, key in zip(figure.axes, ("between sources", "within a source"), strict=True):
        assert [line.get_label() for line in axis.get_lines()] == ["dwlstm", "residual"]
        assert list(axis.get_lines()[1].get_ydata()) == [row[key] for row in rows["residual"]]
