"""CTranslate2 export of the residual members: the engine's float32 output is our model's."""

from pathlib import Path

import ctranslate2
import pytest
import torch
from conftest import run_script, tiny_model, train_on_pairs
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm import ResidualTransformerConfig
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.ctranslate2_export import (
    ctranslate2_tokens,
    export_ctranslate2,
    generate_kwargs_like_ctranslate2,
)
from nmt_toolkit.quickstart_corpus import generate_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = generate_pairs(200, seed=1)
SOURCES, TARGETS = [english for english, _ in PAIRS[:4]], [german for _, german in PAIRS[:4]]


@pytest.fixture(scope="module")
def tokenizer():
    return train_joint_bpe_tokenizer([text for pair in PAIRS for text in pair], vocab_size=300)


def saved_residual_model(tokenizer, directory: Path, **options) -> AutoModelForSeq2SeqLM:
    """A tiny residual model whose LayerNorms are not the identity (so that a missing or misplaced
    one shows)."""
    torch.manual_seed(0)
    config = ResidualTransformerConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=4,
        ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        **options,
    )
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model


@pytest.mark.parametrize(
    "options",
    [
        {"norm_position": "pre", "activation_function": "gelu"},
        # relu; its stacks end with a LayerNorm that CTranslate2's post-norm spec lacks
        {"norm_position": "post"},
        {
            "norm_position": "post",
            "position_embedding_type": "learned",
            "activation_function": "silu",
        },
    ],
)
def test_ctranslate2_float32_scores_and_greedy_output_equal_ours(tokenizer, options, tmp_path):
    model = saved_residual_model(tokenizer, tmp_path / "model", **options)
    translator = ctranslate2.Translator(
        export_ctranslate2(tmp_path / "model", tmp_path / "ct2"),
        device="cpu",
        compute_type="float32",
    )
    sources = ctranslate2_tokens(tokenizer, SOURCES)
    targets = [
        tokenizer.convert_ids_to_tokens(ids[:-1])
        for ids in tokenizer(text_target=TARGETS)["input_ids"]
    ]
    for source, target, scored in zip(SOURCES, TARGETS, translator.score_batch(sources, targets)):
        batch = tokenizer([source], text_target=[target], return_tensors="pt")
        with torch.no_grad():
            log_probs = (
                model(**batch)
                .logits.log_softmax(-1)[0]
                .gather(-1, batch["labels"][0, :, None])[:, 0]
            )
        # eos included
        torch.testing.assert_close(torch.tensor(scored.log_probs), log_probs, rtol=0, atol=1e-5)
    with torch.no_grad():
        generated = model.generate(
            **tokenizer(SOURCES, return_tensors="pt", padding=True), num_beams=1, max_new_tokens=20
        )
    special = {tokenizer.pad_token_id, tokenizer.eos_token_id}
    ours = [
        tokenizer.convert_ids_to_tokens([i for i in ids[1:].tolist() if i not in special])
        for ids in generated
    ]
    theirs = [
        result.hypotheses[0]
        for result in translator.translate_batch(sources, beam_size=1, max_decoding_length=20)
    ]
    assert theirs == ours


@pytest.fixture(scope="module", params=["pre", "post"])
def trained_export(request, tokenizer, tmp_path_factory):
    """A tiny residual model trained for 120 steps on the quickstart pairs (it then ends its
    translations with </s> at various lengths, which is where beam searches can differ), and its
    CTranslate2 export."""
    torch.manual_seed(0)
    config = ResidualTransformerConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=4,
        ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        norm_position=request.param,
    )
    model = train_on_pairs(
        AutoModelForSeq2SeqLM.from_config(config), tokenizer, PAIRS, steps=120, wrap=192
    )
    directory = tmp_path_factory.mktemp(f"trained-{request.param}")
    model.save_pretrained(directory / "model")
    tokenizer.save_pretrained(directory / "model")
    translator = ctranslate2.Translator(
        export_ctranslate2(directory / "model", directory / "ct2"),
        device="cpu",
        compute_type="float32",
    )
    return model, translator


