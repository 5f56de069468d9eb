"""The GPU check: what only a CUDA device exercises, on tiny models. Skipped without CUDA;
`make test-gpu` runs it.

- a training step of every member under bf16 autocast, and `train_translation.py --bf16` through the
  Trainer;
- SDPA attention (PyTorch's flash and memory-efficient kernels, the models' default) equal to eager
  attention;
- the fused label-smoothed loss' gradients equal to the plain path's, in float32 and under bf16
  autocast;
- `generate()` beam search with the dynamic and the static cache;
- the translation pipeline on the GPU;
- the benchmark's GPU rows (training throughput, MFU, peak memory, generation);
- two-GPU DDP and FSDP2 through `accelerate launch` (when two GPUs are visible): test_gpu_launch.py.

`GPU_TESTS_DEVICE=cpu` runs the same tests on the CPU, which checks the tests themselves (not
the GPU).
"""

import json
import math
import os

import pytest
import torch
import torch.nn.functional as F
from conftest import random_ids, tiny_benchmark_settings, tiny_config, tiny_model
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AutoModelForSeq2SeqLM, TrainerCallback, pipeline

from modeling_dwlstm import loss as fused_loss
from modeling_dwlstm.loss import IGNORE_INDEX, linear_label_smoothed_cross_entropy
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit.lab import speed
from nmt_toolkit.lab.speed import MARIAN, run_benchmark
from nmt_toolkit.training import (
    DataArguments,
    ModelArguments,
    TranslationTrainingArguments,
    train_translation,
)

DEVICE = os.environ.get("GPU_TESTS_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(),
    reason="needs a CUDA device: run `make test-gpu` on a GPU machine",
)

# One case per member (conftest.CASES), both depth-wise LSTM decoders, both norm positions.
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

