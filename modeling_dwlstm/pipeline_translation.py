"""The `translation` pipeline that transformers 5 removed, for the modeling_dwlstm models.

Two ways to get it:

- In-process: `import modeling_dwlstm` calls `register_translation_pipeline()`, after which
  `pipeline("translation", model=..., tokenizer=...)` and `pipeline("translation_en_to_de", ...)`
  work as in transformers 4.
- Anywhere: `save_pretrained` of the models writes `custom_pipelines`
  (`translation_pipeline_entries`) into `config.json` and this file beside the weights (it is part
  of the model's code), so `pipeline("translation", model=dir, trust_remote_code=True)` works in a
  process that cannot import modeling_dwlstm.

Because of the second use this file is loaded as standalone remote code: it imports only from
`transformers`, `torch` and the standard library, and importing it registers nothing.
"""

import copy
import logging
import re
import unicodedata
from collections.abc import Iterable

import torch
import transformers.pipelines
from transformers import AutoModelForSeq2SeqLM, GenerationConfig, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY

# Both directions with English are registered for each of these: OPUS-100 and WMT are
# English-centric.
OPUS100_LANGUAGES = (
    "af am an ar as az be bg bn br bs ca cs cy da de dz el en eo es et eu fa fi fr fy ga gd gl "
    "gu ha he hi hr hu hy id ig is it ja ka kk km kn ko ku ky li lt lv mg mk ml mn mr ms mt my "
    "nb ne nl nn no oc or pa pl ps pt ro ru rw se sh si sk sl sq sr sv ta te tg th tk tr tt ug "
    "uk ur uz vi wa xh yi yo zh zu"
).split()
WMT_LANGUAGES = (
    "cs de en et fi fr gu ha hi hr hsb is iu ja kk km liv lt lv pl ps ro ru sah ta tr uk xh zh"
).split()
DEFAULT_LANGUAGE_CODES = tuple(sorted(set(OPUS100_LANGUAGES) | set(WMT_LANGUAGES)))
# Every direction among these is registered too: OPUS-100's zero-shot test set (ar de fr nl ru zh)
# and WMT's non-English tasks (de-fr, cs-de, cs-uk, ja-zh, ...).
DIRECT_LANGUAGES = ("ar", "cs", "de", "fr", "ja", "nl", "ru", "uk", "zh")
PIVOT_LANGUAGE = "en"

# en, yue, zh_Hant: as in the tokenizer's <2xx> tags
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:_[A-Za-z0-9]+)*")
LANGUAGE_TAG = re.compile(r"<2[A-Za-z]{2,3}(?:_[A-Za-z0-9]+)*>")
TASK_LANGUAGES = re.compile(r"translation_(?P<src>.+?)_to_(?P<tgt>.+)")

logger = logging.getLogger(__name__)


