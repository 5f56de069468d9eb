"""The project's translation metrics as an `evaluate` module: sacreBLEU with its signature, the
papers' tokenized case-sensitive BLEU, and chrF.

Load it with `evaluate.load(path)`, where `path` is this file
(`nmt_toolkit.metrics.translation_metric_path()` gives it) or a metric Space it was pushed to;
`nmt_toolkit.metrics.load_translation_metric()` does both steps. The numbers come from
`nmt_toolkit.evaluation.score_translations`, the function behind `scripts/evaluate_translation.py`'s
results.json, so the package must be installed where this module runs.

Configurations (`evaluate.load(path, config_name)`) select what `compute` returns; see `CONFIGS`.
"""

import datasets
import evaluate

# evaluate checks a script's top-level imports and names what to pip install
import sacrebleu  # noqa: F401

# indented, so that evaluate does not ask pip for "modeling_dwlstm" (not on PyPI under that name)
try:
    from nmt_toolkit.evaluation import score_off_target, score_translations
except ImportError as error:
    raise ImportError(
        "This metric computes its scores with the modeling_dwlstm package: install it (pip install "
        "'modeling-dwlstm[metrics]' from its repository) where the metric runs."
    ) from error

# Configuration name -> (scoring function of nmt_toolkit.evaluation, the keys of its result to
# return; None: all). Each function takes (predictions, references, target_lang) and returns a dict.
# "off_target" (the share of outputs not in the target language) is the one that needs no
# references: see `_compute`.
OFF_TARGET = "off_target"
CONFIGS = {
    "default": (score_translations, None),
    "sacrebleu": (score_translations, ("sacrebleu", "sacrebleu_signature")),
    "tokenized_bleu": (score_translations, ("tokenized_bleu", "tokenized_bleu_method")),
    "chrf": (score_translations, ("chrf", "chrf_signature")),
    OFF_TARGET: (None, ("off_target_rate", "language_id")),
}

_DESCRIPTION = """\
Corpus-level translation scores as Xu et al.'s depth-wise LSTM papers and this project report them:
sacreBLEU (detokenized, 13a, with its signature: the number to compare across papers), the papers'
tokenized case-sensitive BLEU (multi-bleu.perl on 13a-tokenized text with hyphenated compounds split as
tensor2tensor's get_ende_bleu.sh does), and chrF. Scores are rounded to two decimals, as in results.json.
Configurations: "default" (all), "sacrebleu", "tokenized_bleu", "chrf", and "off_target": the share of
outputs not identified as `target_lang` by py3langid (offline; `languages` restricts the candidates to the
model's languages, which is more reliable on short sentences), as multilingual evaluation reports it.
"""  # noqa: E501

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): the hypotheses, one detokenized sentence each.
    references (`list` of `str`): one reference per hypothesis, line-aligned.
    target_lang (`str`, *optional*): the target language code; sacreBLEU picks its tokenizer for zh, ja, ko.
        Required by "off_target".
    languages (`list` of `str`, *optional*): "off_target" only: the candidate languages (default: all 97).
Returns (the "default" configuration; the others return a subset):
    sentences (`int`), sacrebleu (`float`), sacrebleu_signature (`str`), sacrebleu_text (`str`),
    tokenized_bleu (`float`), tokenized_bleu_method (`str`), chrf (`float`), chrf_signature (`str`).
    "off_target": off_target_rate (`float`, a share in [0, 1]), language_id (`str`).
Examples:
    >>> from nmt_toolkit.metrics import load_translation_metric
    >>> metric = load_translation_metric()
    >>> metric.compute(predictions=["Ein Mann reitet ein Pferd."], references=["Ein Mann reitet ein Pferd."])["sacrebleu"]
    100.0
"""  # noqa: E501

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
    url = "https://www.aclweb.org/anthology/W18-6319",
}
@inproceedings{papineni-etal-2002-bleu,
    title = "{B}leu: a Method for Automatic Evaluation of Machine Translation",
    author = "Papineni, Kishore and Roukos, Salim and Ward, Todd and Zhu, Wei-Jing",
    booktitle = "Proceedings of the 40th Annual Meeting of the Association for Computational Linguistics",
    year = "2002",
    pages = "311--318",
    url = "https://www.aclweb.org/anthology/P02-1040",
}
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    pages = "392--395",
    url = "https://aclanthology.org/W15-3049",
}
"""  # noqa: E501


class TranslationMetrics(evaluate.Metric):
    """sacreBLEU with signature, tokenized case-sensitive BLEU and chrF, from
    `evaluation.score_translations`."""

    def _info(self):
        if self.config_name not in CONFIGS:
            raise ValueError(
                f"Unknown configuration {self.config_name!r} of the translation metrics; "
                f"choose one of {sorted(CONFIGS)}."
            )
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=[
                "https://aclanthology.org/W18-6319",
                "https://aclanthology.org/W15-3049",
            ],
            license="Apache-2.0",
        )

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add a batch of predictions and references, every one checked to be a string.\n"""
        # evaluate checks only the first item's type; Arrow would turn a later list into the string
        # "['...']".
        for name, texts in (("predictions", predictions), ("references", references)):
            if texts is not None and (
                isinstance(texts, str) or not all(isinstance(text, str) for text in texts)
            ):
                raise ValueError(
                    f"`{name}` must be a list of strings, one sentence each (one reference per "
                    f"hypothesis); got {texts!r:.100}"
                )
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def _compute(self, predictions, references, target_lang=None, languages=None):
        # a property of the outputs alone: the references are not read
        if self.config_name == OFF_TARGET:
            return score_off_target(list(predictions), target_lang, languages)
        function, keys = CONFIGS[self.config_name]
        scores = function(list(predictions), list(references), target_lang)
        return scores if keys is None else {key: scores[key] for key in keys}