# A parallel corpus made up here, so that the check needs no data: 48 pairs over a tiny vocabulary.
ENGLISH = {
    "the cat": "die Katze",
    "the dog": "der Hund",
    "a child": "ein Kind",
    "the woman": "die Frau",
}
VERBS = {"sleeps": "schläft", "runs": "läuft", "eats": "isst", "sings": "singt"}
PLACES = {"": "", "outside": "draußen", "at home": "zu Hause"}
PAIRS = [
    (
        f"{subject} {verb} {place}".strip(),
        f"{ENGLISH[subject]} {VERBS[verb]} {PLACES[place]}".strip(),
    )
    for subject in ENGLISH
    for verb in VERBS
    for place in PLACES
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_joint_bpe_tokenizer(
        [text for pair in PAIRS for text in pair], vocab_size=120, min_frequency=1
    )


def padded_batch(seed: int = 1) -> dict:
    """Two source sentences, the second one padded, and target labels, on the device."""
    batch = dict(
        input_ids=random_ids(2, 7, seed=seed),
        attention_mask=torch.tensor([[1] * 7, [1] * 5 + [0] * 2]),
        labels=random_ids(2, 5, seed=seed + 1),
    )
    return {key: value.to(DEVICE) for key, value in batch.items()}


# ---------------------------------------------------------------------------------------------
# bf16 training
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", MEMBER_CASES)
def test_bf16_autocast_training_step_of_every_member(case):
    """Forward and backward under autocast(bfloat16): a loss within bf16's rounding of float32's
    (dropout off: on CUDA the dropout masks of a bf16 tensor and a float32 one differ under the same
    seed), then a training step with dropout: finite float32 gradients on every parameter and an
    Adam step that changes the weights."""
    model = tiny_model(case, dropout=0.1).to(DEVICE)
    batch = padded_batch()
    reference = model(**batch).loss.item()
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        evaluated = model(**batch).loss
    assert evaluated.dtype == torch.float32 and evaluated.item() == pytest.approx(
        reference, rel=0.02
    )
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.dtype == torch.float32, name
        assert bool(torch.isfinite(parameter.grad).all()), name
    before = [parameter.detach().clone() for parameter in model.parameters()]
    optimizer.step()
    assert any(not torch.equal(old, new) for old, new in zip(before, model.parameters()))


class RecordProjectionDtypes(TrainerCallback):
    def __init__(self):
        self.dtypes, self.devices = set(), set()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_hook(self.record)

    def record(self, module, inputs, output):
        self.dtypes.add(output.dtype)
        self.devices.add(output.device.type)


@pytest.fixture
def corpus_and_tokenizer(tmp_path, tokenizer):
    corpus = tmp_path / "pairs.jsonl"
    corpus.write_text("".join(json.dumps({"en": en, "de": de}) + "\n" for en, de in PAIRS))
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    return corpus, tmp_path / "tokenizer"


@pytest.mark.parametrize("case", MEMBER_CASES)
def test_bf16_flag_trains_every_member_through_the_trainer(
    case, corpus_and_tokenizer, tmp_path, request
):
    """`train_translation.py --bf16` on the GPU: the projections compute in bfloat16 on the device,
    the master weights stay float32, the losses are finite and the model is saved."""
    if DEVICE == "cpu":
        request.getfixturevalue("native_bfloat16")
    corpus, tokenizer_path = corpus_and_tokenizer
    config_file = tmp_path / f"{case}.json"
    config_file.write_text(tiny_config(case, dropout=0.1).to_json_string())
    projections = RecordProjectionDtypes()
    trainer = train_translation(
        ModelArguments(str(config_file), str(tokenizer_path)),
        DataArguments(dataset=str(corpus), source_lang="en", target_lang="de", max_tokens=128),
        TranslationTrainingArguments(
            output_dir=str(tmp_path / "run"),
            bf16=True,
            max_steps=3,
            warmup_steps=1,
            learning_rate=1e-3,
            save_steps=3,
            logging_steps=1,
            disable_tqdm=True,
            seed=0,
            use_cpu=DEVICE == "cpu",
        ),
        callbacks=[projections],
    )
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert projections.dtypes == {torch.bfloat16} and projections.devices == {
        torch.device(DEVICE).type
    }
    assert all(parameter.dtype == torch.float32 for parameter in trainer.model.parameters())
    assert (tmp_path / "run" / "model.safetensors").is_file()


# ---------------------------------------------------------------------------------------------
# Attention, the fused loss, generation, the pipeline
# ---------------------------------------------------------------------------------------------


def logits(model, inputs: dict, attention: str, dtype: torch.dtype) -> torch.Tensor:
    model.set_attn_implementation(attention)
    with torch.no_grad():
        return model.to(dtype)(**inputs).logits.float()


@pytest.mark.parametrize("case", ["dwlstm", "residual-pre", "ta-post"])
def test_sdpa_attention_equals_eager(case):
    """The models compute attention with SDPA unless set to "eager" (they support these two): on the
    GPU SDPA picks the flash or memory-efficient kernel, which must agree with the written-out
    softmax. In bfloat16 both differ from float32 by rounding: SDPA may not differ more than eager
    attention does."""
    model = tiny_model(case).to(DEVICE)
    inputs = padded_batch()
    inputs["decoder_input_ids"] = inputs.pop("labels")
    reference = logits(model, inputs, "eager", torch.float32)
    torch.testing.assert_close(
        logits(model, inputs, "sdpa", torch.float32), reference, rtol=1e-4, atol=1e-4
    )
    sdpa_error = (logits(model, inputs, "sdpa", torch.bfloat16) - reference).abs().max()
    eager_error = (logits(model, inputs, "eager", torch.bfloat16) - reference).abs().max()
    assert sdpa_error <= 2 * eager_error + 1e-2


@pytest.mark.skipif(DEVICE != "cuda", reason="PyTorch's flash attention kernel runs on CUDA only")
def test_the_flash_kernel_gives_the_eager_encoder_output():
    """The encoder without padding (no mask) in bfloat16 is what the flash kernel can take: forced
    to it, the output is as close to float32's as eager attention's is."""
    model = tiny_model("dwlstm").to(DEVICE)
    input_ids = random_ids(2, 9).to(DEVICE)

    def encoded(attention: str, dtype: torch.dtype, backend=SDPBackend.MATH) -> torch.Tensor:
        model.set_attn_implementation(attention)
        with torch.no_grad(), sdpa_kernel(backend):
            return model.to(dtype).get_encoder()(input_ids=input_ids).last_hidden_state.float()

    reference = encoded("eager", torch.float32)
    flash_error = (
        (encoded("sdpa", torch.bfloat16, SDPBackend.FLASH_ATTENTION) - reference).abs().max()
    )
    eager_error = (encoded("eager", torch.bfloat16) - reference).abs().max()
    assert flash_error <= 2 * eager_error + 1e-2


def plain_loss(hidden, weight, labels, smoothing):
    return F.cross_entropy(
        F.linear(hidden, weight).flatten(0, 1).float(),
        labels.flatten(),
        ignore_index=IGNORE_INDEX,
        label_smoothing=smoothing,
    )


def loss_and_gradients(loss_function, hidden, weight, labels):
    hidden, weight = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = loss_function(hidden, weight, labels, 0.1)
    loss.backward()
    return loss.detach(), hidden.grad, weight.grad


@pytest.mark.parametrize("autocast, tolerance", [(False, 1e-5), (True, 2e-2)])
def test_fused_loss_gradients_equal_the_plain_path(monkeypatch, autocast, tolerance):
    """The training step's loss, fused with the output projection, against `F.cross_entropy` of the
    logits on the device: loss, hidden-state and weight gradients, over several chunks of rows (the
    last one short)."""
    vocab = 1000
    monkeypatch.setattr(fused_loss, "ROWS_PER_CHUNK_ELEMENTS", 7 * vocab)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(4, 9, 32, generator=generator).to(DEVICE)
    weight = (0.2 * torch.randn(vocab, 32, generator=generator)).to(DEVICE)
    labels = torch.randint(0, vocab, (4, 9), generator=generator).to(DEVICE)
    labels[1, 6:] = IGNORE_INDEX
    with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=autocast):
        expected = loss_and_gradients(plain_loss, hidden, weight, labels)
        fused = loss_and_gradients(linear_label_smoothed_cross_entropy, hidden, weight, labels)
    for got, want in zip(fused, expected):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance / 10)
    assert fused[1][1, 6:].abs().max() == 0