class TranslationPipeline(Pipeline):
    """Translate text with a sequence-to-sequence model, as transformers 4's pipeline did.

    `translator("text")` gives `[{"translation_text": ...}]` (one per text for a list); generation
    kwargs go to `generate()`. The target language comes from `tgt_lang` or a task name like
    `translation_en_to_de`; where the tokenizer has a tag `<2xx>` for it, the tag goes in front of
    the source. `src_lang` matters for tokenizers that set language codes themselves (mBART, M2M100,
    NLLB) and for checking a multilingual model's direction.

    A multilingual model needs a target language (a many-to-one model's one target is taken) and
    refuses, naming its languages, a target without a tag or a source outside its languages;
    zero-shot directions between two of them are allowed, and one call may mix directions (inputs as
    `{"text": ..., "tgt_lang": ..., "src_lang": ...}`). Any model whose config names
    `language_pairs` refuses a direction outside them, a task's direction (`translation_de_to_fr`)
    as the pipeline is created.
    """

    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True
    # transformers 4's defaults for this pipeline; the papers decode with beam 4 as well.
    _default_generation_config = GenerationConfig(max_new_tokens=256, num_beams=4)

    def __init__(self, *args, **kwargs):
        # The generation parameters given here apply to every call. They are kept here, not by the
        # base class, whose handling of them changed within transformers 5 (`generation_settings`
        # applies them the same way in all).
        keys = {key for key in vars(GenerationConfig()) if not key.startswith("_")}
        keys.add("generation_config")
        self._init_generation_kwargs = {key: kwargs.pop(key) for key in keys & kwargs.keys()}
        super().__init__(*args, **kwargs)
        src_lang, tgt_lang = languages_from_task(self.task)
        # a task such as translation_de_to_fr: refused now rather than at the first call
        if tgt_lang is not None:
            self._check_direction(src_lang, tgt_lang)

    def __call__(self, inputs, **kwargs):
        """Translate a text or a list of texts; see the class docstring for the output shape.

        An empty or blank text translates to "" without decoding (a model asked to translate nothing
        would invent something), as `evaluation.translate_sentences` does; `[]` gives `[]`.
        """
        if inputs is None:
            raise ValueError("The translation pipeline needs a text or a list of texts, got None.")
        if isinstance(inputs, tuple):  # the tokenizer would read a tuple as one pre-tokenized text
            inputs = list(inputs)
        if not isinstance(inputs, (str, dict, list, Iterable)) or isinstance(
            inputs, (bytes, bytearray)
        ):
            raise ValueError(
                f"The translation pipeline translates a string, a list of strings (or of "
                f"{{'text': ..., 'tgt_lang': ...}} dicts) or an iterable of them; got a "
                f"{type(inputs).__name__}."
            )
        # generators, datasets: streamed by the base class as is
        if not isinstance(inputs, (str, dict, list)):
            return super().__call__(inputs, **kwargs)
        items = [inputs] if isinstance(inputs, (str, dict)) else inputs
        texts = []
        for index, item in enumerate(items):
            # dicts: one direction each (see class)
            text = item.get("text") if isinstance(item, dict) else item
            if not isinstance(text, str):
                raise ValueError(
                    f"The translation pipeline translates strings (or {{'text': ..., 'tgt_lang': "
                    f"...}} dicts); item {index} is a {type(item).__name__}"
                    + (
                        f" whose 'text' is a {type(text).__name__}."
                        if isinstance(item, dict)
                        else "."
                    )
                )
            texts.append(text)
        self._warn_about_decomposed_text(texts)
        to_translate = [item for item, text in zip(items, texts) if text.strip()]
        translated = iter(super().__call__(to_translate, **kwargs) if to_translate else [])
        empty = self._empty_translations(kwargs)
        result = [next(translated) if text.strip() else list(empty) for text in texts]
        if isinstance(inputs, (str, dict)):
            return result[0]
        if all(len(translations) == 1 for translations in result):
            return [translations[0] for translations in result]
        return result

    def _warn_about_decomposed_text(self, texts: list[str]) -> None:
        """A tokenizer saved before NFC normalization was added reads decomposed accents ("u" +
        combining diaeresis) as they are, mostly as <unk>: say so, as the evaluation does, rather
        than translate them badly."""
        if not hasattr(self, "_composes"):
            backend = getattr(self.tokenizer, "backend_tokenizer", None)
            normalizer = backend.normalizer if backend is not None else None
            # Slow tokenizers (SentencePiece) normalize themselves; a fast one without a normalizer
            # does not.
            self._composes = backend is None or (
                normalizer is not None and normalizer.normalize_str("u\u0308") == "\u00fc"
            )
        count = (
            0
            if self._composes
            else sum(not unicodedata.is_normalized("NFC", text) for text in texts)
        )
        if count:
            logger.warning(
                "%d of %d texts are not in Unicode NFC (decomposed accents), and this model's "
                "tokenizer, saved before NFC normalization was added, reads them as they are "
                "(mostly <unk>): convert them to NFC (unicodedata.normalize('NFC', text)), or "
                "train a new tokenizer.",
                count,
                len(texts),
            )

    def _empty_translations(self, kwargs) -> list[dict]:
        """What an empty text translates to: as many empty records as `num_return_sequences`
        asks for."""
        count = (
            kwargs.get("num_return_sequences")
            or self.model.generation_config.num_return_sequences
            or 1
        )
        if kwargs.get("return_tensors"):
            return [
                {"translation_token_ids": torch.zeros(0, dtype=torch.long)} for _ in range(count)
            ]
        return [{"translation_text": ""} for _ in range(count)]

    def _sanitize_parameters(
        self,
        src_lang=None,
        tgt_lang=None,
        truncation=None,
        return_tensors=None,
        clean_up_tokenization_spaces=None,
        **generate_kwargs,
    ):
        """Only what the caller passed, so that call arguments override those given at
        construction."""
        preprocess_params = {"src_lang": src_lang, "tgt_lang": tgt_lang, "truncation": truncation}
        postprocess_params = {
            "return_tensors": return_tensors,
            "clean_up_tokenization_spaces": clean_up_tokenization_spaces,
        }
        return _without_none(preprocess_params), generate_kwargs, _without_none(postprocess_params)

    def preprocess(self, text: str | dict, src_lang=None, tgt_lang=None, truncation=False):
        """Tokenize one text, with the target-language tag in front when the tokenizer has one."""
        if isinstance(text, dict):  # one input of a call that mixes directions
            unknown = sorted(set(text) - {"text", "src_lang", "tgt_lang"})
            if "text" not in text or unknown:
                raise ValueError(
                    f"A dict input looks like {{'text': ..., 'tgt_lang': 'de', 'src_lang': "
                    f"'en'}}; got the keys {sorted(text)}."
                )
            src_lang, tgt_lang, text = (
                text.get("src_lang", src_lang),
                text.get("tgt_lang", tgt_lang),
                text["text"],
            )
        task_src, task_tgt = languages_from_task(self.task)
        src_lang, tgt_lang = (
            src_lang or task_src,
            tgt_lang or task_tgt or self._sole_tagged_target(),
        )
        self._check_direction(src_lang, tgt_lang)
        # mBART, M2M100, NLLB set language codes themselves
        if hasattr(self.tokenizer, "_build_translation_inputs"):
            return self.tokenizer._build_translation_inputs(
                text,
                return_tensors="pt",
                truncation=truncation,
                src_lang=src_lang,
                tgt_lang=tgt_lang,
            )
        inputs = self.tokenizer(text, truncation=truncation, return_tensors="pt")
        inputs.pop("token_type_ids", None)
        tag_id = self._language_tag_id(tgt_lang)
        first = (
            self.tokenizer.convert_ids_to_tokens(int(inputs["input_ids"][0, 0]))
            if inputs["input_ids"].numel()
            else ""
        )
        if tag_id is not None and LANGUAGE_TAG.fullmatch(first or "") and first != f"<2{tgt_lang}>":
            raise ValueError(
                f"The text starts with the tag {first} but tgt_lang is {tgt_lang!r}: take the "
                "tag out of "
                "the text (tgt_lang puts its own in front)."
            )
        # not when the text starts with the tag
        if tag_id is not None and inputs["input_ids"][0, 0] != tag_id:
            inputs["input_ids"] = torch.cat([torch.tensor([[tag_id]]), inputs["input_ids"]], dim=1)
            inputs["attention_mask"] = torch.cat(
                [torch.ones(1, 1, dtype=torch.long), inputs["attention_mask"]], dim=1
            )
        return inputs

    def _forward(self, model_inputs, **generate_kwargs):
        """Generate, grouping the output sequences per input (several with
        `num_return_sequences`)."""
        batch_size = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(
            **model_inputs, **self.generation_settings(generate_kwargs)
        )
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def generation_settings(self, generate_kwargs: dict) -> dict:
        """The `generate()` kwargs of one call, as transformers' generation pipelines make them.

        The call's parameters on top of those given at construction (unless the call passes a
        `generation_config`, which then replaces them), plus this pipeline's defaults
        (`_default_generation_config`, the tokenizer's pad id) for what neither they, their
        `generation_config` nor the model's generation config set; a default `max_new_tokens`
        yields to a set `max_length`. What is added goes into a copy of the user's
        `generation_config` where there is one."""
        if "generation_config" not in generate_kwargs:
            generate_kwargs = {**self._init_generation_kwargs, **generate_kwargs}
        user_config = generate_kwargs.get("generation_config")
        set_params = self.model.generation_config.to_diff_dict()
        set_params.update(user_config.to_diff_dict() if user_config is not None else {})
        set_params.update(generate_kwargs)
        defaults = self._default_generation_config.to_diff_dict()
        defaults.pop("transformers_version", None)
        if self.tokenizer is not None and self.tokenizer.pad_token_id is not None:
            defaults["pad_token_id"] = self.tokenizer.pad_token_id
        if "max_length" in set_params:  # a default `max_new_tokens` would override it
            defaults.pop("max_new_tokens", None)
        added = {key: value for key, value in defaults.items() if key not in set_params}
        if user_config is None:
            return {**generate_kwargs, **added}
        user_config = copy.deepcopy(user_config)
        user_config.update(**added)
        return {**generate_kwargs, "generation_config": user_config}

    def postprocess(self, model_outputs, return_tensors=False, clean_up_tokenization_spaces=False):
        """One record per output sequence: its text, or its token ids with `return_tensors=True`."""
        if return_tensors:
            return [{"translation_token_ids": ids} for ids in model_outputs["output_ids"][0]]
        return [
            {
                "translation_text": self.tokenizer.decode(
                    ids,
                    skip_special_tokens=True,
                    clean_up_tokenization_spaces=clean_up_tokenization_spaces,
                )
            }
            for ids in model_outputs["output_ids"][0]
        ]

    def _check_direction(self, src_lang: str | None, tgt_lang: str | None) -> None:
        """A multilingual model: a target with a tag, a source among the model's languages; any
        other model with `language_pairs`: one of them (see the class)."""
        tagged = self._tagged_languages()
        pairs = list(getattr(self.model.config, "language_pairs", None) or [])
        if tagged and len({pair.split("-")[-1] for pair in pairs}) >= 2:
            self._check_multilingual_direction(src_lang, tgt_lang, tagged, pairs)
        # trained with tags, as the evaluation takes it: untagged input is unknown
        elif tagged and tgt_lang is None:
            raise ValueError(
                f"This model's tokenizer reserves the language tags {sorted(tagged)}: the model "
                "was "
                "trained with the target tag in front of every source. Pass tgt_lang=... or use "
                "a task "
                f"like 'translation_xx_to_{sorted(tagged)[0]}'."
            )
        elif pairs:
            _check_trained_direction(src_lang, tgt_lang, pairs)

    @staticmethod
    def _check_multilingual_direction(
        src_lang: str | None, tgt_lang: str | None, tagged: list[str], pairs: list[str]
    ) -> None:
        languages = sorted(set(tagged) | {code for pair in pairs for code in pair.split("-")})
        supported = (
            f"it translates into {sorted(tagged)} from {languages} (trained directions: "
            f"{pairs or 'unknown'}; "
            "others between these languages are zero-shot)"
        )
        if tgt_lang is None:
            raise ValueError(
                f"This multilingual model needs a target language: pass tgt_lang=... or use a task "
                f"like 'translation_en_to_{sorted(tagged)[0]}'; {supported}."
            )
        if tgt_lang not in tagged:
            raise ValueError(f"Unsupported target language {tgt_lang!r}: {supported}.")
        if src_lang is not None and src_lang not in languages:
            raise ValueError(f"Unsupported source language {src_lang!r}: {supported}.")

    def _sole_tagged_target(self) -> str | None:
        """The target language of a many-to-one model trained with tags (one target in its config's
        `language_pairs`, with a `<2xx>` tag): a call without `tgt_lang` can mean no other."""
        targets = {
            pair.split("-")[-1] for pair in getattr(self.model.config, "language_pairs", None) or []
        }
        return (
            next(iter(targets))
            if len(targets) == 1 and targets <= set(self._tagged_languages())
            else None
        )

    def _tagged_languages(self) -> list[str]:
        """The languages whose `<2xx>` tag the tokenizer reserves (read once)."""
        if not hasattr(self, "_tagged"):
            self._tagged = [
                token[2:-1] for token in self.tokenizer.get_vocab() if LANGUAGE_TAG.fullmatch(token)
            ]
        return self._tagged

    def _language_tag_id(self, language: str | None) -> int | None:
        """Id of the tokenizer's `<2xx>` tag for `language`, or None where it has none."""
        if language is None:
            return None
        tag_id = self.tokenizer.convert_tokens_to_ids(f"<2{language}>")
        return None if tag_id is None or tag_id == self.tokenizer.unk_token_id else tag_id


