"""Bad configs, bad inputs and wrong checkpoints fail with errors that say what is wrong."""

import pytest
import torch
from conftest import random_ids, tiny_config, tiny_model

from modeling_dwlstm import (
    DepthWiseRnnConfig,
    DlclConfig,
    DwLstmConfig,
    DwLstmForConditionalGeneration,
    HighwayTransformerConfig,
    ResidualTransformerConfig,
    TransparentAttentionConfig,
    modeling_translation,
)


@pytest.mark.parametrize(
    "config_class,field,value,message",
    [
        (DwLstmConfig, "lstm_hidden", "gru", "lstm_hidden.*'linear', 'ffn', 'glu'"),
        (DwLstmConfig, "lstm_activation", "relu", "lstm_activation"),
        (DwLstmConfig, "share_gates", "all", "share_gates.*'global', 'per_stack', 'none'"),
        (DwLstmConfig, "share_hidden", "yes", "share_hidden"),
        (DwLstmConfig, "forget_gate_bias", float("inf"), "forget_gate_bias.*finite number"),
        (DwLstmConfig, "forget_gate_bias", "1", "forget_gate_bias.*finite number"),
        (DwLstmConfig, "decoder_merge", "mean", "decoder_merge"),
        (DwLstmConfig, "ffn_dim", 2047, "ffn_dim.*even"),
        (DwLstmConfig, "d_model", 500, "divisible"),
        (DwLstmConfig, "encoder_layers", 0, "encoder_layers"),
        (DwLstmConfig, "decoder_layers", 2.5, "decoder_layers"),
        (DwLstmConfig, "dropout", 1.5, "dropout"),
        (DwLstmConfig, "position_embedding_type", "rotary", "position_embedding_type"),
        (DwLstmConfig, "pad_token_id", 40000, "pad_token_id"),
        (DwLstmConfig, "language_pairs", ["english-german-french"], "language_pairs"),
        (ResidualTransformerConfig, "norm_position", "sandwich", "norm_position.*'post', 'pre'"),
        (ResidualTransformerConfig, "activation_function", "swish2", "activation_function"),
        (HighwayTransformerConfig, "sdu_gate", "relu", "sdu_gate.*'sigmoid', 'tanh'"),
        (HighwayTransformerConfig, "highway_variant", "gated_ffn", "highway_variant.*'sdu', 'highway_gate', 'gated_mhdpa'"),
        (HighwayTransformerConfig, "sdu_layers", 0, "sdu_layers.*integer >= 1"),
        (HighwayTransformerConfig, "sdu_layers", 2.0, "sdu_layers.*integer"),
        (HighwayTransformerConfig, "sdu_layers", True, "sdu_layers.*integer"),
        (HighwayTransformerConfig, "sdu_layers", 7, "at most the deeper stack's 6 layers.*sdu_layers=None"),
        (DepthWiseRnnConfig, "lstm_hidden", "gru", "lstm_hidden.*'linear', 'ffn', 'glu'"),
        (DepthWiseRnnConfig, "lstm_activation", "relu", "lstm_activation"),
        (DepthWiseRnnConfig, "share_hidden", 1, "share_hidden"),
        (DepthWiseRnnConfig, "decoder_merge", "two_lstm", "decoder_merge.*'add', 'concat'"),
        (DepthWiseRnnConfig, "ffn_dim", 2047, "ffn_dim.*even"),
        (DlclConfig, "dlcl_weights", "softmax", "dlcl_weights.*'learned', 'one', 'average'"),
        (DlclConfig, "dlcl_layer_norm", "no", "dlcl_layer_norm"),
        (DlclConfig, "norm_position", "middle", "norm_position"),
        (TransparentAttentionConfig, "norm_position", "none", "norm_position"),
        (TransparentAttentionConfig, "encoder_layers", -1, "encoder_layers"),
    ],
)
def test_bad_config_value_names_the_field(config_class, field, value, message):
    with pytest.raises(ValueError, match=message):
        config_class(**{field: value})


