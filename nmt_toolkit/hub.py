"""Share a trained translation model on the Hugging Face Hub: a model card and one push of
everything.

`push_translation_model` uploads, in a single commit, what `from_pretrained("user/name")` and
`pipeline("translation", model="user/name", trust_remote_code=True)` need on a machine without this
package: the weights and config (whose `auto_map` and `custom_pipelines` point at the code), the
generation config, the tokenizer, the modelling code and the translation pipeline file (all written
by `save_pretrained`), and a `README.md` model card from `model_card`.

`model_card` describes the architecture (read from the config), the training data, the evaluation
results (the dictionary `evaluation.run_evaluation` writes to results.json) and the papers to cite.
"""

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from modeling_dwlstm import MEMBERS
from modeling_dwlstm.configuration_translation import FamilyMember

from .checkpoints import check_finite_weights, weights_digest
from .evaluation import results_table
from .files import atomic_write_text

# Config fields every card's architecture table shows; each member adds its own
# (`FamilyMember.card_fields`).
ARCHITECTURE_FIELDS = (
    "encoder_layers",
    "decoder_layers",
    "d_model",
    "ffn_dim",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "label_smoothing",
    "vocab_size",
    "max_position_embeddings",
    "position_embedding_type",
    "tie_word_embeddings",
    "activation_function",
)
# Shown, with their paper cited, only by a model that has them on.
LANGUAGE_AWARE_FIELDS = ("language_aware_norm", "language_aware_transform")
ZHANG_2020 = """@inproceedings{zhang2020improving,
  title     = {Improving Massively Multilingual Neural Machine Translation and Zero-Shot Translation},
  author    = {Zhang, Biao and Williams, Philip and Titov, Ivan and Sennrich, Rico},
  booktitle = {Proceedings of the 58th Annual Meeting of the Association for Computational Linguistics},
  year      = {2020}
}"""  # noqa: E501


def family_member(config) -> FamilyMember:
    """The record of the member that `config` builds."""
    for member in MEMBERS:
        if member.config_class.model_type == config.model_type:
            return member
    raise ValueError(f"{config.model_type!r} is not a modeling_dwlstm family member.")


def model_card(
    model,
    training_data: str,
    results: Mapping | None = None,
    repo_id: str | None = None,
    license: str = "apache-2.0",
) -> str:
    """A README.md for the Hub: YAML metadata, architecture, data, results, usage, citation.

    Args:
        model: the trained model (its config gives the architecture and the language pairs).
        training_data: one or more sentences on what it was trained on (corpus, size, tokenizer).
        results: the evaluation results (`evaluation.run_evaluation`'s dictionary), or None.
        repo_id: "user/name", used in the usage example.
        license: the card's licence identifier.
    """
    if not isinstance(training_data, str) or not training_data.strip():
        raise ValueError(
            "`training_data` must say what the model was trained on (a non-empty string)."
        )
    config = model.config
    member = family_member(config)
    pairs = list(getattr(config, "language_pairs", None) or [])
    languages = list(dict.fromkeys(code for pair in pairs for code in pair.split("-")))
    name = repo_id or "path/to/model"
    task = f"translation_{pairs[0].replace('-', '_to_')}" if pairs else "translation"
    example = '"A man rides a horse.", num_beams=4'
    # multilingual: the direction is chosen per call
    if len({pair.split("-")[1] for pair in pairs}) > 1:
        task, example = (
            "translation",
            f'"A man rides a horse.", src_lang="{pairs[0].split("-")[0]}", '
            f'tgt_lang="{pairs[0].split("-")[1]}", num_beams=4',
        )
    metadata = {
        "language": languages or None,
        "license": license,
        "library_name": "transformers",
        "pipeline_tag": "translation",
        "tags": ["translation", config.model_type, "custom_code"],
        "metrics": ["bleu", "chrf"] if results else None,
    }
    lines = ["---", *_yaml_lines(metadata), "---", ""]
    lines += [f"# {name.split('/')[-1]}", ""]
    lines += [
        f"A {member.name} translation model"
        + (f" for {', '.join(pairs)}" if pairs else "")
        + f", {model.num_parameters() / 1e6:.2f}M parameters, "
        "built with modeling_dwlstm on Hugging Face Transformers.",
        "",
        "## Architecture",
        "",
        "| setting | value |",
        "|---|---|",
        f"| model_type | `{config.model_type}` |",
    ]
    language_aware = bool(getattr(config, "language_aware", False))
    lines += [
        f"| {field} | `{getattr(config, field)}` |"
        for field in ARCHITECTURE_FIELDS
        + member.card_fields
        + (LANGUAGE_AWARE_FIELDS if language_aware else ())
        if field not in config.unused_fields()
    ]
    lines += ["", "## Training data", "", training_data.strip(), ""]
    lines += ["## Evaluation", ""] + (
        _results_lines(results) if results else ["Not evaluated yet.", ""]
    )
    lines += [
        "## Usage",
        "",
        "The modelling code and the translation pipeline ship with the weights "
        "(`trust_remote_code=True`).",
        "",
        "```python",
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline",
        "",
        # or it asks [y/N]
        f'tokenizer = AutoTokenizer.from_pretrained("{name}", trust_remote_code=True)',
        f'model = AutoModelForSeq2SeqLM.from_pretrained("{name}", trust_remote_code=True)',
        f'translator = pipeline("{task}", model="{name}", trust_remote_code=True)',
        f"print(translator({example}))",
        "```",
        "",
        "## Citation",
        "",
        "```bibtex",
        *"\n\n".join(member.citations + ((ZHANG_2020,) if language_aware else ())).split("\n"),
        "```",
        "",
    ]
    return "\n".join(lines)