def _check_trained_direction(src_lang: str | None, tgt_lang: str | None, pairs: list[str]) -> None:
    """A model with one target language translates only the directions its config's `language_pairs`
    name: it has no tag to steer it elsewhere, so another target (or source) would silently get its
    own target language."""
    sources, targets = (
        {pair.split("-")[0] for pair in pairs},
        {pair.split("-")[1] for pair in pairs},
    )
    if src_lang is not None and tgt_lang is not None:
        known = f"{src_lang}-{tgt_lang}" in pairs
    else:
        known = (src_lang is None or src_lang in sources) and (
            tgt_lang is None or tgt_lang in targets
        )
    if not known:
        raise ValueError(
            f"Unsupported direction {src_lang or '?'} to {tgt_lang or '?'}: this model translates "
            f"{pairs} (its config's language_pairs); use the task 'translation' or "
            f"'translation_{pairs[0].replace('-', '_to_')}'."
        )


def translation_pipeline_entries(language_pairs: Iterable[str]) -> dict:
    """`custom_pipelines` entries of a saved model's config: "translation" and one
    "translation_xx_to_yy" per language pair ("en-de"), each naming this file's
    `TranslationPipeline`."""
    entry = {
        "impl": f"{__name__.rsplit('.', 1)[-1]}.{TranslationPipeline.__name__}",
        "pt": ["AutoModelForSeq2SeqLM"],
        "type": "text",
    }
    tasks = ["translation"] + [
        f"translation_{pair.replace('-', '_to_')}" for pair in language_pairs
    ]
    return {task: dict(entry) for task in tasks}


