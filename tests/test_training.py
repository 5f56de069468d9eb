"""Training with Seq2SeqTrainer: the papers' defaults, resuming a killed run exactly, a two-process
launch, and checkpoint averaging."""

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
from conftest import MULTI30K, REPOSITORY, read_multi30k, run_script, tiny_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, TrainerCallback

from modeling_dwlstm.building_blocks import sdpa
from modeling_dwlstm.precision import CpuFeatures
from nmt_toolkit import training
from nmt_toolkit.checkpoints import average_checkpoints, complete_checkpoints, last_checkpoints
from nmt_toolkit.data import load_parallel_corpus, train_corpus_tokenizer
from nmt_toolkit.files import CHECKSUMS_NAME
from nmt_toolkit.training import (
    DataArguments,
    ModelArguments,
    TokenBatchSeq2SeqTrainer,
    TranslationTrainingArguments,
    describe_device,
    gradient_accumulation_for,
    parse_training_arguments,
    train_translation,
)

TINY_MODEL = {
    "model_type": "dwlstm",
    "d_model": 16,
    "ffn_dim": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "dropout": 0.1,
    "max_position_embeddings": 128,
}
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models on a shared 2-core machine


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A Multi30k tokenizer and a tiny model config file, as scripts/train_tokenizer.py and
    hub_configs/ give."""
    directory = tmp_path_factory.mktemp("setup")
    corpus = load_parallel_corpus(MULTI30K, "en", "de", max_pairs=300)
    train_corpus_tokenizer([corpus], ["en", "de"], merges=200).save_pretrained(
        directory / "tokenizer"
    )
    (directory / "tiny.json").write_text(json.dumps(TINY_MODEL))
    return directory


def arguments(setup, output_dir, **training):
    model_args = ModelArguments(str(setup / "tiny.json"), str(setup / "tokenizer"))
    data_args = DataArguments(
        dataset=str(MULTI30K),
        source_lang="en",
        target_lang="de",
        max_train_pairs=40,
        max_tokens=160,
    )
    defaults = dict(
        output_dir=str(output_dir),
        max_steps=7,
        save_steps=3,
        warmup_steps=2,
        learning_rate=3e-3,
        gradient_accumulation_steps=2,
        logging_steps=1,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    return model_args, data_args, TranslationTrainingArguments(**{**defaults, **training})


def free_port() -> int:
    """A port no other process listens on now (helpers and CI jobs may launch at the same time)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class KillAfterFirstCheckpoint(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        raise KeyboardInterrupt(f"killed after saving step {state.global_step}")


def test_defaults_are_the_papers_recipe(tmp_path):
    _, data_args, training_args = parse_training_arguments(
        [
            "--model_name_or_path",
            "hub_configs/dwlstm-base-6l.json",
            "--tokenizer_name_or_path",
            "tok",
            "--dataset",
            "wmt14",
            "--source_lang",
            "en",
            "--target_lang",
            "de",
            "--output_dir",
            str(tmp_path),
        ]
    )
    assert (training_args.adam_beta1, training_args.adam_beta2, training_args.adam_epsilon) == (
        0.9,
        0.98,
        1e-9,
    )
    assert training_args.lr_scheduler_type == "inverse_sqrt" and training_args.warmup_steps == 8000
    assert (training_args.max_steps, training_args.save_steps, training_args.weight_decay) == (
        100_000,
        1500,
        0.0,
    )
    # the model applies config.label_smoothing (0.1)
    assert training_args.label_smoothing_factor == 0.0
    assert (data_args.max_length, data_args.max_tokens) == (256, 4096)
    assert (
        gradient_accumulation_for(25_000, 4096, 1) == 7
        and gradient_accumulation_for(25_000, 4096, 8) == 1
    )


def test_the_log_names_the_device_and_a_gpus_model(monkeypatch):
    monkeypatch.setattr(
        torch.cuda, "get_device_name", lambda device: f"NVIDIA H200 (index {device.index})"
    )
    assert describe_device(torch.device("cuda", 1)) == "cuda:1 (NVIDIA H200 (index 1))"
    assert describe_device(torch.device("cpu")) == "cpu"


def test_bad_training_arguments_raise_clear_errors(setup, tmp_path):
    (tmp_path / "no-type.json").write_text(json.dumps({"d_model": 16}))
    cases = [
        ({"model": {"tokenizer_name_or_path": None}}, "needs --tokenizer_name_or_path"),
        ({"model": {"model_name_or_path": str(tmp_path / "missing.json")}}, "does not exist"),
        ({"model": {"model_name_or_path": str(tmp_path / "no-type.json")}}, "has no `model_type`"),
        ({"model": {"config_overrides": "dropout=0.3,encoder_layer=3"}}, "encoder_layer"),
        ({"training": {"label_smoothing_factor": 0.1}}, "Leave --label_smoothing_factor at 0"),
        ({"data": {"validation_bleu": True}}, "--validation_bleu needs validation data"),
        ({"data": {"max_tokens": 8}}, "more than `max_tokens`=8"),
    ]
    for number, (changes, message) in enumerate(cases):
        model_args, data_args, training_args = arguments(
            setup, tmp_path / f"run{number}", **changes.get("training", {})
        )
        for name, value in changes.get("model", {}).items():
            setattr(model_args, name, value)
        for name, value in changes.get("data", {}).items():
            setattr(data_args, name, value)
        with pytest.raises(ValueError, match=message):
            train_translation(model_args, data_args, training_args)


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_run(setup, tmp_path):
    model_args, data_args, training_args = arguments(
        setup, tmp_path / "straight", gradient_accumulation_steps=1
    )
    # two batches of max_tokens=160: accumulate 2, like every run below
    data_args.target_tokens_per_update = 320
    trainer = train_translation(model_args, data_args, training_args)
    assert trainer.args.gradient_accumulation_steps == 2
    assert trainer.state.global_step == 7 and trainer.state.epoch > 1, (
        "the run must cross an epoch boundary"
    )
    log = (tmp_path / "straight" / "train.log").read_text()
    assert "step 7/7" in log and "loss" in log and "x 1 processes; on cpu." in log

    with pytest.raises(KeyboardInterrupt):
        train_translation(
            *arguments(setup, tmp_path / "killed"), callbacks=[KillAfterFirstCheckpoint()]
        )
    assert sorted(path.name for path in (tmp_path / "killed").glob("checkpoint-*")) == [
        "checkpoint-3"
    ]
    with pytest.raises(ValueError, match="already holds checkpoints"):
        train_translation(*arguments(setup, tmp_path / "killed"))
    resumed = train_translation(
        *arguments(setup, tmp_path / "killed", resume_from_checkpoint="last")
    )
    assert resumed.state.global_step == 7

    straight = load_file(tmp_path / "straight" / "model.safetensors")
    continued = load_file(tmp_path / "killed" / "model.safetensors")
    first_checkpoint = load_file(tmp_path / "killed" / "checkpoint-3" / "model.safetensors")
    assert straight.keys() == continued.keys()
    for name in straight:
        torch.testing.assert_close(continued[name], straight[name], rtol=0, atol=1e-6, msg=name)
    assert any(not torch.equal(straight[name], first_checkpoint[name]) for name in straight)

    # The saved model is a complete translation model: it loads and generates with the tokenizer
    # beside it.
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "killed")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "killed")
    assert model.config.language_pairs == ["en-de"] and model.config.label_smoothing == 0.1
    output = model.generate(
        **tokenizer(["A man ."], return_tensors="pt"), max_new_tokens=4, num_beams=1
    )
    assert output.shape[0] == 1


