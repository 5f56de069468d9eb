"""Export the residual Transformer baselines to CTranslate2, the inference engine users deploy with.

`export_ctranslate2(model_dir, output_dir, quantization=None)` (`dwlstm-export-ctranslate2`)
converts a saved residual pre-norm or post-norm model, with its tokenizer, into a CTranslate2 model
directory:

    translator = ctranslate2.Translator("my-model-ct2", device="cpu", compute_type="int8")
    tokenizer = AutoTokenizer.from_pretrained("my-model", trust_remote_code=True)
    source = tokenizer.convert_ids_to_tokens(tokenizer("A man is riding a bike.")["input_ids"])
    target = translator.translate_batch([source], beam_size=4)[0].hypotheses[0]
    print(tokenizer.decode(tokenizer.convert_tokens_to_ids(target)))

The mapping fills CTranslate2's `TransformerSpec` as its own `BartLoader` does. One catch:
CTranslate2's post-norm spec has no final LayerNorm, while our post-norm stacks end with one
(docs/members.md), so the spec is built pre-norm and flagged post-norm
(`tests/test_ctranslate2_export.py` checks the log-probabilities). The other members change what
connects the layers, which the spec cannot express: they are refused (their fast path is
`precision.prepare_for_inference`). One float32 export serves every precision (CTranslate2 converts
at load time); a saved vocabulary shortlist is exported as its vocabulary map (`vmap.txt`).

Beam search: both engines rank finished hypotheses alike, but CTranslate2 stops once `beam_size`
have finished while transformers' default `early_stopping=False` searches on (a longer,
better-scored translation for 3-5 of 60-200 sentences here). `generate_kwargs_like_ctranslate2`
gives the settings under which both decode the same translations (`early_stopping=True`,
`min_new_tokens=1`); with `length_penalty=0` they agree anyway.
"""

import tempfile
from functools import partial
from pathlib import Path

from .checkpoints import load_saved_model, load_saved_tokenizer
from .files import atomic_directory, prepare_output_dir, releasing_output_dirs
from .shortlist import write_vocabulary_map

EXPORTABLE_MODEL_TYPE = "dwlstm-residual"
INSTALL_CTRANSLATE2 = "pip install 'modeling-dwlstm[ctranslate2]' (or: pip install ctranslate2)"


@releasing_output_dirs
def export_ctranslate2(
    model_dir: str, output_dir: str, quantization: str | None = None, overwrite: bool = False
) -> str:
    """Convert the saved residual model in `model_dir` (with its tokenizer) into a CTranslate2 model
    in `output_dir`; `quantization` is CTranslate2's weight type ("int8", "int8_float32", "float16",
    ..., None for float32). Returns `output_dir`."""
    # a missing ctranslate2 or a bad quantization is refused before the model is loaded
    _converter_class()
    check_quantization(quantization)
    if Path(output_dir).resolve() in (
        Path(model_dir).resolve(),
        *Path(model_dir).resolve().parents,
    ):
        raise ValueError(
            f"--output_dir {output_dir} holds the model being exported (the export replaces the "
            "whole folder); choose a folder outside it."
        )
    model = load_saved_model(model_dir, "--model")
    check_exportable(model)
    tokenizer = load_saved_tokenizer(model_dir, "--model")
    prepare_output_dir(output_dir, overwrite, replaced_whole=True)
    # Converted into a staging folder that replaces `output_dir` when complete: an overwrite stopped
    # anywhere leaves the old export whole (CTranslate2's converter deletes the folder first, then
    # writes).
    with atomic_directory(output_dir, replace=True) as staging:
        convert_loaded(
            model,
            tokenizer,
            str(staging),
            quantization,
            shortlist=getattr(model, "shortlist", None),
        )
    return str(output_dir)


