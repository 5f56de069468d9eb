"""ONNX export of every member: ONNX Runtime's greedy decoding gives generate()'s tokens (float32),
or nearly (int8).

torch.export takes several seconds per graph whatever the model's size, so each member is exported
once, at one encoder and two decoder layers (two, so that each layer's cache reaches its own
layer)."""

import json

import numpy as np
import pytest
import torch
from conftest import CASES, random_ids, run_script, script_help, tiny_model, train_on_pairs
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm import MEMBERS, DwLstmConfig
from modeling_dwlstm.precision import prepare_for_inference
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.lab import speed
from nmt_toolkit.lab.onnx_speed import benchmark_onnx, format_report
from nmt_toolkit.onnx_export import INFO_FILE, OnnxTranslator, export_loaded, export_onnx, translate
from nmt_toolkit.quickstart_corpus import generate_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

LAYERS = dict(encoder_layers=1, decoder_layers=2)
# One case per member besides the depth-wise LSTM (the trained model below): gates up to layer 1, a
# concatenating RNN merge, fixed DLCL weights, ...
MEMBER_CASES = [
    "residual-pre",
    "highway-gated-mhdpa-up-to-layer-1",
    "rnn-ffn-own-hidden-concat",
    "dlcl-post-average",
    "ta-pre",
    "rezero",
]
PAIRS = generate_pairs(2000, seed=1)
NEW_SOURCES = [english for english, _ in generate_pairs(40, seed=7)]  # not trained on


class NoTokenizer:
    """The untrained models' stand-in tokenizer: the export saves it, the tests pass token ids."""

    def save_pretrained(self, folder):
        pass


def test_the_cases_cover_every_member():
    assert {CASES[case][0] for case in MEMBER_CASES} | {DwLstmConfig} == {
        member.config_class for member in MEMBERS
    }


def untrained_model(case: str):
    """A tiny model whose weights are far from their initial values, so that every sub-layer counts
    (ReZero's scalars start at zero, DLCL's and transparent attention's weights uniform)."""
    model = tiny_model(case, **LAYERS)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    return model