def test_misspelled_field_is_not_silently_ignored():
    with pytest.raises(ValueError, match="did you mean `share_gates`"):
        DwLstmConfig(share_gate="none")
    with pytest.raises(ValueError, match="did you mean `sdu_layers`"):
        HighwayTransformerConfig(sdu_layer=2)


@pytest.mark.parametrize("variant", ["highway_gate", "gated_mhdpa"])
def test_highway_variants_refuse_a_tanh_gate(variant):
    with pytest.raises(ValueError, match=f"sdu_gate='tanh'.*highway_variant='sdu' only.*{variant!r}.*Eq. 26"):
        HighwayTransformerConfig(highway_variant=variant, sdu_gate="tanh")


def test_checkpoint_of_another_member_is_refused(tmp_path):
    tiny_model("residual-post").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="'dwlstm-residual' model"):
        DwLstmForConditionalGeneration.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "inputs,message",
    [
        (dict(input_ids=torch.tensor([[3, 4, 99]])), "vocab_size=40"),
        (dict(input_ids=torch.tensor([[3, -4, 5]])), "vocab_size=40"),
        (dict(input_ids=torch.tensor([3, 4, 5])), r"shape \(batch, length\)"),
        (dict(input_ids=random_ids(2, 5), attention_mask=torch.ones(2, 4)), r"attention_mask must have shape \(batch, length\) = \(2, 5\)"),
        (dict(input_ids=random_ids(2, 5), inputs_embeds=torch.zeros(2, 5, 16)), "exactly one of"),
        (dict(input_ids=random_ids(2, 5), labels=random_ids(2, 4), decoder_input_ids=random_ids(2, 3)), "labels have shape"),
        (dict(input_ids=random_ids(1, 65)), "max_position_embeddings=64"),
        (dict(input_ids=random_ids(2, 5), decoder_input_ids=random_ids(3, 2)), "batch"),
        (dict(input_ids=random_ids(2, 5)), "decoder_input_ids"),
    ],
)
def test_bad_inputs_raise_clear_errors(inputs, message):
    with pytest.raises(ValueError, match=message):
        tiny_model("dwlstm")(**inputs)


def test_config_round_trips_through_dict():
    config = tiny_config("dwlstm-two-lstm", language_pairs=["en-de"])
    again = DwLstmConfig.from_dict(config.to_dict())
    assert again.to_dict() == config.to_dict()


@pytest.mark.parametrize("attention", ["sdpa", "eager", "decoding_step"])
def test_an_empty_batch_gives_empty_logits(case, attention, monkeypatch):
    """Cross-attention keys of fewer rows than the queries are shared by beams; an empty batch has no rows at all
    and must not be taken for that (it divided by zero). Every member, SDPA, eager attention, and the two matrix
    products of a decoding step (forced by a threshold of 0), with and without the cache."""
    model = tiny_model(case)
    model.set_attn_implementation("eager" if attention == "eager" else "sdpa")
    steps = []
    if attention == "decoding_step":
        monkeypatch.setattr(modeling_translation, "DECODING_STEP_MIN_QUERIES", 0)
        real = modeling_translation.decoding_step_attention
        monkeypatch.setattr(modeling_translation, "decoding_step_attention",
                            lambda *args, **kwargs: steps.append(1) or real(*args, **kwargs))
    source = random_ids(2, 5)[:0]
    with torch.no_grad():
        whole = model(input_ids=source, decoder_input_ids=random_ids(2, 3)[:0])
        first = model(input_ids=source, decoder_input_ids=random_ids(2, 1)[:0], use_cache=True)
        encoded = model.get_encoder()(input_ids=source)
        second = model(encoder_outputs=encoded, decoder_input_ids=random_ids(2, 1)[:0],
                       past_key_values=first.past_key_values)
    assert whole.logits.shape == (0, 3, 40)
    assert first.logits.shape == second.logits.shape == (0, 1, 40)
    assert (len(steps) > 0) == (attention == "decoding_step")
