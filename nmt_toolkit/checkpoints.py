"""Checkpoint averaging (Vaswani et al. 2017, §6.1; Xu et al. 2024, §3.1: the last 5 for base, 20 for big).

The average of the last K checkpoints' weights decodes better than the last checkpoint alone. The
result is a model directory like any `save_pretrained` output: config, generation config, tokenizer and
remote-code files are copied from the newest checkpoint, the weights are the element-wise mean, and the
optimizer / scheduler / RNG / trainer state of the checkpoints are left out. The directory is written
under a temporary name and renamed when complete, so an interrupted run never leaves a half-written model.

Every model directory and checkpoint carries a checksum manifest (`files.write_checksums`); the loading
helpers here (`load_saved_model`, `load_saved_tokenizer`) and the averaging verify it, refuse weights that
are not finite (a diverged run), and turn the usual ways a folder goes bad into one-line errors.
"""

import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from .files import atomic_directory, atomic_write_json, check_local_or_hub, verify_checksums, write_checksums

logger = logging.getLogger(__name__)

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
# What a Trainer checkpoint holds besides the model; an averaged model has no use for it.
TRAINING_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin")
TRAINING_STATE_PATTERNS = ("rng_state*.pth",)
# Fields every member's config.json has and that fix the weights' shapes: without them the defaults would
# silently give another model size.
SIZE_FIELDS = ("d_model", "encoder_layers", "decoder_layers", "vocab_size")
DIVERGED_ADVICE = ("training diverged. Use an earlier checkpoint, or train again with a lower --learning_rate, "
                   "more --warmup_steps or --max_grad_norm 1.0")


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


def average_checkpoints(checkpoint_dirs: Sequence[str | Path], output_dir: str | Path, overwrite: bool = False) -> Path:
    """Write the element-wise mean of the checkpoints' weights as a loadable model directory; return it.

    Every checkpoint must hold the same parameters with the same shapes (the same model at different
    steps). Means are accumulated in float64 and stored in each parameter's own dtype. Non-weight files
    (config, generation config, tokenizer, code) come from the last checkpoint in `checkpoint_dirs`. Each
    checkpoint is verified against its checksum manifest and refused if not finite; an existing `output_dir`
    is refused unless `overwrite` (it is then replaced once the new model is complete).
    """
    checkpoint_dirs = [Path(path) for path in checkpoint_dirs]
    if not checkpoint_dirs:
        raise ValueError("`checkpoint_dirs` is empty: give at least one checkpoint to average.")
    output_dir = Path(output_dir)
    with atomic_directory(output_dir, replace=overwrite) as staging:  # created first: an unwritable place fails before the work
        total, dtypes, reference = None, None, checkpoint_dirs[0]
        for checkpoint in checkpoint_dirs:
            verify_checksums(checkpoint)
            weights = load_weights(checkpoint)
            check_finite_weights(weights, checkpoint)
            if total is None:
                total = {name: tensor.to(torch.float64) for name, tensor in weights.items()}
                dtypes = {name: tensor.dtype for name, tensor in weights.items()}
                continue
            _check_same_parameters(total, weights, reference, checkpoint)
            for name, tensor in weights.items():
                total[name] += tensor.to(torch.float64)
        averaged = {name: (tensor / len(checkpoint_dirs)).to(dtypes[name]).contiguous() for name, tensor in total.items()}
        _copy_model_files(checkpoint_dirs[-1], staging)
        save_file(averaged, staging / WEIGHTS_NAME, metadata={"format": "pt"})
        atomic_write_json(staging / "averaged_from.json", [str(path) for path in checkpoint_dirs])
        write_checksums(staging)
    return output_dir


