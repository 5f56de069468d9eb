"""The translation metrics the Hugging Face way: `evaluate` modules and `compute_metrics` for
`Seq2SeqTrainer`.

- `translation_metric_path()` is the path of the `evaluate` module script (`metric_translation.py`,
  shipped in the package, so it works from a clone and from an installed package);
  `evaluate.load(path)` loads it without the Hub. `load_translation_metric()` does both.
- `translation_compute_metrics(tokenizer)` is a `compute_metrics` for
  `Seq2SeqTrainer(predict_with_generate=True)`: it decodes generated ids and labels (``-100`` and
  language tags removed) and scores them with that module, or with any other `evaluate` metric given
  by name (Hub access needed) or as a loaded module.
- `push_translation_metric(repo_id)` publishes the module as a metric Space on the Hub.
"""

import re
from collections.abc import Callable
from numbers import Integral, Real
from pathlib import Path

import numpy as np
from huggingface_hub import CommitOperationAdd, HfApi

METRIC_SCRIPT = Path(__file__).with_name("metric_translation.py")
METRIC_CARD = Path(__file__).with_name("metric_translation.md")
# the target-language tags of multilingual models, e.g. <2de>
LANGUAGE_TAG = re.compile(r"^<2[^<>\s]+>$")
# Our module's "sacrebleu" is logged as "bleu", the name Seq2SeqTrainer examples (and
# metric_for_best_model) use.
TRAINER_NAMES = {"sacrebleu": "bleu"}


def translation_metric_path() -> str:
    """The path of the `evaluate` module script: `evaluate.load(translation_metric_path())` needs
    no Hub."""
    return str(METRIC_SCRIPT)


def load_translation_metric(config_name: str = "default", **kwargs):
    """`evaluate.load` of the project's translation metrics (see `metric_translation.py` for
    configurations).

    `kwargs` go to `evaluate.load` (e.g. ``keep_in_memory=True``, ``experiment_id`` for
    distributed runs).
    """
    import evaluate

    return evaluate.load(translation_metric_path(), config_name, **kwargs)


def translation_compute_metrics(
    tokenizer, metric=None, target_lang: str | None = None, **compute_kwargs
) -> Callable[..., dict]:
    """A `compute_metrics` for `Seq2SeqTrainer` with ``predict_with_generate=True``: decoded
    texts, scored.

    Generated ids and labels are decoded with `tokenizer` after removing the ``-100`` padding of
    labels (and of predictions the Trainer pads across batches) and every language tag ``<2xx>``.
    `metric` is None (this package's module: sacreBLEU, reported as ``bleu``, tokenized BLEU and
    chrF; `target_lang` picks sacreBLEU's tokenizer for zh/ja/ko), the name or path of any
    `evaluate` metric (names are looked up on the Hub), or a loaded module or
    `evaluate.combine(...)`. `compute_kwargs` go to its `compute`. The function returns the float
    scores of the metric's result (the Trainer logs numbers).
    """
    import evaluate

    if metric is None:
        # no cache files, which ranks would share
        metric = load_translation_metric(keep_in_memory=True)
        compute_kwargs = {"target_lang": target_lang, **compute_kwargs}
    elif isinstance(metric, str | Path):
        metric = evaluate.load(str(metric), keep_in_memory=True)
    elif not hasattr(metric, "compute"):
        raise TypeError(
            f"`metric` must be None, an evaluate metric's name or path, or a loaded metric; "
            f"got {type(metric).__name__}."
        )
    tag_ids = np.array(
        [index for token, index in tokenizer.get_vocab().items() if LANGUAGE_TAG.match(token)]
    )

    def decode(ids) -> list[str]:
        ids = np.asarray(ids)
        ids = np.where((ids == -100) | np.isin(ids, tag_ids), tokenizer.pad_token_id, ids)
        return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]

    def compute_metrics(prediction) -> dict:
        predictions = prediction.predictions
        # some models return (ids, ...); the generated ids come first
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        result = metric.compute(
            predictions=decode(predictions),
            references=decode(prediction.label_ids),
            **compute_kwargs,
        )
        return {
            TRAINER_NAMES.get(name, name): float(value)
            for name, value in result.items()
            if isinstance(value, Real) and not isinstance(value, Integral)
        }

    return compute_metrics


SPACE_APP = """import evaluate
from evaluate.utils import launch_gradio_widget

launch_gradio_widget(evaluate.load("{repo_id}"))
"""


def push_translation_metric(
    repo_id: str,
    package_requirement: str = "modeling-dwlstm",
    private: bool = False,
    token: str | None = None,
    endpoint: str | None = None,
):
    """Publish the module as a metric Space `repo_id` ('user/name') that
    `evaluate.load(repo_id)` finds.

    The Space holds the script as ``name.py`` (the file `evaluate.load("user/name")` fetches), the
    metric card as README.md, a Gradio widget (app.py), and requirements.txt with
    `package_requirement`, the pip requirement of this package (e.g. a ``git+https://...`` URL),
    since the module scores with it. `endpoint` and `token` as in `hub.push_translation_model`.
    Returns the `CommitInfo` of the upload.
    """
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"`repo_id` must look like 'user/name', got {repo_id!r}.")
    api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo_id, repo_type="space", space_sdk="gradio", private=private, exist_ok=True)
    files = {
        f"{repo_id.split('/')[1]}.py": METRIC_SCRIPT.read_bytes(),
        "README.md": METRIC_CARD.read_bytes(),
        "app.py": SPACE_APP.format(repo_id=repo_id).encode(),
        "requirements.txt": f"evaluate>=0.4.6\nsacrebleu>=2.4\n{package_requirement}\n".encode(),
    }
    return api.create_commit(
        repo_id,
        repo_type="space",
        commit_message="Upload translation metrics (evaluate module)",
        operations=[
            CommitOperationAdd(path_in_repo=path, path_or_fileobj=content)
            for path, content in files.items()
        ],
    )