@pytest.mark.usefixtures("native_bfloat16")
def test_bf16_training_runs_on_the_cpu_and_tracks_the_float32_loss(setup, tmp_path):
    """`--bf16` as a user passes it: without an accelerator it trains on the CPU under
    autocast(bfloat16) (transformers alone would ask for --use_cpu); the same steps give finite
    losses close to float32's."""
    command_line = [
        "--model_name_or_path",
        "m",
        "--dataset",
        "d",
        "--output_dir",
        str(tmp_path / "parsed"),
        "--bf16",
    ]
    assert parse_training_arguments(command_line)[2].use_cpu != torch.accelerator.is_available()
    losses = {}
    for name, bf16 in (("float32", False), ("bfloat16", True)):
        projections = RecordProjectionDtypes()
        trainer = train_translation(
            *arguments(setup, tmp_path / name, max_steps=4, save_steps=100, bf16=bf16),
            callbacks=[projections],
        )
        losses[name] = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        assert len(losses[name]) == 4 and projections.dtypes == {
            torch.bfloat16 if bf16 else torch.float32
        }
        # master weights
        assert all(parameter.dtype == torch.float32 for parameter in trainer.model.parameters())
    assert all(math.isfinite(loss) for loss in losses["bfloat16"])
    # Measured: the four losses (about 6.0) differ by at most 6e-4; 0.5% leaves room for other CPUs'
    # kernels.
    np.testing.assert_allclose(losses["bfloat16"], losses["float32"], rtol=0.005)