@pytest.mark.parametrize("case", MEMBER_CASES)
def test_beam_search_with_the_dynamic_and_the_static_cache(case):
    model = tiny_model(case).to(DEVICE)
    inputs = padded_batch()
    del inputs["labels"]
    settings = dict(num_beams=4, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    dynamic = model.generate(**inputs, **settings)
    static = model.generate(**inputs, **settings, cache_implementation="static")
    assert dynamic.device.type == torch.device(DEVICE).type and dynamic.shape == (2, 9)
    assert torch.equal(static, dynamic)


def test_the_pipeline_translates_on_the_gpu(tokenizer):
    torch.manual_seed(0)
    config = tiny_config("dwlstm", **tokenizer_model_kwargs(tokenizer))
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    translator = pipeline("translation", model=model, tokenizer=tokenizer, device=DEVICE)
    assert (
        translator.device.type == torch.device(DEVICE).type
        and model.device.type == torch.device(DEVICE).type
    )
    sentences = [PAIRS[0][0], PAIRS[5][0]]
    translations = translator(sentences, num_beams=4, max_new_tokens=6)
    for sentence, translation in zip(sentences, translations):
        encoded = tokenizer(sentence, return_tensors="pt").to(DEVICE)
        generated = model.generate(**encoded, num_beams=4, max_new_tokens=6)
        assert translation["translation_text"] == tokenizer.decode(
            generated[0], skip_special_tokens=True
        )


# ---------------------------------------------------------------------------------------------
# The benchmark's GPU rows
# ---------------------------------------------------------------------------------------------


def test_the_benchmarks_gpu_rows(monkeypatch, tmp_path):
    """`scripts/measure_speed.py` on a GPU: training throughput and achieved FLOP/s under bf16
    autocast against the measured matmul peak (the MFU), peak memory from CUDA's allocator,
    generation with beam 4 and greedy."""
    monkeypatch.setitem(
        speed.SIZES,
        "tiny",
        dict(d_model=16, encoder_layers=2, decoder_layers=3, heads=4, ffn_dim=24),
    )
    settings = tiny_benchmark_settings(
        40,
        lengths=(4, 8),
        device=DEVICE,
        peak_matmul_size=256,
        measure_memory=True,
        precisions=("float32",),
    )
    report = run_benchmark(settings, log=lambda message: None)
    rows, machine = report["sizes"]["tiny"], report["machine"]
    if DEVICE == "cuda":
        assert machine["device"] == torch.cuda.get_device_name()
    assert machine["matmul_peak_flops_per_s"] > 0  # the denominator of the MFU
    assert set(rows) == {"dwlstm", MARIAN}
    for row in rows.values():
        assert row["beam4_sentences_per_s"] > 0 and row["greedy_sentences_per_s"] > 0
        assert row["train"][8]["tokens_per_s"] > 0 and row["train"][8]["flops_per_s"] > 0
        assert row["train_peak_memory_bytes"] > 0
    speed.write_report(report, tmp_path / "benchmark.json")
    assert (
        json.loads((tmp_path / "benchmark.json").read_text())["sizes"]["tiny"]["dwlstm"][
            "parameters"
        ]
        > 0
    )
