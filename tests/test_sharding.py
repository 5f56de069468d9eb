"""Sharded training (PyTorch's FSDP2) and the launch lines, on two CPU processes (gloo) with tiny
models: per-layer sharding of the depth-wise LSTM with its shared gates gives the unsharded model's
losses and gradients, FSDP through accelerate's plugin trains as DDP does, and a launch that would
silently train otherwise is refused."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils.launch import prepare_simple_launcher_cmd_env
from conftest import MULTI30K, REPOSITORY
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from modeling_dwlstm import DwLstmConfig, ResidualTransformerConfig
from nmt_toolkit.checkpoints import record_saved_folder
from nmt_toolkit.data import load_parallel_corpus, train_corpus_tokenizer
from nmt_toolkit.launch import check_launch, check_ranks_agree
from nmt_toolkit.sharding import borrowed_modules
from nmt_toolkit.training import TranslationTrainingArguments, check_resumable

CONFIGS = REPOSITORY / "examples" / "accelerate"
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models on a shared 2-core machine
LAUNCH_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY)}
TINY = dict(
    vocab_size=40,
    d_model=16,
    ffn_dim=32,
    encoder_layers=3,
    decoder_layers=3,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    max_position_embeddings=64,
    dropout=0.0,
)


def launch(command: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ACCELERATE_", "FSDP_"))
    }
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**environment, **LAUNCH_ENVIRONMENT},
        timeout=timeout,
        cwd=REPOSITORY,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# PyTorch's fully_shard per layer (nmt_toolkit.sharding.shard_layers)
# ---------------------------------------------------------------------------------------------

SHARD_LAYERS = '''
"""Each rank: a sharded model and an unsharded copy take the same SGD steps; rank 0 writes what differs."""
import copy, json, sys
import torch, torch.distributed as dist
from torch.distributed.tensor import DTensor
from transformers import AutoConfig, AutoModelForSeq2SeqLM
import modeling_dwlstm
from nmt_toolkit.sharding import shard_layers

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
results = {}
for name, settings in json.loads(sys.argv[1]).items():
    torch.manual_seed(0)
    checkpointing = settings.pop("gradient_checkpointing", False)
    model = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(**settings)).train()
    reference = copy.deepcopy(model)
    if checkpointing:
        model.gradient_checkpointing_enable()
    keys = list(model.state_dict())
    shard_layers(model)
    # Before any forward: afterwards the units that stay gathered (the root, the lenders) hold unsharded parameters.
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    with torch.no_grad():
        sources = torch.randint(4, 40, (2, 5), generator=torch.Generator().manual_seed(2))
        same_translations = torch.equal(*(m.eval().generate(input_ids=sources, num_beams=2, max_new_tokens=4)
                                          for m in (model, reference)))
    model.train(), reference.train()
    generator = torch.Generator().manual_seed(1)
    losses, worst_gradient = [], 0.0
    for step in range(3):
        sources = torch.randint(4, 40, (2 * world, 5), generator=generator)
        targets = torch.randint(4, 40, (2 * world, 6), generator=generator)
        mine = slice(2 * rank, 2 * rank + 2)
        loss = model(input_ids=sources[mine], labels=targets[mine]).loss
        loss.backward()
        expected = sum(reference(input_ids=sources[2 * r:2 * r + 2], labels=targets[2 * r:2 * r + 2]).loss
                       for r in range(world)) / world  # what DDP and FSDP average
        expected.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append([mean.item() / world, expected.item()])
        gradients = {n: p.grad for n, p in reference.named_parameters()}
        for n, p in model.named_parameters():
            gradient = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            worst_gradient = max(worst_gradient, ((gradient - gradients[n]).abs().max() / gradients[n].abs().max()).item())
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    results[name] = {"losses": losses, "worst_gradient": worst_gradient, "keys_kept": list(model.state_dict()) == keys,
                     "same_translations": same_translations}
if rank == 0:
    print("RESULTS" + json.dumps(results))
'''  # noqa: E501

SHARDED_CASES = {
    "dwlstm": {"model_type": "dwlstm", **TINY},  # the default: gates shared per stack
    "dwlstm-global-gates-shared-hidden-two-lstm": {
        "model_type": "dwlstm",
        **TINY,
        "share_gates": "global",
        "share_hidden": True,
        "decoder_merge": "two_lstm",
    },
    "dwlstm-gradient-checkpointing": {
        "model_type": "dwlstm",
        **TINY,
        "gradient_checkpointing": True,
    },
    "depthwise-rnn-shared-hidden": {"model_type": "dwlstm-rnn", **TINY, "share_hidden": True},
    "residual-pre": {"model_type": "dwlstm-residual", **TINY, "norm_position": "pre"},
}


def test_per_layer_sharding_gives_the_unsharded_losses_and_gradients(tmp_path):
    """Shared gates, a shared hidden module, one gate module for both stacks and gradient
    checkpointing, under `fully_shard` per layer on two processes: every step's loss and gradient
    are the unsharded model's, and so are its beam-search translations."""
    script = tmp_path / "shard_layers.py"
    script.write_text(SHARD_LAYERS)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        str(script),
        json.dumps(SHARDED_CASES),
    ]
    finished = launch(command)
    assert finished.returncode == 0, finished.stderr[-3000:]
    results = json.loads(finished.stdout.split("RESULTS", 1)[1])
    for name, result in results.items():
        for sharded, unsharded in result["losses"]:
            assert sharded == pytest.approx(unsharded, rel=1e-5), name
        # float32 sums in another order; a missed share is O(1)
        assert result["worst_gradient"] < 1e-4, name
        assert result["keys_kept"], f"{name}: sharding changed the state-dict keys"
        assert result["same_translations"], f"{name}: generate() of the sharded model differs"