def convert_loaded(
    model, tokenizer, output_dir: str, quantization: str | None = None, shortlist=None
) -> str:
    """Convert an already loaded model into a CTranslate2 model in `output_dir` (replaced if
    present): a residual member of this family through `transformer_spec`, a transformers
    `MarianMTModel` through CTranslate2's own Marian loader (what
    `ctranslate2.converters.TransformersConverter` runs for it). The benchmark's route: its models
    have random weights and are never saved. `shortlist` (a `generation_translation.Shortlist` over
    the tokenizer's ids) becomes the export's vocabulary map."""
    converter_class = _converter_class()
    check_quantization(quantization)
    if getattr(model.config, "model_type", None) == "marian":
        from ctranslate2.converters.transformers import MarianMTLoader

        load_spec = partial(MarianMTLoader(), model, tokenizer)
    else:
        check_exportable(model)
        load_spec = partial(transformer_spec, model, tokenizer)
    with tempfile.TemporaryDirectory() as directory:
        vmap = None
        if shortlist is not None:
            vmap = str(
                write_vocabulary_map(
                    shortlist,
                    vocabulary_tokens(tokenizer, model.config.vocab_size),
                    Path(directory) / "vmap.txt",
                )
            )
        return converter_class(load_spec).convert(
            str(output_dir), vmap=vmap, quantization=quantization, force=True
        )


def vocabulary_tokens(tokenizer, vocab_size: int) -> list[str]:
    """Token i's string for every id of the model, as the export registers them (`<unusedI>` past
    the tokenizer)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    return [token if token is not None else f"<unused{i}>" for i, token in enumerate(tokens)]


def check_exportable(model) -> None:
    """A one-line ValueError unless `model` is a residual (pre- or post-norm) translation model
    without language-aware parameters."""
    model_type = getattr(model.config, "model_type", None)
    if model_type != EXPORTABLE_MODEL_TYPE:
        raise ValueError(
            "CTranslate2 export takes the residual pre-norm and post-norm models ("
            f"{EXPORTABLE_MODEL_TYPE}); this is "
            f"{model_type}, whose connections between layers CTranslate2's Transformer cannot "
            "express: decode it "
            "with generate() (modeling_dwlstm.precision.prepare_for_inference for bfloat16 / int8)."
        )
    if getattr(model.config, "language_aware", False):
        raise ValueError(
            "This model selects LayerNorm or encoder-output parameters by each sentence's target "
            "language (LaLN / LaLT, Zhang et al. 2020: language_aware_norm / "
            "language_aware_transform), which CTranslate2's Transformer cannot express: decode "
            "it with generate() (modeling_dwlstm.precision.prepare_for_inference for bfloat16 / "
            "int8)."
        )
    activation = model.config.activation_function
    if activation not in ("relu", "gelu", "silu"):
        raise ValueError(
            f"CTranslate2 has no {activation!r} feed-forward activation; relu, gelu and silu "
            "convert."
        )


def check_quantization(quantization: str | None) -> None:
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise ValueError(
            f"quantization must be one of {', '.join(ACCEPTED_MODEL_TYPES)} (or none for float32), "
            f"got {quantization!r}."
        )


def transformer_spec(model, tokenizer):
    """The filled `ctranslate2.specs.TransformerSpec` of a residual model (see the module
    docstring)."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    pre_norm = config.norm_position == "pre"
    activation = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "silu": common_spec.Activation.SWISH,
    }[config.activation_function]
    # pre_norm=True: the spec then has the final LayerNorms
    spec = transformer_spec.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers),
        config.encoder_attention_heads,
        pre_norm=True,
        activation=activation,
    )
    spec.encoder.pre_norm = spec.decoder.pre_norm = pre_norm
    # int16, as the spec has it
    spec.decoder.num_heads = type(spec.decoder.num_heads)(config.decoder_attention_heads)
    for stack_spec, stack in (
        (spec.encoder, model.model.encoder),
        (spec.decoder, model.model.decoder),
    ):
        _set_stack(stack_spec, stack)
    spec.decoder.projection.weight = model.lm_head.weight
    tokens = vocabulary_tokens(tokenizer, config.vocab_size)
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.config.bos_token = tokenizer.bos_token
    spec.config.eos_token = tokenizer.eos_token
    spec.config.unk_token = tokenizer.unk_token
    spec.config.decoder_start_token = tokenizer.convert_ids_to_tokens(config.decoder_start_token_id)
    return spec


