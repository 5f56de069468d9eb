"""Checkpoint averaging (Vaswani et al. §6.1; SPEC §5: the last 5 checkpoints for base, 20 for big).

The average of the last K checkpoints' weights decodes better than the last checkpoint alone. The
result is a model directory like any `save_pretrained` output: config, generation config, tokenizer and
remote-code files are copied from the newest checkpoint, the weights are the element-wise mean, and the
optimizer / scheduler / RNG / trainer state of the checkpoints are left out. The directory is written
under a temporary name and renamed when complete, so an interrupted run never leaves a half-written model.
"""

import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

logger = logging.getLogger(__name__)

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
# What a Trainer checkpoint holds besides the model; an averaged model has no use for it.
TRAINING_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin")
TRAINING_STATE_PATTERNS = ("rng_state*.pth",)


def complete_checkpoints(run_dir: str | Path) -> list[Path]:
    """The ``checkpoint-N`` folders of a training run, oldest first, that the Trainer finished writing.

    The Trainer writes a checkpoint's trainer_state.json last, so a folder without it belongs to a run
    killed while saving and is skipped (resuming from it or averaging it would read a partial file).
    """
    checkpoints = [path for path in Path(run_dir).glob("checkpoint-*") if path.name.rsplit("-", 1)[-1].isdigit()]
    checkpoints.sort(key=lambda path: int(path.name.rsplit("-", 1)[-1]))
    for path in checkpoints:
        if not (path / "trainer_state.json").is_file():
            logger.warning("Ignoring %s: it has no trainer_state.json (the run stopped while writing it).", path)
    return [path for path in checkpoints if (path / "trainer_state.json").is_file()]


def last_checkpoints(run_dir: str | Path, count: int) -> list[Path]:
    """The `count` newest complete checkpoints of a training run, oldest first."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"`count` must be a positive integer, got {count!r}.")
    if not Path(run_dir).is_dir():
        raise ValueError(f"{run_dir} is not a directory of training checkpoints.")
    checkpoints = complete_checkpoints(run_dir)
    if len(checkpoints) < count:
        raise ValueError(f"Asked for the last {count} checkpoints but {run_dir} has {len(checkpoints)} complete ones: "
                         f"{[path.name for path in checkpoints]}.")
    return checkpoints[-count:]


def average_checkpoints(checkpoint_dirs: Sequence[str | Path], output_dir: str | Path) -> Path:
    """Write the element-wise mean of the checkpoints' weights as a loadable model directory; return it.

    Every checkpoint must hold the same parameters with the same shapes (the same model at different
    steps). Means are accumulated in float64 and stored in each parameter's own dtype. Non-weight files
    (config, generation config, tokenizer, code) come from the last checkpoint in `checkpoint_dirs`.
    """
    checkpoint_dirs = [Path(path) for path in checkpoint_dirs]
    if not checkpoint_dirs:
        raise ValueError("`checkpoint_dirs` is empty: give at least one checkpoint to average.")
    output_dir = Path(output_dir)
    if output_dir.exists():
        raise ValueError(f"{output_dir} already exists; choose a new output directory (nothing is overwritten).")
    total, dtypes, reference = None, None, checkpoint_dirs[0]
    for checkpoint in checkpoint_dirs:
        weights = load_weights(checkpoint)
        if total is None:
            total = {name: tensor.to(torch.float64) for name, tensor in weights.items()}
            dtypes = {name: tensor.dtype for name, tensor in weights.items()}
            continue
        _check_same_parameters(total, weights, reference, checkpoint)
        for name, tensor in weights.items():
            total[name] += tensor.to(torch.float64)
    averaged = {name: (tensor / len(checkpoint_dirs)).to(dtypes[name]).contiguous() for name, tensor in total.items()}

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        _copy_model_files(checkpoint_dirs[-1], staging)
        save_file(averaged, staging / WEIGHTS_NAME, metadata={"format": "pt"})
        (staging / "averaged_from.json").write_text(json.dumps([str(path) for path in checkpoint_dirs], indent=2) + "\n")
        staging.rename(output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output_dir


def load_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The state dict saved by `save_pretrained` in `checkpoint` (one safetensors file or an index of shards)."""
    if (checkpoint / WEIGHTS_NAME).is_file():
        return load_file(checkpoint / WEIGHTS_NAME)
    if (checkpoint / WEIGHTS_INDEX_NAME).is_file():
        shards = sorted(set(json.loads((checkpoint / WEIGHTS_INDEX_NAME).read_text())["weight_map"].values()))
        return {name: tensor for shard in shards for name, tensor in load_file(checkpoint / shard).items()}
    raise ValueError(f"{checkpoint} holds no {WEIGHTS_NAME} (or sharded index): not a saved model checkpoint.")


def _check_same_parameters(reference_weights: dict, weights: dict, reference: Path, checkpoint: Path):
    if reference_weights.keys() != weights.keys():
        difference = sorted(reference_weights.keys() ^ weights.keys())
        raise ValueError(f"{checkpoint} and {reference} hold different parameters ({difference[:5]}...): "
                         "only checkpoints of the same model can be averaged.")
    for name, tensor in weights.items():
        if tensor.shape != reference_weights[name].shape:
            raise ValueError(f"`{name}` has shape {tuple(tensor.shape)} in {checkpoint} but "
                             f"{tuple(reference_weights[name].shape)} in {reference}: not the same model.")


def _copy_model_files(checkpoint: Path, destination: Path):
    """Everything of `checkpoint` except its weights and training state."""
    for path in checkpoint.iterdir():
        skipped = (path.name in TRAINING_STATE_FILES or path.name == WEIGHTS_INDEX_NAME
                   or path.name.endswith(".safetensors") or any(path.match(p) for p in TRAINING_STATE_PATTERNS))
        if path.is_file() and not skipped:
            shutil.copy2(path, destination / path.name)


__all__ = ["average_checkpoints", "last_checkpoints", "complete_checkpoints", "load_weights"]
