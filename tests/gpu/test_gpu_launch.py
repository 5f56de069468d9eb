"""Two GPUs: `accelerate launch` with the ready configs of examples/accelerate/ trains on both, DDP
and FSDP2 giving the same losses. Skipped unless two CUDA devices are visible; `make test-gpu`
runs it."""

import json
import math

import pytest
import torch
from conftest import tiny_config
from safetensors.torch import load_file
from test_gpu import PAIRS
from test_sharding import REPOSITORY, accelerate_launch, logged

from modeling_dwlstm.tokenization_dwlstm import train_joint_bpe_tokenizer

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


@pytest.fixture(scope="module")
def corpus_and_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("two_gpus")
    (directory / "pairs.jsonl").write_text(
        "".join(json.dumps({"en": en, "de": de}) + "\n" for en, de in PAIRS)
    )
    tokenizer = train_joint_bpe_tokenizer(
        [text for pair in PAIRS for text in pair], vocab_size=120, min_frequency=1
    )
    tokenizer.save_pretrained(directory / "tokenizer")
    (directory / "dwlstm.json").write_text(tiny_config("dwlstm", dropout=0.1).to_json_string())
    return directory


def arguments(setup, output_dir) -> list[str]:
    return [
        "--model_name_or_path",
        str(setup / "dwlstm.json"),
        "--tokenizer_name_or_path",
        str(setup / "tokenizer"),
        "--dataset",
        str(setup / "pairs.jsonl"),
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--max_tokens",
        "64",
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
    ]


def test_ddp_and_fsdp2_on_two_gpus_train_alike(corpus_and_model, tmp_path):
    """ddp-1node.yaml and fsdp2.yaml (one FSDP unit per layer, the shared gates' lender kept
    gathered), each on two GPUs: the same loss at every step, and whole models saved."""
    script = REPOSITORY / "scripts" / "train_translation.py"
    runs = {}
    for config in ("ddp-1node.yaml", "fsdp2.yaml"):
        runs[config] = tmp_path / config.removesuffix(".yaml")
        finished = accelerate_launch(config, script, arguments(corpus_and_model, runs[config]))
        assert finished.returncode == 0, finished.stderr[-3000:]
        assert "x 2 processes" in (runs[config] / "train.log").read_text()
    ddp, fsdp = (logged(runs[config], "loss") for config in ("ddp-1node.yaml", "fsdp2.yaml"))
    assert len(ddp) == 4 and all(math.isfinite(loss) for loss in ddp)
    assert fsdp == pytest.approx(ddp, rel=1e-4)
    assert (
        "model.encoder.layers.0, model.decoder.layers.0"
        in (runs["fsdp2.yaml"] / "train.log").read_text()
    )
    ddp_weights, fsdp_weights = (
        load_file(runs[config] / "model.safetensors") for config in ("ddp-1node.yaml", "fsdp2.yaml")
    )
    assert set(ddp_weights) <= set(fsdp_weights)