@pytest.mark.parametrize("case", MEMBER_CASES)
def test_float32_decoding_equals_the_model(case, tmp_path):
    """Greedy tokens equal to generate()'s, and the step-by-step logits to the model's
    teacher-forced ones (random models soon repeat a token: the logits are the close comparison);
    other batch and source sizes than the export's examples, a padded source."""
    model = untrained_model(case)
    export_loaded(model, NoTokenizer(), tmp_path)
    float32, int8 = (
        OnnxTranslator(tmp_path, "float32", threads=1),
        OnnxTranslator(tmp_path, "int8", threads=1),
    )
    for batch, length, seed in ((3, 9, 4), (1, 5, 5)):
        source = random_ids(batch, length, seed=seed)
        mask = torch.ones_like(source)
        if batch > 1:
            mask[-1, length - 3 :] = 0
        targets = random_ids(batch, 8, seed=seed + 10)
        with torch.no_grad():
            expected = model.generate(
                input_ids=source, attention_mask=mask, num_beams=1, do_sample=False, max_length=13
            ).numpy()
            logits = model(
                input_ids=source, attention_mask=mask, decoder_input_ids=targets
            ).logits.numpy()
        np.testing.assert_array_equal(float32.generate(source, mask, max_length=13), expected)
        np.testing.assert_allclose(
            float32.score(source, mask, targets), logits, rtol=1e-4, atol=1e-4
        )
        # int8 runs; its tokens: the trained model
        assert int8.generate(source, mask, max_length=13).shape[0] == batch


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny depth-wise LSTM trained for 300 steps (loss about 1.4: confident enough that int8
    changes few decisions; it ends its translations with </s> at various lengths), saved, and
    exported by scripts/export_onnx.py."""
    tokenizer = train_joint_bpe_tokenizer([text for pair in PAIRS for text in pair], vocab_size=300)
    torch.manual_seed(0)
    config = DwLstmConfig(
        **tokenizer_model_kwargs(tokenizer),
        d_model=32,
        **LAYERS,
        encoder_attention_heads=2,
        decoder_attention_heads=4,
        ffn_dim=64,
        max_position_embeddings=64,
        dropout=0.0,
    )
    model = train_on_pairs(
        AutoModelForSeq2SeqLM.from_config(config), tokenizer, PAIRS, steps=300, wrap=1968
    )
    folder = tmp_path_factory.mktemp("trained")
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    run_script("export_onnx", "--model", folder / "model", "--output_dir", folder / "onnx")
    return model, tokenizer, folder


def generated(model, tokenizer, sources, **kwargs) -> np.ndarray:
    with torch.no_grad():
        return model.generate(
            **tokenizer(sources, return_tensors="pt", padding=True),
            num_beams=1,
            do_sample=False,
            **kwargs,
        ).numpy()


def test_trained_model_float32_is_generate_and_int8_mostly(trained):
    model, tokenizer, folder = trained
    expected = generated(model, tokenizer, NEW_SOURCES, max_new_tokens=30)
    inputs = tokenizer(NEW_SOURCES, return_tensors="np", padding=True)
    ours = OnnxTranslator(folder / "onnx", threads=1).generate(
        inputs["input_ids"], inputs["attention_mask"], max_new_tokens=30
    )
    np.testing.assert_array_equal(ours, expected)
    # ends at various lengths
    assert len({int(np.argmax(row == tokenizer.eos_token_id)) for row in expected}) > 3
    int8 = OnnxTranslator(folder / "onnx", "int8", threads=1).generate(
        inputs["input_ids"], inputs["attention_mask"], max_new_tokens=30
    )
    texts = [tokenizer.batch_decode(ids, skip_special_tokens=True) for ids in (expected, int8)]
    same = sum(a == b for a, b in zip(*texts, strict=True))
    # Measured 36 of 40 on an AVX2 CPU without VNNI (7-bit weights, quantize_int8; 18 of 40 with
    # 8-bit ones).
    assert same >= 0.8 * len(NEW_SOURCES), (
        f"int8 translates {same} of {len(NEW_SOURCES)} sentences as float32"
    )


def test_translate_keeps_order_and_limits_like_generate(trained):
    model, tokenizer, folder = trained
    sources = [NEW_SOURCES[5], "", NEW_SOURCES[0], NEW_SOURCES[17]]
    expected = tokenizer.batch_decode(
        generated(model, tokenizer, [sources[0], sources[2], sources[3]], max_new_tokens=30),
        skip_special_tokens=True,
    )
    assert translate(folder / "onnx", sources, max_new_tokens=30, threads=1) == [
        expected[0],
        "",
        *expected[1:],
    ]
    forced = generated(model, tokenizer, NEW_SOURCES[:3], max_new_tokens=12, min_new_tokens=12)
    inputs = tokenizer(NEW_SOURCES[:3], return_tensors="np", padding=True)
    translator = OnnxTranslator(folder / "onnx", threads=1)
    np.testing.assert_array_equal(
        translator.generate(
            inputs["input_ids"], inputs["attention_mask"], max_new_tokens=12, min_new_tokens=12
        ),
        forced,
    )


def test_export_folder_and_script(trained, tmp_path):
    _, _, folder = trained
    info = json.loads((folder / "onnx" / INFO_FILE).read_text())
    assert set(info["graphs"]) == {"float32", "int8"} and info["model_type"] == "dwlstm"
    assert all(
        (folder / "onnx" / name).is_file()
        for graphs in info["graphs"].values()
        for name in graphs.values()
    )
    assert (folder / "onnx" / "tokenizer.json").is_file()
    assert {"--model", "--output_dir", "--no_int8", "--overwrite_output_dir"} <= set(
        script_help("export_onnx").split()
    )
    with pytest.raises(ValueError, match="is not empty"):
        run_script("export_onnx", "--model", folder / "model", "--output_dir", folder / "onnx")
    with pytest.raises(ValueError, match="holds the model being exported"):
        export_onnx(folder / "model", folder / "model", overwrite=True)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trainer_state.json").write_text("{}")
    with pytest.raises(ValueError, match="holds a training run or checkpoint"):
        run_script(
            "export_onnx",
            "--model",
            folder / "model",
            "--output_dir",
            tmp_path / "run",
            "--overwrite_output_dir",
        )


def test_bad_models_inputs_and_folders_are_refused(trained, tmp_path):
    model, _, folder = trained
    with pytest.raises(ValueError, match="prepared for int8"):
        export_loaded(
            prepare_for_inference(tiny_model("dwlstm"), quantize="int8"), NoTokenizer(), tmp_path
        )
    with pytest.raises(ValueError, match="takes a float32 model"):
        export_loaded(tiny_model("dwlstm").to(torch.bfloat16), NoTokenizer(), tmp_path)
    with pytest.raises(ValueError, match="holds no onnx_export.json"):
        OnnxTranslator(tmp_path)
    with pytest.raises(ValueError, match="precision must be one of float32, int8"):
        OnnxTranslator(folder / "onnx", "bfloat16")
    translator = OnnxTranslator(folder / "onnx", threads=1)
    source = random_ids(2, 4, high=model.config.vocab_size)
    for bad, message in (
        ({"attention_mask": np.array([[1, 1, 1, 1], [0, 0, 0, 0]])}, "have no tokens"),
        ({"attention_mask": np.ones((2, 3))}, "must have the shape of input_ids"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer"),
        ({"min_new_tokens": -1}, "min_new_tokens must be an integer >= 0"),
    ):
        with pytest.raises(ValueError, match=message):
            translator.generate(source, **bad)
    with pytest.raises(ValueError, match="longer than the model's 64 positions"):
        translator.generate(random_ids(1, 65, high=model.config.vocab_size))
    with pytest.raises(ValueError, match="must be a list of strings"):
        translator.translate("A single string.")


def test_speed_benchmark_rows_on_a_tiny_size(monkeypatch):
    """scripts/benchmark_onnx.py's library at a tiny size: every row timed, ONNX Runtime float32
    gives generate()'s float32 tokens (the forced length: every sentence decodes `new_tokens`
    tokens)."""
    monkeypatch.setitem(
        speed.SIZES,
        "tiny",
        dict(d_model=16, encoder_layers=1, decoder_layers=2, heads=4, ffn_dim=24),
    )
    report = benchmark_onnx(
        "dwlstm",
        "tiny",
        threads=1,
        repeats=2,
        batch=3,
        source_length=5,
        new_tokens=4,
        vocab_size=40,
        log=lambda message: None,
    )
    rows = ["generate/float32", "generate/int8", "onnxruntime/float32", "onnxruntime/int8"]
    assert list(report["sentences_per_second"]) == rows and all(
        rate > 0 for rate in report["sentences_per_second"].values()
    )
    assert all(low <= high for low, high in report["sentences_per_second_range"].values())
    agreement = report["token_agreement_with_generate_float32"]
    assert agreement["generate/float32"] == agreement["onnxruntime/float32"] == 1.0
    assert all(row in format_report(report) for row in rows)