@pytest.mark.skipif(
    torch.accelerator.is_available(), reason="the refusal concerns CPU-only training"
)
def test_bf16_training_is_refused_on_a_cpu_without_native_bfloat16(monkeypatch, tmp_path):
    avx2 = CpuFeatures(capability="AVX2", int8_dot_products=False, native_bfloat16=False)
    monkeypatch.setattr(training, "cpu_features", lambda: avx2)
    command_line = [
        "--model_name_or_path",
        "m",
        "--dataset",
        "d",
        "--output_dir",
        str(tmp_path / "run"),
        "--bf16",
    ]
    with pytest.raises(
        ValueError, match=r"--bf16 would train several times slower than float32 on this CPU \(AVX2"
    ):
        parse_training_arguments(command_line)
    assert not parse_training_arguments(command_line[:-1])[2].bf16  # float32 still trains


class RecordProjectionDtypes(TrainerCallback):
    """The dtypes of every projection's output in the training run (bfloat16 under autocast). The
    output projection is not among them: a training step fuses it with the loss (loss.py)."""

    def __init__(self):
        self.dtypes = set()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_hook(
                    lambda module, inputs, output: self.dtypes.add(output.dtype)
                )


def test_a_run_killed_while_saving_leaves_no_checkpoint(setup, tmp_path, monkeypatch):
    def killed(self, output_dir):
        raise KeyboardInterrupt("killed while writing the RNG state")

    monkeypatch.setattr(TokenBatchSeq2SeqTrainer, "_save_rng_state", killed)
    with pytest.raises(KeyboardInterrupt):
        train_translation(*arguments(setup, tmp_path, max_steps=3))
    assert not complete_checkpoints(tmp_path), (
        "the half-written checkpoint must not look like a checkpoint"
    )
    assert (tmp_path / "checkpoint-3" / "optimizer.pt").is_file() and not (
        tmp_path / "checkpoint-3" / CHECKSUMS_NAME
    ).exists()
    with pytest.raises(ValueError, match="has no complete checkpoint"):
        train_translation(*arguments(setup, tmp_path, resume_from_checkpoint="last"))