def push_translation_model(
    model,
    tokenizer,
    repo_id: str,
    card: str,
    private: bool = False,
    token: str | None = None,
    endpoint: str | None = None,
    commit_message: str = "Upload translation model",
):
    """Create `repo_id` if needed and upload model, tokenizer, code, pipeline and `card` in one
    commit, which also deletes every other file of the repository: it then holds exactly what this
    push wrote.

    `endpoint` defaults to the `HF_ENDPOINT` environment variable or huggingface.co; `token` to the
    logged-in user's. Returns the `CommitInfo` of the upload.
    """
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"`repo_id` must look like 'user/name', got {repo_id!r}.")
    check_finite_weights(model, "The model to push")  # a diverged model must not reach the Hub
    api = HfApi(endpoint=endpoint, token=token)
    _ask_hub(api, repo_id, api.create_repo, repo_id, private=private, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        missing = [
            name
            for name in ("config.json", "pipeline_translation.py")
            if not (Path(folder) / name).is_file()
        ]
        if missing:
            raise ValueError(
                f"save_pretrained wrote no {missing}: the pushed model could not be loaded without "
                "this package. Build the model after `import modeling_dwlstm`."
            )
        atomic_write_text(Path(folder, "README.md"), card)
        # Every other file of the repository is deleted in the same commit (.gitattributes
        # excepted): a file of an earlier model (its shortlist.safetensors, weight shards, another
        # tokenizer's files) would be read with this one.
        return _ask_hub(
            api,
            repo_id,
            api.upload_folder,
            repo_id=repo_id,
            folder_path=folder,
            commit_message=commit_message,
            delete_patterns="*",
        )


# What the Hub client raises: OS errors (no login, a refused connection) and the HTTP client's
# errors, the base of huggingface_hub's HTTP errors (httpx's HTTPError or a fork of it).
HUB_ERRORS = (OSError, *HfHubHTTPError.__bases__)


def _ask_hub(api: HfApi, repository: str, call, /, *args, **kwargs):
    """`call(*args, **kwargs)`, a network or Hub error turned into one line (not a traceback of the
    HTTP stack)."""
    try:
        return call(*args, **kwargs)
    except HUB_ERRORS as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"Cannot push {repository} to the Hub at {api.endpoint}: {reason}. Check the network, "
            "HF_ENDPOINT and the login (hf auth login, or --token)."
        ) from error


def read_results(path: str | os.PathLike) -> dict:
    """The results.json of `scripts/evaluate_translation.py`, with a clear error when it is not
    one."""
    try:
        results = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"Cannot read evaluation results from {path}: {error}") from error
    if not isinstance(results, dict) or (
        "sacrebleu" not in results and "directions" not in results
    ):
        raise ValueError(
            f"{path} is not a results.json of scripts/evaluate_translation.py (no `sacrebleu` "
            "and no "
            "`directions`)."
        )
    return results


def check_results_of(
    results: Mapping, model_dir: str | os.PathLike, results_path: str | os.PathLike
) -> None:
    """Refuse evaluation results of another model than `model_dir` (by the digest of the evaluated
    weights, recorded in results.json, or taken from the evaluated folder where it still exists):
    the card would show its scores."""
    evaluated = results.get("model")
    recorded = results.get("model_weights_sha256") or (
        weights_digest(evaluated) if isinstance(evaluated, str) else None
    )
    current = weights_digest(model_dir)
    if None not in (recorded, current) and recorded != current:
        raise ValueError(
            f"--results {results_path} are the scores of another model ({evaluated}, whose "
            "weights differ "
            f"from those in {model_dir}): the card would show them. Evaluate this model "
            "(scripts/evaluate_translation.py) and pass its results.json."
        )


def _results_lines(results: Mapping) -> list[str]:
    test_set = results.get("test_set") or "test set"
    split = f" ({results['split']})" if results.get("split") else ""
    # a multilingual evaluation: one row per direction, then the group averages
    if "directions" in results:
        return [
            f"On {test_set}{split}, beam {results.get('num_beams', '?')}:",
            "",
            *results_table(results),
            "",
        ]
    lines = [
        (
            f"On {test_set}{split}, {results.get('sentences', '?')} sentences, beam "
            f"{results.get('num_beams', '?')}, length penalty "
            f"{results.get('length_penalty', '?')}:"
        ),
        "",
        "| metric | score |",
        "|---|---|",
        f"| sacreBLEU | {results['sacrebleu']} |",
    ]
    if "tokenized_bleu" in results:
        lines.append(
            f"| tokenized case-sensitive BLEU (as in the papers) | {results['tokenized_bleu']} |"
        )
    if "chrf" in results:
        lines.append(f"| chrF | {results['chrf']} |")
    if "sentences_per_second" in results:
        lines.append(
            f"| decoding speed (sentences/s, {results.get('device', 'cpu')}) | "
            f"{results['sentences_per_second']} |"
        )
    lines.append("")
    if "sacrebleu_signature" in results:
        lines += [f"sacreBLEU signature: `{results['sacrebleu_signature']}`", ""]
    return lines


def _yaml_lines(metadata: Mapping) -> list[str]:
    """Flat YAML for the card header (strings and lists of strings only; None values left out)."""
    lines = []
    for key, value in metadata.items():
        if value is None:
            continue
        if isinstance(value, list):
            lines += [f"{key}:", *[f"- {json.dumps(item)}" for item in value]]
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    return lines
