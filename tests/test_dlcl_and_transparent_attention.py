"""The members that connect layers across a stack: DLCL (Wang et al. 2019, Eqs. 7-9) and transparent
attention (Bapna et al. 2018).

The per-model checks (gradients, save/load, cache, beams, padding, ...) run for them through
`CASES` in conftest; this file pins down their equations and their extra API.
"""

import matplotlib.image
import pytest
import torch
from conftest import random_ids, read_multi30k, tiny_config, tiny_model
from datasets import Dataset
from transformers import (
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    pipeline,
)

from modeling_dwlstm import DlclForConditionalGeneration
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.lab.gradient_norms import embedding_gradient_norms
from nmt_toolkit.lab.plotting_analysis import plot_dlcl_weights


def logits(model, **inputs):
    with torch.no_grad():
        return model(**inputs).logits


def padded_inputs():
    input_ids = random_ids(2, 7)
    input_ids[0, 5:] = 1
    mask = (input_ids != 1).long()
    return dict(
        input_ids=input_ids, attention_mask=mask, decoder_input_ids=random_ids(2, 5, seed=3)
    )


def with_weights_of(model, donor):
    """`model` with every parameter `donor` has; returns the names `model` has in addition."""
    missing, unexpected = model.load_state_dict(donor.state_dict(), strict=False)
    assert not unexpected, unexpected
    return set(missing)


def select_previous_layer(connection):
    """W[c, c] = 1 and every other weight 0: consumer c reads only y_c, as a residual stack does."""
    with torch.no_grad():
        n = connection.num_consumers
        connection.weights.copy_(torch.eye(n)[tuple(torch.tril_indices(n, n))])


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_dlcl_selecting_the_previous_layer_is_the_residual_model(norm):
    residual = tiny_model("residual-post", norm_position=norm)
    dlcl = tiny_model("dlcl-pre-learned", seed=1, norm_position=norm, dlcl_layer_norm=False)
    assert with_weights_of(dlcl, residual) == {
        "model.encoder.depth_connection.weights",
        "model.decoder.depth_connection.weights",
    }
    inputs = padded_inputs()
    # the average differs
    assert not torch.allclose(logits(dlcl, **inputs), logits(residual, **inputs))
    for stack in (dlcl.get_encoder(), dlcl.get_decoder()):
        select_previous_layer(stack.depth_connection)
    torch.testing.assert_close(
        logits(dlcl, **inputs), logits(residual, **inputs), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_dlcl_layer_inputs_follow_equations_8_and_9(norm):
    model = tiny_model("dlcl-pre-learned", norm_position=norm)
    encoder = model.get_encoder()
    connection = encoder.depth_connection
    with torch.no_grad():
        connection.weights.normal_()
        for layer_norm in connection.layer_norms:
            layer_norm.weight.normal_()
    layer_inputs = []
    for layer in encoder.layers:
        layer.register_forward_pre_hook(lambda module, args: layer_inputs.append(args[0]))
    with torch.no_grad():
        out = model(**padded_inputs(), output_hidden_states=True)
    outputs = out.encoder_hidden_states[:-1]  # y_0 .. y_{L-1}
    matrix = model.dlcl_weight_matrices()["encoder"]
    for consumer, layer_input in enumerate(layer_inputs):
        if norm == "pre":  # Eq. 8: sum_k W_k LN_k(y_k)
            expected = sum(
                matrix[consumer, k] * connection.layer_norms[k](outputs[k])
                for k in range(consumer + 1)
            )
        else:  # Eq. 9: LN(sum_k W_k y_k)
            expected = connection.layer_norms[consumer](
                sum(matrix[consumer, k] * outputs[k] for k in range(consumer + 1))
            )
        torch.testing.assert_close(layer_input, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "case,values",
    [
        ("dlcl-pre-learned", "average"),
        ("dlcl-post-average", "average"),
        ("dlcl-pre-one", "one"),
    ],
)
def test_dlcl_weight_matrices_at_initialisation(case, values, tmp_path):
    model = tiny_model(case)
    config = model.config
    for stack, layers in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        matrix = model.dlcl_weight_matrices()[stack]
        consumer = torch.arange(layers + 1, dtype=torch.float)[:, None]
        full = 1.0 / (consumer + 1) if values == "average" else torch.ones(1)
        assert torch.equal(matrix, torch.tril(full.expand(layers + 1, layers + 1)))
    learned = [
        name for name, _ in model.named_parameters() if name.endswith("depth_connection.weights")
    ]
    # fixed ablations are buffers
    assert len(learned) == (2 if config.dlcl_weights == "learned" else 0)
    model.save_pretrained(tmp_path)
    # _init_weights restores the fixed buffers
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    for stack, matrix in model.dlcl_weight_matrices().items():
        assert torch.equal(loaded.dlcl_weight_matrices()[stack], matrix)


def test_learned_dlcl_weights_train_and_are_read_out(tmp_path):
    model = tiny_model("dlcl-pre-learned")
    before = model.dlcl_weight_matrices()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(input_ids=random_ids(2, 7), labels=random_ids(2, 5, seed=2)).loss.backward()
    optimizer.step()
    after = model.dlcl_weight_matrices()
    assert not torch.equal(after["encoder"], before["encoder"])
    # still lower-triangular
    assert torch.equal(after["encoder"].triu(1), torch.zeros_like(after["encoder"]))
    model.save_pretrained(tmp_path)
    assert torch.equal(
        DlclForConditionalGeneration.from_pretrained(tmp_path).dlcl_weight_matrices()["encoder"],
        after["encoder"],
    )


def test_plot_dlcl_weights_writes_a_png(tmp_path):
    matrices = tiny_model("dlcl-pre-learned", encoder_layers=5).dlcl_weight_matrices()
    path = plot_dlcl_weights(matrices, tmp_path / "weights.png", mask_below=0.05)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(path).shape
    assert width > height > 100  # two heatmaps side by side
    with pytest.raises(ValueError, match="No weight matrices"):
        plot_dlcl_weights({}, tmp_path / "empty.png")


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_transparent_attention_one_hot_on_top_layer_is_ordinary_cross_attention(norm):
    residual = tiny_model("residual-post", norm_position=norm)
    transparent = tiny_model("ta-post", seed=1, norm_position=norm)
    assert with_weights_of(transparent, residual) == {
        "model.decoder.cross_attention_source.weights"
    }
    inputs = padded_inputs()
    assert not torch.allclose(logits(transparent, **inputs), logits(residual, **inputs))
    with torch.no_grad():
        scores = transparent.get_decoder().cross_attention_source.weights
        scores.fill_(float("-inf"))
        scores[:, -1] = 0.0  # softmax puts all weight on the encoder's output
    torch.testing.assert_close(
        logits(transparent, **inputs), logits(residual, **inputs), rtol=0, atol=1e-6
    )


def test_transparent_attention_memory_is_softmax_weighted_encoder_layers():
    model = tiny_model("ta-post", encoder_layers=3)
    source = model.get_decoder().cross_attention_source
    assert source.weights.shape == (model.config.decoder_layers, model.config.encoder_layers + 1)
    # starts as the plain average
    assert torch.equal(source.weights, torch.zeros_like(source.weights))
    with torch.no_grad():
        source.weights.normal_()
    memories = []
    for layer in model.get_decoder().layers:
        layer.register_forward_pre_hook(lambda module, args: memories.append(args[2]))
    with torch.no_grad():
        out = model(**padded_inputs(), output_hidden_states=True)
    encoder_layers = torch.stack(out.encoder_hidden_states)  # (L+1, B, S, d)
    for i, memory in enumerate(memories):
        expected = (source.weights[i].softmax(-1)[:, None, None, None] * encoder_layers).sum(0)
        torch.testing.assert_close(memory, expected, rtol=1e-5, atol=1e-6)


def test_transparent_attention_needs_every_encoder_layer():
    model = tiny_model("ta-post")
    input_ids = random_ids(2, 7)
    encoder_output = model.get_encoder()(input_ids=input_ids).last_hidden_state
    with pytest.raises(ValueError, match="reads every encoder layer"):
        model(encoder_outputs=encoder_output, decoder_input_ids=input_ids[:, :3])


def test_other_members_carry_no_layer_outputs():
    for case in ("residual-post", "dlcl-pre-learned", "dwlstm"):
        model = tiny_model(case)
        assert model.get_encoder()(input_ids=random_ids(2, 7)).layer_outputs is None
    assert tiny_model("ta-pre").get_encoder()(input_ids=random_ids(2, 7)).layer_outputs.shape == (
        2,
        7,
        3,
        16,
    )


def test_embedding_gradient_norms_are_recorded_per_step():
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config("dlcl-post-average"))
    batches = [
        dict(input_ids=random_ids(2, 7, seed=s), labels=random_ids(2, 5, seed=s + 10))
        for s in range(3)
    ]
    records = embedding_gradient_norms(model, batches, learning_rate=1e-3, warmup_steps=2)
    assert [r["step"] for r in records] == [1, 2, 3]
    # The first step's norm is that of the loss gradient w.r.t. the encoder embeddings, computed
    # independently.
    torch.manual_seed(0)
    fresh = AutoModelForSeq2SeqLM.from_config(tiny_config("dlcl-post-average")).train()
    embeddings = []
    fresh.get_encoder().embeddings.register_forward_hook(
        lambda module, args, output: embeddings.append(output)
    )
    loss = fresh(**batches[0]).loss
    (gradient,) = torch.autograd.grad(loss, embeddings[0])
    assert records[0]["embedding_gradient_norm"] == pytest.approx(gradient.norm().item(), rel=1e-5)
    assert records[0]["loss"] == pytest.approx(loss.item(), rel=1e-6)
    assert records[1]["loss"] != records[0]["loss"]  # the model trains between steps