def test_two_process_launch_trains_both_ranks_to_identical_weights(setup, tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2` (gloo on CPU) runs
    scripts/train_translation.py's code on two real ranks; each rank writes the batches it drew and
    its final weights."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        str(driver),
        "--model_name_or_path",
        str(setup / "tiny.json"),
        "--tokenizer_name_or_path",
        str(setup / "tokenizer"),
        "--dataset",
        str(MULTI30K),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_train_pairs",
        "60",
        "--max_tokens",
        "320",
        "--max_steps",
        "6",
        "--warmup_steps",
        "2",
        "--save_steps",
        "6",
        "--use_cpu",
        "--disable_tqdm",
        "true",
        "--output_dir",
        str(tmp_path / "run"),
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY)}
    finished = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]

    drawn = {
        rank: [json.loads(line) for line in (tmp_path / "run" / f"batches-rank{rank}.jsonl").open()]
        for rank in (0, 1)
    }
    assert len(drawn[0]) == len(drawn[1]) >= 4, "both ranks took every step"
    first_epoch = [
        index
        for rank in (0, 1)
        for record in drawn[rank]
        if record["epoch"] == 0
        for index in record["batch"]
    ]
    assert sorted(first_epoch) == list(range(60)), (
        "in an epoch the ranks draw disjoint batches covering every pair"
    )
    assert any(record["epoch"] == 1 for record in drawn[0]), "the run must cross an epoch boundary"
    weights = [torch.load(tmp_path / "run" / f"weights-rank{rank}.pt") for rank in (0, 1)]
    initial = torch.load(tmp_path / "run" / "weights-initial-rank0.pt")
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]), name
    assert any(not torch.equal(weights[0][name], initial[name]) for name in initial)
    assert (tmp_path / "run" / "model.safetensors").is_file() and (
        tmp_path / "run" / "checkpoint-6"
    ).is_dir()


DRIVER = '''
"""scripts/train_translation.py, recording what each rank does (the test reads the files)."""
import importlib.util
import json
import math
import os

import torch

from nmt_toolkit import batching
from nmt_toolkit.training import parse_training_arguments, train_translation
from transformers import TrainerCallback

model_args, data_args, training_args = parse_training_arguments()
output = training_args.output_dir
sample = batching.TokenBatchSampler.__iter__


def recording_iter(self):
    for batch in sample(self):
        with open(os.path.join(output, f"batches-rank{self.rank}.jsonl"), "a") as log:
            log.write(json.dumps({"epoch": self.epoch, "batch": batch}) + "\\n")
        yield batch


class SaveInitialWeights(TrainerCallback):
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        torch.save({k: v.clone() for k, v in model.state_dict().items()},
                   os.path.join(output, f"weights-initial-rank{args.process_index}.pt"))


batching.TokenBatchSampler.__iter__ = recording_iter
trainer = train_translation(model_args, data_args, training_args, callbacks=[SaveInitialWeights()])
torch.save(trainer.model.state_dict(), os.path.join(output, f"weights-rank{training_args.process_index}.pt"))
'''  # noqa: E501


# --- Checkpoint averaging -------------------------------------------------------------------------


def fake_checkpoints(run_dir: Path, model, steps: list[int]) -> dict[int, dict[str, torch.Tensor]]:
    """Trainer-like checkpoint folders holding known random weights."""
    states = {}
    for step in steps:
        directory = run_dir / f"checkpoint-{step}"
        model.save_pretrained(directory)
        generator = torch.Generator().manual_seed(step)
        state = {
            name: torch.randn(tensor.shape, generator=generator)
            for name, tensor in load_file(directory / "model.safetensors").items()
        }
        save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
        for name in ("trainer_state.json", "optimizer.pt", "rng_state.pth"):
            (directory / name).write_text("{}")
        states[step] = state
    return states


def test_average_of_the_last_checkpoints_is_their_mean_and_loads(tmp_path):
    model = tiny_model("dwlstm")
    states = fake_checkpoints(tmp_path / "run", model, [3, 6, 9, 12])
    (tmp_path / "run" / "checkpoint-15").mkdir()  # killed while writing: no trainer_state.json
    chosen = last_checkpoints(tmp_path / "run", 3)
    assert [path.name for path in chosen] == ["checkpoint-6", "checkpoint-9", "checkpoint-12"]

    output = average_checkpoints(chosen, tmp_path / "averaged")
    averaged = load_file(output / "model.safetensors")
    for name, tensor in averaged.items():
        expected = (states[6][name].double() + states[9][name] + states[12][name]) / 3
        torch.testing.assert_close(tensor, expected.float(), rtol=0, atol=1e-6)
    assert not any(
        (output / name).exists() for name in ("trainer_state.json", "optimizer.pt", "rng_state.pth")
    )
    loaded = AutoModelForSeq2SeqLM.from_pretrained(output)
    torch.testing.assert_close(
        loaded.state_dict()["model.shared.weight"], averaged["model.shared.weight"]
    )
    assert loaded.lm_head.weight.data_ptr() == loaded.model.shared.weight.data_ptr(), "still tied"
    assert (output / "generation_config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["averaged", "run"], (
        "no staging folder left behind"
    )

    with pytest.raises(ValueError, match="already exists"):
        average_checkpoints(chosen, output)
    with pytest.raises(ValueError, match="has 4 complete ones"):
        last_checkpoints(tmp_path / "run", 5)
    other = tiny_model("dwlstm", d_model=32, encoder_attention_heads=2, decoder_attention_heads=2)
    fake_checkpoints(tmp_path / "other", other, [1])
    with pytest.raises(ValueError, match="not the same model"):
        average_checkpoints([chosen[0], tmp_path / "other" / "checkpoint-1"], tmp_path / "mixed")
    with pytest.raises(ValueError, match="holds no model.safetensors"):
        average_checkpoints([tmp_path / "run" / "checkpoint-15"], tmp_path / "empty")
    assert not (tmp_path / "mixed").exists() and not (tmp_path / "empty").exists()


def test_average_checkpoints_script(tmp_path):
    states = fake_checkpoints(tmp_path / "run", tiny_model("residual-pre"), [1, 2, 3])
    run_script(
        "average_checkpoints",
        "--run_dir",
        str(tmp_path / "run"),
        "--last",
        "2",
        "--output_dir",
        str(tmp_path / "averaged"),
    )
    averaged = load_file(tmp_path / "averaged" / "model.safetensors")
    name = "model.shared.weight"
    torch.testing.assert_close(
        averaged[name], (states[2][name] + states[3][name]) / 2, rtol=0, atol=1e-6
    )


def test_train_tokenizer_script_saves_an_auto_tokenizer(tmp_path):
    run_script(
        "train_tokenizer",
        "--dataset",
        str(MULTI30K),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_pairs",
        "200",
        "--merges",
        "100",
        "--language_tags",
        "<2en>",
        "<2de>",
        "<2fr>",
        "--output_dir",
        str(tmp_path / "tokenizer"),
    )
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tokenizer")
    assert tokenizer.convert_tokens_to_ids(
        ["<s>", "<pad>", "</s>", "<unk>", "<2en>", "<2de>", "<2fr>"]
    ) == list(range(7))
    sentence = read_multi30k("train", "de", 1)[0]
    assert tokenizer.decode(tokenizer(sentence)["input_ids"], skip_special_tokens=True) == sentence


def test_validation_loss_and_bleu_during_training(setup, tmp_path):
    model_args, data_args, training_args = arguments(
        setup,
        tmp_path / "run",
        max_steps=2,
        save_strategy="no",
        eval_strategy="steps",
        eval_steps=2,
        generation_max_length=12,
        generation_num_beams=2,
        per_device_eval_batch_size=4,
    )
    data_args.validation_split, data_args.max_validation_pairs, data_args.validation_bleu = (
        "val",
        6,
        True,
    )
    trainer = train_translation(model_args, data_args, training_args)
    evaluation = [entry for entry in trainer.state.log_history if "eval_loss" in entry][-1]
    assert evaluation["step"] == 2 and math.isfinite(evaluation["eval_loss"])
    prediction = trainer.predict(trainer.eval_dataset)
    tokenizer = trainer.processing_class
    references = tokenizer.batch_decode(
        np.where(prediction.label_ids == -100, tokenizer.pad_token_id, prediction.label_ids),
        skip_special_tokens=True,
    )
    assert references == read_multi30k("val", "de", 6)
    hypotheses = tokenizer.batch_decode(
        np.where(prediction.predictions == -100, tokenizer.pad_token_id, prediction.predictions),
        skip_special_tokens=True,
    )
    expected = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert prediction.metrics["test_bleu"] == pytest.approx(expected, abs=0.01)
    assert evaluation["eval_bleu"] == pytest.approx(expected, abs=0.01), (
        "the model did not change after step 2"
    )


def test_attention_under_cpu_bf16_autocast_is_computed_in_float32_and_returned_in_bfloat16(
    monkeypatch,
):
    """PyTorch's bfloat16 CPU attention was 1.8-2.5x slower than its float32 one at training shapes:
    under autocast the model attends in float32 (what float32 SDPA gives on the same bfloat16
    inputs), gradients included; a bfloat16 model outside autocast (inference) keeps bfloat16
    attention."""
    generator = torch.Generator().manual_seed(0)
    query, keys, values = (
        torch.randn(2, 2, 5, 8, generator=generator).bfloat16().requires_grad_() for _ in range(3)
    )
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        attended = sdpa(query, keys, values, mask)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query.float(), keys.float(), values.float(), attn_mask=mask
    )
    assert attended.dtype == torch.bfloat16 and torch.equal(attended, expected.bfloat16())
    attended.sum().backward()
    assert all(
        tensor.grad is not None and tensor.grad.dtype == torch.bfloat16
        for tensor in (query, keys, values)
    )
    calls = []
    monkeypatch.setattr(
        torch.nn.functional,
        "scaled_dot_product_attention",
        lambda *inputs, **options: calls.append({tensor.dtype for tensor in inputs}) or inputs[0],
    )
    sdpa(query, keys, values, mask)
    assert calls == [{torch.bfloat16}]


def test_a_bf16_step_with_float32_attention_is_near_float32_and_reaches_every_parameter():
    model = tiny_model("dwlstm", dropout=0.0).train()
    batch = {
        "input_ids": torch.randint(3, 40, (2, 7)),
        "attention_mask": torch.ones(2, 7, dtype=torch.long),
        "labels": torch.randint(3, 40, (2, 5)),
    }
    float32_loss = model(**batch).loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**batch).loss
    assert loss.item() == pytest.approx(float32_loss.item(), rel=0.02)
    loss.backward()
    assert all(
        parameter.grad is not None and torch.isfinite(parameter.grad).all()
        for parameter in model.parameters()
        if parameter.requires_grad
    )
