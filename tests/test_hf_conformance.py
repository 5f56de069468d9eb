"""The model side of "nothing silent": what transformers users expect of a built-in seq2seq
model (MarianMTModel is the reference), for every family member."""

import pytest
import torch
import torch.nn.functional as F
import transformers
from conftest import random_ids, tiny_model
from packaging.version import Version
from transformers import AutoModelForSeq2SeqLM, Trainer, TrainingArguments
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache

from modeling_dwlstm.modeling_translation import CACHE_FIELD

pytestmark = pytest.mark.usefixtures("one_thread")

# One case per member (and both kinds of connection across a stack).
MEMBER_CASES = [
    "dwlstm",
    "dwlstm-two-lstm",
    "residual-pre",
    "residual-post",
    "highway-sdu-sigmoid-all-layers",
    "rnn-glu-own-hidden-add",
    "dlcl-pre-learned",
    "ta-post",
    "rezero",
]


@pytest.mark.parametrize("case", MEMBER_CASES)
def test_config_output_flags_are_read_when_the_call_does_not_say(case):
    model = tiny_model(case, output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        out = model(input_ids=random_ids(2, 7), decoder_input_ids=random_ids(2, 4, seed=3))
        quiet = model(
            input_ids=random_ids(2, 7),
            decoder_input_ids=random_ids(2, 4, seed=3),
            output_hidden_states=False,
            output_attentions=False,
        )
    config = model.config
    assert len(out.encoder_hidden_states) == config.encoder_layers + 1
    assert len(out.decoder_hidden_states) == config.decoder_layers + 1
    assert (
        len(out.encoder_attentions) == config.encoder_layers
        and out.encoder_attentions[0] is not None
    )
    assert (
        len(out.cross_attentions) == config.decoder_layers and out.cross_attentions[0] is not None
    )
    assert quiet.encoder_hidden_states is None and quiet.cross_attentions is None  # the call wins


@pytest.mark.parametrize("mask_batch", [1, 3])
@pytest.mark.parametrize("which", ["attention_mask", "decoder_attention_mask"])
def test_a_mask_of_another_batch_size_is_refused_not_broadcast(which, mask_batch):
    model = tiny_model("residual-pre")
    length = 7 if which == "attention_mask" else 4
    inputs = dict(input_ids=random_ids(2, 7), decoder_input_ids=random_ids(2, 4, seed=3))
    inputs[which] = torch.ones(mask_batch, length, dtype=torch.long)
    with pytest.raises(ValueError, match="never broadcast over the batch"):
        model(**inputs)


@pytest.mark.parametrize(
    "input_ids", [[[5, 6, 7]], torch.tensor([[5.0, 6.0]]), torch.tensor([[True, False]])]
)
def test_token_ids_that_are_not_an_integer_tensor_raise_a_type_error(input_ids):
    model = tiny_model("dwlstm")
    with pytest.raises(TypeError, match=r"integer torch.Tensor.*return_tensors='pt'"):
        model(input_ids=input_ids, decoder_input_ids=torch.tensor([[1, 5]]))


@pytest.mark.parametrize("case", ["dwlstm", "residual-post", "ta-post"])
def test_eager_attention_is_honoured(case, monkeypatch, tmp_path):
    model = tiny_model(case)
    inputs = dict(
        input_ids=random_ids(2, 7),
        attention_mask=torch.tensor([[1] * 7, [1] * 5 + [0] * 2]),
        decoder_input_ids=random_ids(2, 4, seed=3),
    )
    with torch.no_grad():
        expected = model(**inputs).logits  # SDPA
    model.save_pretrained(tmp_path)

    def no_sdpa(*args, **kwargs):
        raise AssertionError("SDPA ran although the model is set to eager attention")

    monkeypatch.setattr(F, "scaled_dot_product_attention", no_sdpa)
    model.set_attn_implementation("eager")
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        for eager in (model, reloaded):
            torch.testing.assert_close(eager(**inputs).logits, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", MEMBER_CASES)
@pytest.mark.parametrize("num_beams", [1, 2])
def test_static_cache_generates_what_the_dynamic_cache_does(case, num_beams):
    model = tiny_model(case)
    inputs = dict(
        input_ids=random_ids(2, 7), attention_mask=torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    )
    settings = dict(num_beams=num_beams, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    dynamic = model.generate(**inputs, **settings)
    static = model.generate(**inputs, **settings, cache_implementation="static")
    assert torch.equal(static, dynamic)


def test_transparent_attention_decoder_alone_says_what_it_needs():
    model = tiny_model("ta-post")
    input_ids = random_ids(2, 7)
    encoder_output = model.get_encoder()(input_ids=input_ids)
    decoder = model.get_decoder()
    with pytest.raises(
        ValueError,
        match=(
            r"reads every encoder layer: pass encoder_hidden_states = "
            r"encoder\(...\).layer_outputs"
        ),
    ):
        decoder(input_ids=input_ids[:, :3], encoder_hidden_states=encoder_output.last_hidden_state)
    out = decoder(input_ids=input_ids[:, :3], encoder_hidden_states=encoder_output.layer_outputs)
    assert out.last_hidden_state.shape == (2, 3, model.config.d_model)


@pytest.mark.parametrize(
    "inputs, rows",
    [
        (dict(input_ids=torch.zeros(2, 0, dtype=torch.long)), r"\[0, 1\]"),
        (
            dict(
                input_ids=random_ids(2, 5),
                attention_mask=torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]]),
            ),
            r"\[1\]",
        ),
    ],
)
def test_generate_refuses_sources_without_tokens_instead_of_hallucinating(inputs, rows):
    model = tiny_model("dwlstm")
    with pytest.raises(ValueError, match=rows + r" have no tokens .* empty translation"):
        model.generate(**inputs, max_new_tokens=3)
    with pytest.raises(ValueError, match="have no tokens"):
        model.generate(
            inputs["input_ids"],
            **{k: v for k, v in inputs.items() if k != "input_ids"},
            max_new_tokens=3,
        )