def test_the_modules_layers_borrow_are_found():
    model = AutoModelForSeq2SeqLM.from_config(DwLstmConfig(**TINY))
    borrowed = {(user, lent) for user, lent in borrowed_modules(model) if "layers" in user}
    assert borrowed == {
        (f"model.{stack}.layers.{i}.depthwise_lstm", f"model.{stack}.layers.0.depthwise_lstm.gates")
        for stack in ("encoder", "decoder")
        for i in (1, 2)
    }
    assert not [
        pair
        for pair in borrowed_modules(
            AutoModelForSeq2SeqLM.from_config(DwLstmConfig(**TINY, share_gates="none"))
        )
        if "layers" in pair[0]
    ]


@pytest.mark.parametrize(
    "config",
    [
        DwLstmConfig(**TINY),
        DwLstmConfig(**TINY, decoder_merge="two_lstm"),
        ResidualTransformerConfig(**TINY, norm_position="pre"),
    ],
    ids=["add", "two-lstm", "pre"],
)
def test_no_split_modules_name_the_layer_classes_the_model_builds(config):
    """accelerate's FSDP wraps every class in `_no_split_modules` and refuses one the model
    lacks."""
    model = AutoModelForSeq2SeqLM.from_config(config)
    built = {type(module).__name__ for module in model.modules()}
    assert set(model._no_split_modules) <= built and len(model._no_split_modules) == 2


# ---------------------------------------------------------------------------------------------
# accelerate launch: FSDP2 equals DDP, and the failures that used to be silent
# ---------------------------------------------------------------------------------------------

# accelerate 1.15 turns a run into FSDP on GPU-like devices only; this driver makes it do so on the
# CPU, so that its FSDP2 code path (wrapping the `_no_split_modules` classes, the Trainer's sharded
# steps and saving) runs here.
FSDP_ON_CPU_DRIVER = """
import os
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
from nmt_toolkit.cli import exit_on_error
from nmt_toolkit.training import parse_training_arguments, train_translation

os.environ.pop("ACCELERATE_USE_FSDP")  # train_translation refuses FSDP without an accelerator
initialise = AcceleratorState.__init__


def initialise_fsdp_on_cpu(self, *args, **kwargs):
    initialise(self, *args, **kwargs)
    if self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type = DistributedType.FSDP
        self.fsdp_plugin = FullyShardedDataParallelPlugin()  # from the launcher's FSDP_* variables


AcceleratorState.__init__ = initialise_fsdp_on_cpu
exit_on_error(lambda: train_translation(*parse_training_arguments()))
"""


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    directory = tmp_path_factory.mktemp("setup")
    corpus = load_parallel_corpus(MULTI30K, "en", "de", max_pairs=300)
    train_corpus_tokenizer([corpus], ["en", "de"], merges=200).save_pretrained(
        directory / "tokenizer"
    )
    settings = {
        "model_type": "dwlstm",
        **TINY,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "max_position_embeddings": 128,
    }
    (directory / "tiny.json").write_text(
        json.dumps({key: value for key, value in settings.items() if key != "vocab_size"})
    )
    return directory