def languages_from_task(task: str) -> tuple[str | None, str | None]:
    """("en", "de") for "translation_en_to_de", (None, None) for "translation"."""
    match = TASK_LANGUAGES.fullmatch(task or "")
    return (match["src"], match["tgt"]) if match else (None, None)


def register_translation_pipeline(language_codes: Iterable[str] = DEFAULT_LANGUAGE_CODES) -> None:
    """Make `pipeline("translation", ...)` and `pipeline("translation_xx_to_yy", ...)` work in this
    process.

    Registers both directions between English and each of `language_codes`, and every direction
    among those of them in `DIRECT_LANGUAGES`; `register_translation_pairs` adds others. Idempotent.
    """
    codes = sorted(set(language_codes) - {PIVOT_LANGUAGE})
    pairs = [(PIVOT_LANGUAGE, code) for code in codes] + [(code, PIVOT_LANGUAGE) for code in codes]
    direct = [code for code in codes if code in DIRECT_LANGUAGES]
    pairs += [(src, tgt) for src in direct for tgt in direct if src != tgt]
    register_translation_pairs(pairs)


def register_translation_pairs(pairs: Iterable[str | tuple[str, str]]) -> None:
    """Register `translation_{src}_to_{tgt}` for each pair, given as "src-tgt" or (src, tgt).
    Idempotent.

    transformers looks task names up literally, so each direction needs its own name; they are
    aliases of "translation", and the pipeline reads the languages back from the name it was
    created with.
    """
    pairs = [_parse_pair(pair) for pair in pairs]  # all checked before any is registered
    _register_translation_task()
    for src, tgt in pairs:
        PIPELINE_REGISTRY.task_aliases[f"translation_{src}_to_{tgt}"] = "translation"