def beam_outputs(model, translator, tokenizer, sources, generate_kwargs, translate_kwargs):
    """(generate()'s, CTranslate2's) best translations of `sources`, as token lists."""
    with torch.no_grad():
        generated = model.generate(
            **tokenizer(sources, return_tensors="pt", padding=True), **generate_kwargs
        )
    special = {tokenizer.pad_token_id, tokenizer.eos_token_id}
    ours = [
        tokenizer.convert_ids_to_tokens([i for i in ids[1:].tolist() if i not in special])
        for ids in generated
    ]
    theirs = [
        result.hypotheses[0]
        for result in translator.translate_batch(
            ctranslate2_tokens(tokenizer, sources), **translate_kwargs
        )
    ]
    return ours, theirs


NEW_SOURCES = [english for english, _ in generate_pairs(60, seed=7)]  # not trained on


@pytest.mark.parametrize("length_penalty", [1.0, 0.6, 0.0])
def test_beam_search_decodes_as_generate_with_its_stopping_rule(
    trained_export, tokenizer, length_penalty
):
    model, translator = trained_export
    settings = {"beam_size": 4, "length_penalty": length_penalty, "max_decoding_length": 30}
    ours, theirs = beam_outputs(
        model,
        translator,
        tokenizer,
        NEW_SOURCES,
        generate_kwargs_like_ctranslate2(**settings),
        settings,
    )
    assert ours == theirs
    # generate()'s default stopping rule finds other translations for some sentences
    if length_penalty == 1.0:
        defaults, _ = beam_outputs(
            model,
            translator,
            tokenizer,
            NEW_SOURCES,
            {"num_beams": 4, "length_penalty": 1.0, "max_new_tokens": 30},
            settings,
        )
        assert defaults != theirs


def test_generate_kwargs_like_ctranslate2_refuses_bad_settings():
    assert generate_kwargs_like_ctranslate2() == {
        "num_beams": 2,
        "length_penalty": 1.0,
        "early_stopping": True,
        "do_sample": False,
        "max_new_tokens": 256,
        "min_new_tokens": 1,
    }
    for bad in ({"beam_size": 0}, {"max_decoding_length": 2.5}, {"min_decoding_length": -1}):
        with pytest.raises(ValueError, match="must be an integer >="):
            generate_kwargs_like_ctranslate2(**bad)


def test_export_script_writes_an_int8_model_that_translates(tokenizer, tmp_path):
    saved_residual_model(tokenizer, tmp_path / "model", norm_position="pre")
    run_script(
        "export_ctranslate2",
        "--model",
        str(tmp_path / "model"),
        "--output_dir",
        str(tmp_path / "ct2"),
        "--quantization",
        "int8",
    )
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", compute_type="int8")
    result = translator.translate_batch(
        ctranslate2_tokens(tokenizer, SOURCES[:2]), max_decoding_length=10
    )
    assert all(0 < len(item.hypotheses[0]) <= 10 for item in result)
    with pytest.raises(ValueError, match="is not empty"):
        run_script(
            "export_ctranslate2",
            "--model",
            str(tmp_path / "model"),
            "--output_dir",
            str(tmp_path / "ct2"),
        )


def test_other_members_and_bad_arguments_are_refused(tokenizer, tmp_path):
    model = tiny_model("dwlstm")
    model.save_pretrained(tmp_path / "dwlstm")
    tokenizer.save_pretrained(tmp_path / "dwlstm")
    with pytest.raises(
        ValueError,
        match="dwlstm, whose connections between layers CTranslate2's Transformer cannot",
    ):
        export_ctranslate2(tmp_path / "dwlstm", tmp_path / "out")
    saved_residual_model(tokenizer, tmp_path / "residual")
    with pytest.raises(ValueError, match="quantization must be one of int8"):
        export_ctranslate2(tmp_path / "residual", tmp_path / "out", quantization="int4")
    with pytest.raises(ValueError, match="holds the model being exported"):
        export_ctranslate2(tmp_path / "residual", tmp_path, overwrite=True)
    assert not (tmp_path / "out").exists()