def training_arguments(setup: Path, output_dir: Path) -> list[str]:
    return [
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
        "4",
        "--warmup_steps",
        "1",
        "--learning_rate",
        "3e-3",
        "--save_steps",
        "4",
        "--logging_steps",
        "1",
        "--disable_tqdm",
        "true",
        "--output_dir",
        str(output_dir),
        "--validation_split",
        "val",
        "--max_validation_pairs",
        "16",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "4",
        "--validation_bleu",
        "--generation_max_length",
        "12",
    ]


def accelerate_launch(
    config: str, script: Path, arguments: list[str]
) -> subprocess.CompletedProcess:
    return launch(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(CONFIGS / config),
            "--num_processes",
            "2",
            "--main_process_port",
            str(free_port()),
            str(script),
            *arguments,
        ]
    )


def logged(run: Path, key: str) -> list[float]:
    history = json.loads((run / "trainer_state.json").read_text())["log_history"]
    return [entry[key] for entry in history if key in entry]


def test_fsdp_through_accelerate_trains_as_ddp(tiny_setup, tmp_path):
    """The same two-process run with examples/accelerate/fsdp2.yaml (one FSDP unit per layer, the
    shared gates' lender kept gathered) and with ddp-1node.yaml: the same loss and gradient norm at
    every step, the same validation loss and chrF, a whole model saved with this family's code."""
    driver = tmp_path / "fsdp_on_cpu.py"
    driver.write_text(FSDP_ON_CPU_DRIVER)
    sharded = accelerate_launch(
        "fsdp2.yaml", driver, training_arguments(tiny_setup, tmp_path / "fsdp")
    )
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    log = (tmp_path / "fsdp" / "train.log").read_text()
    assert (
        "keep them gathered from forward to backward: model.encoder.layers.0, "
        "model.decoder.layers.0" in log
    )
    plain = accelerate_launch(
        "ddp-1node.yaml",
        REPOSITORY / "scripts" / "train_translation.py",
        training_arguments(tiny_setup, tmp_path / "ddp"),
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    for key in ("loss", "grad_norm"):
        fsdp, ddp = logged(tmp_path / "fsdp", key), logged(tmp_path / "ddp", key)
        assert len(fsdp) == len(ddp) == 4 and fsdp == pytest.approx(ddp, rel=1e-5), key
    for key in ("eval_loss", "eval_chrf"):  # validation, with beam search through the sharded model
        fsdp, ddp = logged(tmp_path / "fsdp", key), logged(tmp_path / "ddp", key)
        assert len(fsdp) == len(ddp) == 1 and fsdp == pytest.approx(ddp, rel=1e-5), key
    config = json.loads((tmp_path / "fsdp" / "config.json").read_text())
    assert (
        config["auto_map"]["AutoModelForSeq2SeqLM"]
        == "modeling_dwlstm.DwLstmForConditionalGeneration"
    )
    assert not list((tmp_path / "fsdp").glob("_fsdp*.py")), (
        "torch's FSDP files were saved as the model's code"
    )
    weights, reference = (
        load_file(tmp_path / "fsdp" / "model.safetensors"),
        load_file(tmp_path / "ddp" / "model.safetensors"),
    )
    assert set(reference) <= set(weights)
    # Adam: a few lr apart
    assert all(torch.allclose(weights[name], reference[name], atol=0.02) for name in reference)


@pytest.mark.parametrize(
    "launch_flags, refused",
    [
        (["--cpu", "--num_processes", "2"], True),
        (["--num_processes", "2"], True),
        (["--cpu"], False),
    ],
)
def test_accelerates_single_process_launcher_asked_for_several_is_refused(
    monkeypatch, launch_flags, refused
):
    """`accelerate launch --cpu --num_processes 2` (and `--num_processes 2` without --multi_gpu on a
    machine without GPUs) starts one process: in the environment accelerate's single-process
    launcher gives it, it says so instead of training alone."""
    for key in [
        *[key for key in os.environ if key.startswith("ACCELERATE_")],
        "WORLD_SIZE",
        "MASTER_PORT",
        "OMP_NUM_THREADS",
    ]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    arguments, _, _ = _validate_launch_command(
        launch_command_parser().parse_args([*launch_flags, "train.py"])
    )
    _, environment = prepare_simple_launcher_cmd_env(arguments)
    for key in environment.keys() - os.environ.keys():
        monkeypatch.setenv(key, environment[key])
    if refused:
        with pytest.raises(
            ValueError, match="started a single process although it was given several"
        ):
            check_launch(SimpleNamespace(use_cpu=False))
    else:
        check_launch(SimpleNamespace(use_cpu=False))


def test_training_arguments_check_the_launch(monkeypatch, tmp_path):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="started a single process"):
        TranslationTrainingArguments(output_dir=str(tmp_path / "run"))