def _register_translation_task() -> None:
    """Register "translation" with `PIPELINE_REGISTRY` (transformers' public way to add a task).

    From 5.19 on, transformers' `pipeline()` refuses the names of the tasks it removed in 5.0
    ("translation", "translation_xx_to_yy") before it looks at the registry, from a table
    (`REMOVED_TASKS`) that no public API changes and that releases before 5.19 lack: the
    translation entry is taken out of it where it exists. Without that,
    `pipeline("translation", model=model)` in this process needs the saved model and
    `trust_remote_code`."""
    getattr(transformers.pipelines, "REMOVED_TASKS", {}).pop("translation", None)
    if (
        PIPELINE_REGISTRY.supported_tasks.get("translation", {}).get("impl")
        is not TranslationPipeline
    ):
        PIPELINE_REGISTRY.register_pipeline(
            "translation",
            pipeline_class=TranslationPipeline,
            pt_model=AutoModelForSeq2SeqLM,
            type="text",
        )


def _parse_pair(pair: str | tuple[str, str]) -> tuple[str, str]:
    """("en", "de") from "en-de" or ("en", "de"), refusing what would not make a task name."""
    codes = pair.split("-") if isinstance(pair, str) else pair
    if (
        not isinstance(codes, (tuple, list))
        or len(codes) != 2
        or not all(isinstance(code, str) and LANGUAGE_CODE.fullmatch(code) for code in codes)
    ):
        raise ValueError(f"A language pair looks like 'en-de' or ('en', 'de'), got {pair!r}.")
    if codes[0] == codes[1]:
        raise ValueError(f"A language pair needs two different languages, got {pair!r}.")
    return codes[0], codes[1]


def _without_none(params: dict) -> dict:
    return {name: value for name, value in params.items() if value is not None}