# --- The cache under both names: transformers 5.24 renamed `past_key_values` to `cache` -----------


def test_the_cache_field_is_the_installed_transformers_name():
    expected = (
        "cache" if Version(transformers.__version__) >= Version("5.24") else "past_key_values"
    )
    assert CACHE_FIELD == expected


@pytest.mark.parametrize("case", ["dwlstm", "residual-pre", "ta-post"])
def test_the_cache_is_taken_under_either_name(case):
    """generate() passes `cache` from transformers 5.24 on, `past_key_values` before; users may
    write either. The output carries the cache where the installed version's generate() looks
    for it."""
    model = tiny_model(case)
    input_ids, decoder_input_ids = random_ids(2, 7), random_ids(2, 4, seed=3)
    encoder_outputs = model.get_encoder()(input_ids=input_ids)
    decoder_states = model.model.decoder.cross_attention_source.encoder_states(encoder_outputs)
    with torch.no_grad():
        full = model(
            encoder_outputs=encoder_outputs, decoder_input_ids=decoder_input_ids, use_cache=False
        )
        for name in ("cache", "past_key_values"):
            first = model(
                encoder_outputs=encoder_outputs,
                decoder_input_ids=decoder_input_ids[:, :3],
                use_cache=True,
            )
            assert CACHE_FIELD in first and isinstance(first[CACHE_FIELD], EncoderDecoderCache)
            last = model(
                encoder_outputs=encoder_outputs,
                decoder_input_ids=decoder_input_ids[:, 3:],
                **{name: first[CACHE_FIELD]},
            )
            torch.testing.assert_close(last.logits, full.logits[:, 3:], rtol=1e-5, atol=1e-5)
            # The bare model and the decoder alone take both names too.
            first = model.model.decoder(
                input_ids=decoder_input_ids[:, :3],
                encoder_hidden_states=decoder_states,
                use_cache=True,
            )
            last = model.model(
                encoder_outputs=encoder_outputs,
                decoder_input_ids=decoder_input_ids[:, 3:],
                **{name: getattr(first, CACHE_FIELD)},
            )
            torch.testing.assert_close(
                model.lm_head(last.last_hidden_state), full.logits[:, 3:], rtol=1e-5, atol=1e-5
            )
    with pytest.raises(ValueError, match="Pass the cache once"):
        model(
            encoder_outputs=encoder_outputs,
            decoder_input_ids=decoder_input_ids,
            past_key_values=EncoderDecoderCache(DynamicCache(), DynamicCache()),
            cache=EncoderDecoderCache(DynamicCache(), DynamicCache()),
        )


@pytest.mark.parametrize("case", ["dwlstm", "residual-pre", "ta-post"])
def test_gradient_checkpointing_trains_the_bare_model_without_a_cache(case):
    """The bare model caches by default (config.use_cache). A checkpointed layer runs again in the
    backward pass and would write the cache twice (with transformers 5.24, which clears only a
    `cache` keyword, the backward pass failed on mismatched shapes): the decoder runs without a
    cache, with the gradients it has without checkpointing."""

    def forward_backward(model):
        model.train()
        out = model.model(input_ids=random_ids(2, 7), decoder_input_ids=random_ids(2, 5, seed=2))
        out.last_hidden_state.pow(2).sum().backward()
        return out, {
            name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None
        }

    model = tiny_model(case)
    cached, expected = forward_backward(model)
    assert isinstance(cached[CACHE_FIELD], Cache)
    model.zero_grad(set_to_none=True)
    model.activation_checkpointing_enable()
    out, gradients = forward_backward(model)
    assert out.get(CACHE_FIELD) is None
    assert gradients.keys() == expected.keys()
    for name, grad in gradients.items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-5, atol=1e-6, msg=name)


def test_trainer_leaves_the_cache_out_of_evaluation_logits(tmp_path):
    """Trainer drops `config.keys_to_ignore_at_inference` from a forward's outputs before gathering
    them; the cache is `past_key_values` before transformers 5.24 and `cache` after. (Trainer turns
    caching off unless its `use_cache` says otherwise.)"""
    model = tiny_model("dwlstm")
    args = TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, use_cache=True, report_to=[], disable_tqdm=True
    )
    inputs = dict(input_ids=random_ids(2, 7), decoder_input_ids=random_ids(2, 4, seed=3))
    _, logits, _ = Trainer(model=model, args=args).prediction_step(
        model, inputs, prediction_loss_only=False
    )
    # the logits and the encoder output
    assert all(isinstance(tensor, torch.Tensor) for tensor in logits)
