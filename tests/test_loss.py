"""The fused label-smoothed cross-entropy is the plain one: loss and gradients, float32 and bf16."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm import ResidualTransformerConfig
from modeling_dwlstm import loss as fused_loss
from modeling_dwlstm.loss import IGNORE_INDEX, linear_label_smoothed_cross_entropy
from nmt_toolkit.lab.speed import compiled, random_batch


def plain(hidden, weight, labels, smoothing):
    return F.cross_entropy(
        F.linear(hidden, weight).flatten(0, 1).float(),
        labels.flatten(),
        ignore_index=IGNORE_INDEX,
        label_smoothing=smoothing,
    )


def loss_and_gradients(loss_function, hidden, weight, labels, smoothing, scale=1.0):
    hidden, weight = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = loss_function(hidden, weight, labels, smoothing)
    (scale * loss).backward()
    return loss.detach(), hidden.grad, weight.grad


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
# several chunks (the last one short) / one chunk
@pytest.mark.parametrize("rows_per_chunk", [3, 1000])
def test_fused_loss_and_gradients_equal_the_plain_path(monkeypatch, smoothing, rows_per_chunk):
    vocab = 11
    monkeypatch.setattr(fused_loss, "ROWS_PER_CHUNK_ELEMENTS", rows_per_chunk * vocab)
    generator = torch.Generator().manual_seed(0)
    hidden, weight = (
        torch.randn(2, 7, 5, generator=generator),
        torch.randn(vocab, 5, generator=generator),
    )
    labels = torch.randint(0, vocab, (2, 7), generator=generator)
    labels[0, 5:] = IGNORE_INDEX  # padding is ignored: no loss, no gradient
    expected = loss_and_gradients(plain, hidden, weight, labels, smoothing, scale=3.0)
    fused = loss_and_gradients(
        linear_label_smoothed_cross_entropy, hidden, weight, labels, smoothing, scale=3.0
    )
    for got, want in zip(fused, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert fused[1][0, 5:].abs().max() == 0  # the ignored positions get no gradient


def test_fused_loss_under_bf16_autocast_follows_the_plain_path():
    generator = torch.Generator().manual_seed(1)
    hidden, weight = (
        torch.randn(3, 6, 16, generator=generator),
        0.3 * torch.randn(50, 16, generator=generator),
    )
    labels = torch.randint(0, 50, (3, 6), generator=generator)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = loss_and_gradients(plain, hidden, weight, labels, 0.1)
        fused = loss_and_gradients(linear_label_smoothed_cross_entropy, hidden, weight, labels, 0.1)
    assert fused[0].dtype == torch.float32 and fused[2].dtype == torch.float32
    for got, want in zip(fused, expected):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-3)


def test_a_compiled_training_step_traces_the_fused_loss():
    """torch.compile (dynamo, the `eager` backend to keep it fast) traces the training step's fused
    loss: the same loss and output-projection gradient as the uncompiled model."""

    config = ResidualTransformerConfig(
        vocab_size=40,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        ffn_dim=24,
        dropout=0.0,
        attention_dropout=0.0,
    )
    batch = random_batch(3, 6, 5, 40)
    models = []
    for compile_it in (False, True):
        torch.manual_seed(0)
        model = AutoModelForSeq2SeqLM.from_config(config).train()
        model = compiled(model, backend="eager") if compile_it else model
        output = model(**batch)
        assert output.logits is None  # a training step never materialises the logits
        output.loss.backward()
        models.append((output.loss.detach(), model.lm_head.weight.grad))
    torch.testing.assert_close(models[1][0], models[0][0])
    torch.testing.assert_close(models[1][1], models[0][1])
