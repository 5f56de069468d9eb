"""The depth diagnosis: token batches as training builds them, and per-layer records that equal what
autograd and the gates compute by hand."""

import copy
import json

import pytest
import torch
from conftest import MULTI30K, TINY, read_multi30k, run_script, tiny_model

from modeling_dwlstm.tokenization_dwlstm import train_joint_bpe_tokenizer
from nmt_toolkit.lab.analysis import real_positions
from nmt_toolkit.lab.depth_diagnosis import token_batches, trace_training
from nmt_toolkit.lab.plotting_analysis import plot_depth_diagnosis

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}"),
]


@pytest.fixture(scope="module")
def pairs():
    return list(zip(read_multi30k("train", "en", 200), read_multi30k("train", "de", 200)))


@pytest.fixture(scope="module")
def tokenizer(pairs):
    return train_joint_bpe_tokenizer(
        [text for pair in pairs for text in pair], vocab_size=TINY["vocab_size"] + 60
    )


@pytest.fixture(scope="module")
def batches(tokenizer, pairs):
    return token_batches(tokenizer, pairs, max_tokens=300, steps=4, seed=1)


def test_token_batches_pack_by_tokens_and_mask_padding(tokenizer, pairs):
    batches = token_batches(tokenizer, pairs, max_tokens=300, steps=40, seed=1)
    assert len(batches) == 40  # more than one epoch of 200 pairs: the batches cycle
    for batch in batches:
        assert batch["input_ids"].numel() <= 300 and batch["labels"].numel() <= 300
        padding = batch["labels"] == -100
        lengths = (~padding).sum(1)
        assert int(lengths.max()) == batch["labels"].shape[1]  # no all-padding column
        # padding at the end
        assert torch.equal(padding, torch.arange(batch["labels"].shape[1]) >= lengths[:, None])


def _model(tokenizer, case):
    return tiny_model(case, vocab_size=len(tokenizer), encoder_layers=4, decoder_layers=3).train()


def test_records_equal_what_autograd_and_the_gates_give_by_hand(tokenizer, batches):
    model = _model(tokenizer, "dwlstm")
    reference = copy.deepcopy(model)
    records = trace_training(model, batches, learning_rate=1e-3, warmup_steps=10, every=2)
    assert [record["step"] for record in records] == [1, 2, 4]
    first = records[0]
    assert len(first["encoder"]) == 4 and len(first["decoder"]) == 3

    # By hand on the untrained copy: the top encoder layer's output, its gradient, its forget gates.
    batch, captured = batches[0], {}
    mask = real_positions(batch, model.config.pad_token_id)["encoder"]
    top = reference.get_encoder().layers[-1]
    top.register_forward_hook(
        lambda module, args, output: (
            captured.update(output=output.output) or output.output.retain_grad()
        )
    )
    forgets = []
    gates = reference.get_encoder().layers[0].depthwise_lstm.gates
    gates.register_forward_hook(
        lambda module, args, projected: (
            forgets.append(module.activations(projected)[1]) if len(forgets) < 4 else None
        )
    )
    reference(**batch).loss.backward()
    row = first["encoder"][-1]
    assert row["output_gradient_norm"] == pytest.approx(
        captured["output"].grad[mask].norm().item(), rel=1e-5
    )
    assert row["output_rms"] == pytest.approx(
        captured["output"][mask].square().mean().sqrt().item(), rel=1e-5
    )
    # the encoder's 4 steps share one gate module
    product = torch.stack([forget[mask] for forget in forgets]).prod(0)
    assert row["embedding_share"] == pytest.approx(product.mean().item(), rel=1e-4)
    own = [p for p in top.parameters() if all(p is not q for q in gates.parameters())]
    assert row["parameter_gradient_norm"] == pytest.approx(
        torch.cat([p.grad.flatten() for p in own]).norm().item(), rel=1e-5
    )
    shares = [row["embedding_share"] for row in first["encoder"]]
    assert shares == sorted(shares, reverse=True) and 0 < shares[-1] < shares[0] < 1
    assert set(first["shared_gradient_norm"]) == {"encoder", "decoder"}


def test_residual_records_have_no_gates_and_the_picture_draws_both(tokenizer, batches, tmp_path):
    residual = trace_training(_model(tokenizer, "residual-pre"), batches, warmup_steps=10, every=2)
    assert residual[0]["shared_gradient_norm"] == {}
    assert all(
        "forget" not in row and "output_gradient_norm" in row for row in residual[0]["encoder"]
    )
    dwlstm = trace_training(_model(tokenizer, "dwlstm"), batches, warmup_steps=10, every=2)
    figure = plot_depth_diagnosis(
        {"dwlstm": dwlstm, "pre-norm": residual}, tmp_path / "diagnosis.png"
    )
    assert (tmp_path / "diagnosis.png").read_bytes()[:4] == b"\x89PNG"
    assert [axis.get_ylabel() for axis in figure.axes] == [
        "gradient norm at the layer output",
        "layer output RMS",
        "mean forget gate",
        "embedding share of the cell (prod f)",
    ]


def test_the_script_writes_traces_for_every_config(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    configs = []
    for name, settings in (
        ("dwlstm", {"model_type": "dwlstm"}),
        ("pre", {"model_type": "dwlstm-residual", "norm_position": "pre"}),
    ):
        (tmp_path / f"{name}.json").write_text(json.dumps(settings))
        configs.append(tmp_path / f"{name}.json")
    run_script(
        "diagnose_depth",
        "--data",
        MULTI30K,
        "--tokenizer",
        tmp_path / "tokenizer",
        "--configs",
        *configs,
        "--d_model",
        16,
        "--ffn_dim",
        24,
        "--heads",
        2,
        "--layers",
        2,
        "--steps",
        3,
        "--every",
        2,
        "--max_tokens",
        400,
        "--max_pairs",
        200,
        "--output_dir",
        tmp_path / "out",
        "--threads",
        1,
    )
    written = json.loads((tmp_path / "out" / "diagnosis.json").read_text())
    assert list(written["traces"]) == ["dwlstm", "pre"] and [
        r["step"] for r in written["traces"]["pre"]
    ] == [1, 2]
    assert (tmp_path / "out" / "diagnosis.png").is_file()