def checked_launch(monkeypatch, environment: dict) -> SimpleNamespace:
    """The training arguments' `use_cpu` after `check_launch` in `environment` on a machine without
    an accelerator."""
    for key in [
        key
        for key in os.environ
        if key.startswith("ACCELERATE_") or key in ("WORLD_SIZE", "MASTER_PORT")
    ]:
        monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    arguments = SimpleNamespace(use_cpu=False)
    check_launch(arguments)
    return arguments


def test_several_processes_without_an_accelerator_train_on_the_cpu(monkeypatch):
    """torchrun / `accelerate launch --multi_gpu` without --use_cpu: transformers took every process for a run of
    its own, and they raced for the output folder."""  # noqa: E501
    assert checked_launch(monkeypatch, {"WORLD_SIZE": "2"}).use_cpu
    assert not checked_launch(monkeypatch, {}).use_cpu


@pytest.mark.parametrize(
    "variable, engine", [("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed")]
)
def test_fsdp_and_deepspeed_without_an_accelerator_are_refused(monkeypatch, variable, engine):
    with pytest.raises(ValueError, match=f"asked for {engine}, which accelerate runs on GPUs only"):
        checked_launch(monkeypatch, {"WORLD_SIZE": "2", variable: "true"})


def test_ranks_that_the_trainer_does_not_see_are_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    arguments = SimpleNamespace(world_size=1, device="cpu", output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="2 processes were launched but the Trainer sees 1"):
        check_ranks_agree(arguments)


def test_the_accelerate_configs_are_what_the_docs_say():
    configs = {path.name: yaml.safe_load(path.read_text()) for path in CONFIGS.glob("*.yaml")}
    assert {name: config["distributed_type"] for name, config in configs.items()} == {
        "ddp-1node.yaml": "MULTI_GPU",
        "ddp-multinode.yaml": "MULTI_GPU",
        "fsdp2.yaml": "FSDP",
        "deepspeed-zero2.yaml": "DEEPSPEED",
    }
    assert configs["ddp-multinode.yaml"]["num_machines"] > 1
    fsdp = configs["fsdp2.yaml"]["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"  # checkpoints hold model.safetensors
    assert (CONFIGS / "deepspeed-zero2.yaml").read_text().startswith("# UNTESTED")


@pytest.mark.parametrize("optimizer_state", ["optimizer.pt", "optimizer.bin", "optimizer_0", None])
def test_a_checkpoint_of_a_sharded_run_resumes(tmp_path, optimizer_state):
    """Under FSDP the Trainer saves the optimizer state as optimizer.bin (whole) or optimizer_0/
    (sharded): such a checkpoint resumes; one without any optimizer state is refused."""
    checkpoint = tmp_path / "run" / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    for name in ("trainer_state.json", "model.safetensors", "scheduler.pt", "rng_state_0.pth"):
        (checkpoint / name).write_text("{}")
    if optimizer_state == "optimizer_0":
        (checkpoint / optimizer_state).mkdir()
        (checkpoint / optimizer_state / "__0_0.distcp").write_text("shard")
    elif optimizer_state:
        (checkpoint / optimizer_state).write_text("state")
    record_saved_folder(checkpoint)
    if optimizer_state:
        check_resumable(checkpoint, str(tmp_path / "run"))
    else:
        with pytest.raises(ValueError, match="lacks optimizer.pt"):
            check_resumable(checkpoint, str(tmp_path / "run"))