def _set_stack(spec, stack) -> None:
    embeddings = stack.embeddings
    spec.scale_embeddings = embeddings.scale
    # the encoder's: a list
    token_spec = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    token_spec.weight = embeddings.token_embedding.weight
    positions = embeddings.positions
    spec.position_encodings.encodings = (
        positions.table if hasattr(positions, "table") else positions.weight
    )
    _set_layer_norm(spec.layer_norm, stack.final_layer_norm)
    for layer_spec, layer in zip(spec.layer, stack.layers):
        _set_attention(layer_spec.self_attention, layer.self_attn)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_residual.norm)
        if hasattr(layer, "cross_attn"):
            _set_attention(layer_spec.attention, layer.cross_attn)
            _set_layer_norm(layer_spec.attention.layer_norm, layer.cross_attn_residual.norm)
        _set_linear(layer_spec.ffn.linear_0, layer.ffn.fc1)
        _set_linear(layer_spec.ffn.linear_1, layer.ffn.fc2)
        _set_layer_norm(layer_spec.ffn.layer_norm, layer.ffn_residual.norm)


def _set_attention(spec, attention) -> None:
    # linear[0]: queries, linear[1]: [keys; values], CTranslate2's layout
    if attention.is_cross_attention:
        _set_linear(spec.linear[0], attention.q_proj)
        _set_linear(spec.linear[1], attention.kv_proj)
    else:  # linear[0]: [queries; keys; values]
        _set_linear(spec.linear[0], attention.qkv_proj)
    _set_linear(spec.linear[-1], attention.out_proj)


def _set_linear(spec, linear) -> None:
    spec.weight = linear.weight
    spec.bias = linear.bias


def _set_layer_norm(spec, norm) -> None:
    spec.gamma = norm.weight
    spec.beta = norm.bias


def _converter_class():
    try:
        from ctranslate2.converters import Converter
    except ImportError as error:
        raise ValueError(f"CTranslate2 export needs ctranslate2: {INSTALL_CTRANSLATE2}.") from error

    class LoadedModelConverter(Converter):
        """`ctranslate2.converters.Converter` whose model spec comes from `load_spec()` (a
        loaded model)."""

        def __init__(self, load_spec):
            self.load_spec = load_spec

        def _load(self):
            return self.load_spec()

    return LoadedModelConverter


def generate_kwargs_like_ctranslate2(
    beam_size: int = 2,
    length_penalty: float = 1.0,
    max_decoding_length: int = 256,
    min_decoding_length: int = 1,
) -> dict:
    """The `generate()` settings that decode the translations
    `translator.translate_batch(sources, beam_size=..., length_penalty=..., max_decoding_length=..., min_decoding_length=...)`
    decodes (CTranslate2's defaults as defaults): its stopping rule is transformers'
    `early_stopping=True` (see the module docstring)."""  # noqa: E501
    for name, value, smallest in (
        ("beam_size", beam_size, 1),
        ("max_decoding_length", max_decoding_length, 1),
        ("min_decoding_length", min_decoding_length, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
            raise ValueError(f"`{name}` must be an integer >= {smallest}, got {value!r}.")
    return {
        "num_beams": beam_size,
        "length_penalty": float(length_penalty),
        "early_stopping": True,
        "do_sample": False,
        "max_new_tokens": max_decoding_length,
        "min_new_tokens": min_decoding_length,
    }


def ctranslate2_tokens(tokenizer, texts: list[str]) -> list[list[str]]:
    """The source tokens CTranslate2 takes: what the model reads, special tokens included."""
    return [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(list(texts))["input_ids"]]


__all__ = [
    "export_ctranslate2",
    "convert_loaded",
    "check_exportable",
    "transformer_spec",
    "ctranslate2_tokens",
    "generate_kwargs_like_ctranslate2",
    "vocabulary_tokens",
]