def load_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The state dict saved by `save_pretrained` in `checkpoint` (one safetensors file or an index of shards)."""
    if (checkpoint / WEIGHTS_NAME).is_file():
        return _load_safetensors(checkpoint / WEIGHTS_NAME)
    if (checkpoint / WEIGHTS_INDEX_NAME).is_file():
        shards = sorted(set(json.loads((checkpoint / WEIGHTS_INDEX_NAME).read_text())["weight_map"].values()))
        return {name: tensor for shard in shards for name, tensor in _load_safetensors(checkpoint / shard).items()}
    raise ValueError(f"{checkpoint} holds no {WEIGHTS_NAME} (or sharded index): not a saved model checkpoint.")


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(path)
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{path} is truncated or corrupted ({error}); save the model again or use another "
                         "checkpoint.") from error


def check_finite_weights(weights: Mapping[str, torch.Tensor] | torch.nn.Module, where) -> None:
    """Refuse weights holding NaN or infinity (a diverged run), naming the first such tensor."""
    items = weights.state_dict().items() if isinstance(weights, torch.nn.Module) else weights.items()
    for name, tensor in items:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{where}: `{name}` holds NaN or infinite values: {DIVERGED_ADVICE}.")


def check_saved_model_folder(folder: Path) -> None:
    """Check a local model folder before transformers reads it: checksums, config.json and weight headers.

    Each check turns what would be a deep traceback, a silent default or an interactive prompt into a
    one-line error naming the file.
    """
    verify_checksums(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ValueError(f"{folder} holds no config.json: not a saved model folder (save_pretrained writes one).")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{config_path} is not valid JSON ({error}).") from error
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in CONFIG_MAPPING:
        # transformers would otherwise look for remote code and ask "run the custom code? [y/N]".
        ours = ", ".join(CONFIG_MAPPING._extra_content) or "none registered"
        raise ValueError(f"{config_path}: model_type {model_type!r} is not a known model type (this package's: "
                         f"{ours}). Correct it in config.json.")
    missing = [name for name in SIZE_FIELDS if name not in config]
    if missing and model_type in CONFIG_MAPPING._extra_content:
        raise ValueError(f"{config_path} lacks {', '.join(missing)}: the model's size cannot be known. Restore the "
                         "config.json saved with the weights.")
    for path in [folder / WEIGHTS_NAME] if (folder / WEIGHTS_NAME).is_file() else sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(path, framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            raise ValueError(f"{path} is truncated or corrupted ({error}); save the model again or use another "
                             "checkpoint.") from error


def save_pretrained_atomically(saveable, output_dir) -> Path:
    """`saveable.save_pretrained` (a tokenizer, a model) into a staging folder that then replaces `output_dir`,
    with a checksum manifest: readers see the old folder or the complete new one, never a mix."""
    with atomic_directory(output_dir, replace=True) as staging:
        saveable.save_pretrained(staging)
        write_checksums(staging)
    return Path(output_dir)


def load_saved_model(name_or_path, what: str = "--model", trust_remote_code: bool = False, **kwargs):
    """`AutoModelForSeq2SeqLM.from_pretrained` after `check_saved_model_folder` (local folders), refusing
    non-finite weights. `what` names the argument in errors."""
    check_local_or_hub(name_or_path, what)
    if Path(name_or_path).is_dir():
        check_saved_model_folder(Path(name_or_path))
    model = AutoModelForSeq2SeqLM.from_pretrained(name_or_path, trust_remote_code=trust_remote_code, **kwargs)
    check_finite_weights(model, name_or_path)
    return model


def load_saved_tokenizer(name_or_path, what: str = "--tokenizer_name_or_path", trust_remote_code: bool = False):
    """`AutoTokenizer.from_pretrained` with a one-line error for a missing or incomplete tokenizer folder."""
    check_local_or_hub(name_or_path, what)
    folder = Path(name_or_path)
    if folder.is_dir():
        verify_checksums(folder)
        if not (folder / "tokenizer.json").is_file():
            raise ValueError(f"{what} {folder} holds no tokenizer.json: not a complete tokenizer folder "
                             "(scripts/train_tokenizer.py writes tokenizer.json and tokenizer_config.json).")
    try:
        return AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError, KeyError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{what} {name_or_path}: cannot load a tokenizer ({message}).") from error


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


__all__ = [
    "average_checkpoints",
    "last_checkpoints",
    "complete_checkpoints",
    "load_weights",
    "check_finite_weights",
    "check_saved_model_folder",
    "load_saved_model",
    "load_saved_tokenizer",
    "save_pretrained_atomically",
]