@pytest.mark.parametrize("case", ["dlcl-pre-learned", "ta-post"])
def test_seq2seq_trainer_and_translation_pipeline(case, tmp_path):
    """Training, predict_with_generate and pipeline("translation") handle both members (TA's encoder
    output carries every layer through the Trainer's generate calls)."""
    english, german = read_multi30k("train", "en", 48), read_multi30k("train", "de", 48)
    tokenizer = train_joint_bpe_tokenizer(english + german, vocab_size=300)
    torch.manual_seed(0)
    config = tiny_config(case, **tokenizer_model_kwargs(tokenizer), max_position_embeddings=128)
    model = AutoModelForSeq2SeqLM.from_config(config)
    pairs = Dataset.from_dict({"en": english, "de": german}).map(
        lambda batch: tokenizer(
            batch["en"], text_target=batch["de"], truncation=True, max_length=48
        ),
        batched=True,
        remove_columns=["en", "de"],
    )
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        predict_with_generate=True,
        max_steps=2,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=8,
        learning_rate=3e-3,
        generation_max_length=12,
        generation_num_beams=2,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=0,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=pairs.select(range(32)),
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
    )
    assert trainer.train().training_loss > 0
    prediction = trainer.predict(pairs.select(range(32, 48)))
    assert prediction.predictions.shape[0] == 16

    model.eval()
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    batch = tokenizer([english[40]], return_tensors="pt")
    expected = tokenizer.decode(
        model.generate(**batch, num_beams=2, max_new_tokens=8)[0], skip_special_tokens=True
    )
    assert translator(english[40], num_beams=2, max_new_tokens=8) == [
        {"translation_text": expected}
    ]
