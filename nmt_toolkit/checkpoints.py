"""Checkpoint averaging (Vaswani et al. 2017, §6.1; Xu et al. 2024, §3.1: the last 5 for base, 20
for big).

The average of the last K checkpoints' weights decodes better than the last checkpoint alone. The
result is a model directory like any `save_pretrained` output: config, generation config, tokenizer
and remote-code files are copied from the newest checkpoint, the weights are the element-wise mean,
and the optimizer / scheduler / RNG / trainer state of the checkpoints are left out. The directory
is written under a temporary name and renamed when complete, so an interrupted run never leaves a
half-written model.

Every model directory and checkpoint carries a checksum manifest (`files.write_checksums`) and a
fingerprint (`FINGERPRINT_NAME`: the config fields and the tokenizer vocabulary the weights were
saved with), written by `record_saved_folder`. One integrity policy (`verify_model_files`) serves
everything that uses a saved model (loading, decoding, exporting, averaging, pushing): the files the
model needs are verified, training records (`TRAINING_RECORDS`) may be missing from a copy, and a
missing or changed file is named with how to accept the folder as it is. The loading helpers here
(`load_saved_model`, `load_saved_tokenizer`) and the averaging also check the fingerprint (which
still holds when the manifest is gone), refuse weights that do not fit the config or are not finite
(a diverged run), and turn the usual ways a folder goes bad into one-line errors.
"""

import hashlib
import json
import logging
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from modeling_dwlstm.generation_translation import SHORTLIST_FILE

from .files import (
    CHECKSUMS_NAME,
    RECORD_COMMAND,
    atomic_directory,
    atomic_write_json,
    check_inputs_outside,
    check_local_or_hub,
    claim_output_dir,
    file_sha256,
    no_space_reported,
    releasing_output_dirs,
    verify_checksums,
    write_checksums,
)

logger = logging.getLogger(__name__)

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
# What a Trainer checkpoint holds besides the model; an averaged model has no use for it.
TRAINING_STATE_FILES = (
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "trainer_state.json",
    "training_args.bin",
)
TRAINING_STATE_PATTERNS = ("rng_state*.pth",)
# Fields every member's config.json has and that fix the weights' shapes: without them the defaults
# would silently give another model size.
SIZE_FIELDS = ("d_model", "encoder_layers", "decoder_layers", "vocab_size")
DIVERGED_ADVICE = (
    "training diverged. Use an earlier checkpoint, or train again with a lower --learning_rate, "
    "more --warmup_steps or --max_grad_norm 1.0"
)
# What a model folder may lack without being incomplete: records of how it was trained, not needed
# to load, decode, export or average the model (a folder copied by hand often leaves them out).
TRAINING_RECORDS = re.compile(
    r"trainer_state\.json|training_args\.bin|optimizer\.pt|scheduler\.pt|scaler\.pt|"
    r"rng_state.*\.pth|run_arguments\.json|averaged_from\.json|README\.md"
)
FINGERPRINT_NAME = "fingerprint.json"
# The settings a training checkpoint was made with (written by the training callback, compared when
# resuming).
RUN_ARGUMENTS_NAME = "run_arguments.json"
# Config fields that may change without changing what the weights compute: bookkeeping,
# training-only settings (a fine-tuning run may change dropout or label smoothing) and the
# directions the pipeline offers.
FREE_CONFIG_FIELDS = re.compile(
    r"transformers_version|architectures|auto_map|custom_pipelines|dtype|torch_dtype|"
    r"_name_or_path|use_cache|output_attentions|output_hidden_states|return_dict|"
    r".*dropout|label_smoothing|language_pairs"
)


def complete_checkpoints(run_dir: str | Path) -> list[Path]:
    """The ``checkpoint-N`` folders of a training run, oldest first, that the Trainer finished
    writing.

    The Trainer writes a checkpoint's trainer_state.json last, so a folder without it belongs to a
    run killed while saving and is skipped (resuming from it or averaging it would read a
    partial file).
    """
    checkpoints = [
        path
        for path in Path(run_dir).glob("checkpoint-*")
        if path.name.rsplit("-", 1)[-1].isdigit()
    ]
    checkpoints.sort(key=lambda path: int(path.name.rsplit("-", 1)[-1]))
    for path in checkpoints:
        if not (path / "trainer_state.json").is_file():
            logger.warning(
                "Ignoring %s: it has no trainer_state.json (the run stopped while writing it).",
                path,
            )
    return [path for path in checkpoints if (path / "trainer_state.json").is_file()]


def last_checkpoints(run_dir: str | Path, count: int) -> list[Path]:
    """The `count` newest complete checkpoints of a training run, oldest first."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"`count` must be a positive integer, got {count!r}.")
    if not Path(run_dir).is_dir():
        raise ValueError(f"{run_dir} is not a directory of training checkpoints.")
    checkpoints = complete_checkpoints(run_dir)
    if not checkpoints and (Path(run_dir) / "trainer_state.json").is_file():
        raise ValueError(
            f"{run_dir} is a checkpoint, not a run folder: give the run folder that holds it "
            f"({Path(run_dir).resolve().parent}), or the checkpoints themselves with --checkpoints."
        )
    if len(checkpoints) < count:
        raise ValueError(
            f"Asked for the last {count} checkpoints but {run_dir} has {len(checkpoints)} "
            f"complete ones: {[path.name for path in checkpoints]}."
        )
    return checkpoints[-count:]


@releasing_output_dirs
def average_checkpoints(
    checkpoint_dirs: Sequence[str | Path], output_dir: str | Path, overwrite: bool = False
) -> Path:
    """Write the element-wise mean of the checkpoints' weights as a loadable model directory;
    return it.

    Every checkpoint must hold the same parameters with the same shapes (the same model at different
    steps). Means are accumulated in float64 and stored in each parameter's own dtype. Non-weight
    files (config, generation config, tokenizer, code) come from the last checkpoint in
    `checkpoint_dirs`. Each checkpoint is verified against its checksum manifest and refused if not
    finite, and they must be one model (`check_same_model`); an existing `output_dir` is refused
    unless `overwrite` (it is then replaced once the new model is complete), and so is one that is
    or holds a checkpoint being averaged, or that another run is writing.
    """
    if isinstance(checkpoint_dirs, (str, Path)):
        raise ValueError(
            "`checkpoint_dirs` must be a list of checkpoint folders, got the single path "
            f"{checkpoint_dirs!r}"
            "; pass [path] to copy one checkpoint's model."
        )
    checkpoint_dirs = [Path(path) for path in checkpoint_dirs]
    if not checkpoint_dirs:
        raise ValueError("`checkpoint_dirs` is empty: give at least one checkpoint to average.")
    missing = [str(path) for path in checkpoint_dirs if not path.is_dir()]
    if missing:
        raise ValueError(
            f"No such checkpoint folder: {', '.join(missing)}. Check the paths (ls the run folder)."
        )
    output_dir = Path(output_dir)
    check_inputs_outside(output_dir, {"the checkpoint": checkpoint_dirs}, "output_dir")
    claim_output_dir(output_dir)
    check_same_model(checkpoint_dirs)
    # created first: an unwritable place fails before the work
    with atomic_directory(output_dir, replace=overwrite) as staging:
        total, dtypes, reference = None, None, checkpoint_dirs[0]
        for checkpoint in checkpoint_dirs:
            weights = load_weights(checkpoint)
            check_finite_weights(weights, checkpoint)
            if total is None:
                total = {name: tensor.to(torch.float64) for name, tensor in weights.items()}
                dtypes = {name: tensor.dtype for name, tensor in weights.items()}
                continue
            _check_same_parameters(total, weights, reference, checkpoint)
            for name, tensor in weights.items():
                total[name] += tensor.to(torch.float64)
        averaged = {
            name: (tensor / len(checkpoint_dirs)).to(dtypes[name]).contiguous()
            for name, tensor in total.items()
        }
        with no_space_reported(f"the averaged model in {output_dir}"):
            _copy_model_files(checkpoint_dirs[-1], staging)
            save_file(averaged, staging / WEIGHTS_NAME, metadata={"format": "pt"})
            atomic_write_json(
                staging / "averaged_from.json", [str(path) for path in checkpoint_dirs]
            )
            record_saved_folder(staging)
    return output_dir


def check_same_model(checkpoint_dirs: Sequence[Path]) -> None:
    """Refuse to average checkpoints that are not one model at different steps: one given twice (or
    a copy of one), another architecture with the same shapes (pre- vs post-norm), or weights
    trained with another tokenizer. Each checkpoint is verified first (`verify_model_files`)."""
    reference, seen = checkpoint_dirs[0], {}
    expected = model_fingerprint(reference)
    check_same_run(checkpoint_dirs)
    for checkpoint in checkpoint_dirs:
        verify_model_files(checkpoint)
        digest = _weights_digest(checkpoint)
        if digest is not None and digest in seen:
            raise ValueError(
                f"{checkpoint} and {seen[digest]} hold the same weights (one checkpoint given "
                "twice, or "
                "a copy of it): it would count twice in the average. Give each checkpoint once."
            )
        seen[digest] = checkpoint
        found = model_fingerprint(checkpoint)
        if config_changes(expected["config"], found["config"]):
            changes = describe_changes(expected["config"], found["config"])
            raise ValueError(
                f"{checkpoint} and {reference} are not the same model ({changes}): only "
                "checkpoints of "
                "one model can be averaged."
            )
        if (
            None not in (found["tokenizer"], expected["tokenizer"])
            and found["tokenizer"] != expected["tokenizer"]
        ):
            raise ValueError(
                f"{checkpoint} and {reference} were trained with different tokenizers (their "
                "vocabularies "
                "differ): their embeddings stand for different tokens and cannot be averaged."
            )


def check_same_run(checkpoint_dirs: Sequence[Path]) -> None:
    """Refuse checkpoints of different training runs (another seed, other data or settings, by their
    recorded run arguments): two runs of one model start from different weights, and the mean of
    their weights is no model at all. Folders without recorded arguments (final or averaged models)
    are not compared."""
    recorded = {
        path: _read_json(path / RUN_ARGUMENTS_NAME)
        for path in checkpoint_dirs
        if (path / RUN_ARGUMENTS_NAME).is_file()
    }
    if len(recorded) < 2:
        return
    (reference, expected), *others = recorded.items()
    for checkpoint, arguments in others:
        changed = sorted(
            name
            for name in set(expected) | set(arguments)
            if expected.get(name) != arguments.get(name)
        )
        if changed:
            shown = ", ".join(
                f"{name} {expected.get(name)!r} -> {arguments.get(name)!r}"
                if not isinstance(expected.get(name), dict)
                else f"another {name}"
                for name in changed[:3]
            )
            raise ValueError(
                f"{checkpoint} and {reference} are checkpoints of different training runs ("
                f"{shown}): the "
                "mean of two runs' weights is no model. Average the last checkpoints of one run."
            )


def weights_digest(folder: str | Path) -> str | None:
    """A digest of a saved model's weight files (see `_weights_digest`); None for a folder without
    weights."""
    return _weights_digest(Path(folder)) if Path(folder).is_dir() else None


def _weights_digest(checkpoint: Path) -> str | None:
    """SHA-256 of the weight files (taken from the verified manifest when there is one); None
    without any. The vocabulary shortlist (`shortlist.safetensors`) is no weight: building one
    leaves the digest as it was."""
    names = sorted(
        path.name for path in checkpoint.glob("*.safetensors") if path.name != SHORTLIST_FILE
    )
    if not names:
        return None
    manifest = checkpoint / CHECKSUMS_NAME
    recorded = (
        json.loads(manifest.read_text(encoding="utf-8"))["sha256"] if manifest.is_file() else {}
    )
    return hashlib.sha256(
        "".join(recorded.get(name) or file_sha256(checkpoint / name) for name in names).encode()
    ).hexdigest()


# --- The integrity policy: the files a model needs, and what its weights were saved with ----------


def verify_model_files(folder: str | Path) -> bool:
    """Verify the files of a saved model folder that using the model needs
    (`files.verify_checksums`, training records optional); False when the folder has no manifest."""
    return verify_checksums(folder, optional=TRAINING_RECORDS)


def record_saved_folder(folder: str | Path) -> Path:
    """After saving a model, checkpoint or tokenizer in `folder`: write its fingerprint (when it
    holds a model), then its checksum manifest, last. Also what accepts a folder changed on purpose
    (scripts/record_checksums.py)."""
    folder = Path(folder)
    if (folder / "config.json").is_file():
        atomic_write_json(folder / FINGERPRINT_NAME, model_fingerprint(folder))
    return write_checksums(folder)


def model_fingerprint(folder: str | Path) -> dict:
    """{"config": the config fields that fix what the weights compute (`architecture`), "tokenizer":
    a digest of the tokenizer.json vocabulary, merges and added tokens (None without
    tokenizer.json)}."""
    folder = Path(folder)
    config = _read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    if isinstance(config, dict) and config.get("model_type") in CONFIG_MAPPING:
        try:  # every value as the model sees it, defaults included
            config = AutoConfig.from_pretrained(folder).to_dict()
        except (ValueError, TypeError, OSError) as error:
            raise ValueError(
                f"{folder / 'config.json'} is not a valid {config['model_type']} config ({error})."
            ) from error
    config = architecture(config) if isinstance(config, dict) else {}
    tokenizer_path = folder / "tokenizer.json"
    return {
        "config": config,
        "tokenizer": vocabulary_digest(_read_json(tokenizer_path))
        if tokenizer_path.is_file()
        else None,
    }


def architecture(config: Mapping) -> dict:
    """A config's fields that fix what the weights compute (not `FREE_CONFIG_FIELDS`), as
    JSON values."""
    kept = {name: value for name, value in config.items() if not FREE_CONFIG_FIELDS.fullmatch(name)}
    return json.loads(json.dumps(kept, sort_keys=True, default=str))


def config_changes(before: Mapping, after: Mapping) -> list[str]:
    """The fields two `architecture` dicts both have with different values (a field only one has is
    a version difference of the config class, not a change)."""
    return sorted(name for name in set(before) & set(after) if before[name] != after[name])


def vocabulary_digest(tokenizer_json: Mapping) -> str:
    """SHA-256 of what maps text to ids in a tokenizer.json: the vocabulary, the merges and the
    added tokens (two tokenizers of the same size differ here)."""
    model = tokenizer_json.get("model", {})
    merges = [
        " ".join(merge) if isinstance(merge, list) else merge for merge in model.get("merges", [])
    ]
    added = sorted(
        (token["id"], token["content"]) for token in tokenizer_json.get("added_tokens", [])
    )
    content = json.dumps([model.get("vocab"), merges, added], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def check_config_fingerprint(folder: Path) -> None:
    """Refuse a model folder whose config.json is not what its weights were saved with, by the
    fingerprint saved beside them (it still holds when the manifest is gone); a folder without
    one passes."""
    recorded = _recorded_fingerprint(folder)
    if recorded is None:
        return
    current = model_fingerprint(folder)["config"]
    if config_changes(recorded.get("config", {}), current):
        raise ValueError(
            f"{folder / 'config.json'} is not the config the weights were saved with "
            f"({describe_changes(recorded.get('config', {}), current)}): the model would compute "
            f"something else than it learned. Restore the saved config.json; {_accept(folder)}."
        )


def check_tokenizer_fingerprint(
    folder: Path, tokenizer_json: Mapping, what: str = "--model"
) -> None:
    """Refuse a tokenizer (its tokenizer.json content) for the model in `folder` when it is not the
    one the weights were saved with: another tokenizer of the same size passes every other check."""
    recorded = _recorded_fingerprint(folder)
    if recorded is not None and recorded.get("tokenizer") not in (
        None,
        vocabulary_digest(tokenizer_json),
    ):
        raise ValueError(
            f"{what}: the tokenizer is not the one the model in {folder} was saved with (the "
            "vocabularies "
            "differ, whatever their sizes): its ids would mean other tokens. Use the model's own "
            f"tokenizer files; {_accept(folder)}."
        )


def _recorded_fingerprint(folder: Path) -> dict | None:
    path = folder / FINGERPRINT_NAME
    if not path.is_file():
        return None
    recorded = _read_json(path)
    if not isinstance(recorded, dict):
        raise ValueError(f"{path} is damaged (not a JSON object); {_accept(folder)}.")
    return recorded


def _accept(folder: Path) -> str:
    return f"if the change is meant, record the folder as it is now: {RECORD_COMMAND} {folder}"


def describe_changes(before: Mapping, after: Mapping) -> str:
    """ "encoder_layers 6 -> 3, norm_position 'pre' -> 'post'" for the `config_changes`."""
    changed = config_changes(before, after)
    shown = [f"{name} {before[name]!r} -> {after[name]!r}" for name in changed[:5]]
    return ", ".join(shown) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not readable JSON ({error}).") from error


def load_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The state dict saved by `save_pretrained` in `checkpoint` (one safetensors file or an index
    of shards)."""
    if (checkpoint / WEIGHTS_NAME).is_file():
        return _load_safetensors(checkpoint / WEIGHTS_NAME)
    if (checkpoint / WEIGHTS_INDEX_NAME).is_file():
        shards = sorted(
            set(json.loads((checkpoint / WEIGHTS_INDEX_NAME).read_text())["weight_map"].values())
        )
        return {
            name: tensor
            for shard in shards
            for name, tensor in _load_safetensors(checkpoint / shard).items()
        }
    raise ValueError(
        f"{checkpoint} holds no {WEIGHTS_NAME} (or sharded index): not a saved model checkpoint."
    )


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(path)
    except (SafetensorError, OSError) as error:
        raise ValueError(
            f"{path} is truncated or corrupted ({error}); save the model again or use another "
            "checkpoint."
        ) from error


def check_finite_weights(weights: Mapping[str, torch.Tensor] | torch.nn.Module, where) -> None:
    """Refuse weights holding NaN or infinity (a diverged run), naming the first such tensor."""
    items = (
        weights.state_dict().items() if isinstance(weights, torch.nn.Module) else weights.items()
    )
    for name, tensor in items:
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{where}: `{name}` holds NaN or infinite values: {DIVERGED_ADVICE}.")


def check_saved_model_folder(folder: Path) -> None:
    """Check a local model folder before transformers reads it: checksums, config.json and weight
    headers.

    Each check turns what would be a deep traceback, a silent default or an interactive prompt into
    a one-line error naming the file.
    """
    verify_model_files(folder)
    config_path = folder / "config.json"
    check_not_unfinished_run(folder)
    if not config_path.is_file():
        raise ValueError(
            f"{folder} holds no config.json: not a saved model folder (save_pretrained writes one)."
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{config_path} is not valid JSON ({error}).") from error
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in CONFIG_MAPPING:
        # transformers would otherwise look for remote code and ask "run the custom code? [y/N]".
        ours = ", ".join(CONFIG_MAPPING._extra_content) or "none registered"
        raise ValueError(
            f"{config_path}: model_type {model_type!r} is not a known model type (this package's: "
            f"{ours}). Correct it in config.json."
        )
    missing = [name for name in SIZE_FIELDS if name not in config]
    if missing and model_type in CONFIG_MAPPING._extra_content:
        raise ValueError(
            f"{config_path} lacks {', '.join(missing)}: the model's size cannot be known. "
            "Restore the "
            "config.json saved with the weights."
        )
    for path in (
        [folder / WEIGHTS_NAME]
        if (folder / WEIGHTS_NAME).is_file()
        else sorted(folder.glob("*.safetensors"))
    ):
        try:
            with safe_open(path, framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            raise ValueError(
                f"{path} is truncated or corrupted ({error}); save the model again or use another "
                "checkpoint."
            ) from error
    check_config_fingerprint(folder)


def check_not_unfinished_run(folder: Path, what: str = "--model") -> None:
    """Refuse, naming its checkpoints, a training run folder without its final model (a run that was
    stopped or is still going): its model is in the checkpoints."""
    checkpoints = complete_checkpoints(folder) if not (folder / "config.json").is_file() else []
    if checkpoints:
        raise ValueError(
            f"{what} {folder} is a training run without a final model (stopped, or still "
            "training): give "
            f"one of its checkpoints ({checkpoints[-1]}), or average the last ones with "
            "scripts/average_checkpoints.py."
        )


def save_pretrained_atomically(saveable, output_dir) -> Path:
    """`saveable.save_pretrained` (a tokenizer, a model) into a staging folder that then replaces
    `output_dir`, with a fingerprint and a checksum manifest: readers see the old folder or the
    complete new one, never a mix."""
    with no_space_reported(str(output_dir)), atomic_directory(output_dir, replace=True) as staging:
        saveable.save_pretrained(staging)
        record_saved_folder(staging)
    return Path(output_dir)


def load_saved_model(
    name_or_path, what: str = "--model", trust_remote_code: bool = False, **kwargs
):
    """`AutoModelForSeq2SeqLM.from_pretrained` after `check_saved_model_folder` (local folders),
    refusing non-finite weights. `what` names the argument in errors."""
    check_local_or_hub(name_or_path, what)
    if Path(name_or_path).is_dir():
        check_saved_model_folder(Path(name_or_path))
    # Mismatched shapes are let through only to be named by `check_weights_fit` (transformers' own
    # error does not).
    kwargs = {"ignore_mismatched_sizes": True, **kwargs}
    model, loading = AutoModelForSeq2SeqLM.from_pretrained(
        name_or_path, trust_remote_code=trust_remote_code, output_loading_info=True, **kwargs
    )
    check_weights_fit(loading, name_or_path)
    check_finite_weights(model, name_or_path)
    return model


def check_weights_fit(loading: Mapping, where) -> None:
    """Refuse a model whose saved weights and config.json disagree (transformers only warns, then
    runs a model with freshly initialised or dropped layers): `loading` is from_pretrained's
    loading info."""
    missing, unused = (
        sorted(loading.get("missing_keys", ())),
        sorted(loading.get("unexpected_keys", ())),
    )
    mismatched = sorted(str(item) for item in loading.get("mismatched_keys", ()))
    if not (missing or unused or mismatched):
        return
    found = [
        f"{len(names)} {kind} (e.g. {names[0]})"
        for kind, names in (
            ("weights missing from the file", missing),
            ("saved weights unused", unused),
            ("of another shape", mismatched),
        )
        if names
    ]
    raise ValueError(
        f"{where}: the saved weights do not fit config.json ({'; '.join(found)}): the config was "
        "changed "
        "or belongs to another model. Restore the config.json saved with the weights."
    )


def load_saved_tokenizer(
    name_or_path, what: str = "--tokenizer_name_or_path", trust_remote_code: bool = False
):
    """`AutoTokenizer.from_pretrained` with a one-line error for a missing or incomplete
    tokenizer folder."""
    check_local_or_hub(name_or_path, what)
    folder = Path(name_or_path)
    if folder.is_dir():
        verify_model_files(folder)
        check_not_unfinished_run(folder, what)
        if not (folder / "tokenizer.json").is_file():
            raise ValueError(
                f"{what} {folder} holds no tokenizer.json: not a complete tokenizer folder "
                "(scripts/train_tokenizer.py writes tokenizer.json and tokenizer_config.json)."
            )
        check_tokenizer_fingerprint(folder, _read_json(folder / "tokenizer.json"), what)
    try:
        return AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError, KeyError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{what} {name_or_path}: cannot load a tokenizer ({message}).") from error


def _check_same_parameters(
    reference_weights: dict, weights: dict, reference: Path, checkpoint: Path
):
    if reference_weights.keys() != weights.keys():
        difference = sorted(reference_weights.keys() ^ weights.keys())
        raise ValueError(
            f"{checkpoint} and {reference} hold different parameters ({difference[:5]}...): "
            "only checkpoints of the same model can be averaged."
        )
    for name, tensor in weights.items():
        if tensor.shape != reference_weights[name].shape:
            raise ValueError(
                f"`{name}` has shape {tuple(tensor.shape)} in {checkpoint} but "
                f"{tuple(reference_weights[name].shape)} in {reference}: not the same model."
            )


def _copy_model_files(checkpoint: Path, destination: Path):
    """Everything of `checkpoint` except its weights and training state."""
    for path in checkpoint.iterdir():
        skipped = (
            path.name in TRAINING_STATE_FILES
            or path.name == WEIGHTS_INDEX_NAME
            or path.name.endswith(".safetensors")
            or any(path.match(p) for p in TRAINING_STATE_PATTERNS)
        )
        if path.is_file() and not skipped:
            shutil.copy2(path, destination / path.name)


__all__ = [
    "FINGERPRINT_NAME",
    "RUN_ARGUMENTS_NAME",
    "check_same_run",
    "check_not_unfinished_run",
    "weights_digest",
    "TRAINING_RECORDS",
    "average_checkpoints",
    "architecture",
    "check_same_model",
    "config_changes",
    "check_config_fingerprint",
    "check_tokenizer_fingerprint",
    "check_weights_fit",
    "model_fingerprint",
    "record_saved_folder",
    "verify_model_files",
    "vocabulary_digest",
    "last_checkpoints",
    "complete_checkpoints",
    "load_weights",
    "check_finite_weights",
    "check_saved_model_folder",
    "load_saved_model",
    "load_saved_tokenizer",
    "save_pretrained_atomically",
]
