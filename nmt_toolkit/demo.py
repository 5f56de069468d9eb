"""A demo page for one saved model or Hub id (Gradio): a text box, the direction, the beam size, the
translation and how long it took (`dwlstm-demo`, or `app.py` of a Hub Space).

The page translates with the model's translation pipeline, so it refuses what the pipeline refuses
(a direction the model does not have, a target language without a tag) with the pipeline's own
message, shown on the page. A bilingual model offers its config's `language_pairs` in one box; a
multilingual one (with `<2xx>` target tags, Johnson et al. 2017) a source box and a target box,
which also take a typed language code.

The model decodes in the precision given (`modeling_dwlstm.precision.prepare_for_inference`:
float32 unless told otherwise; "auto" takes the one measured fastest on this CPU's class), named on
the page. The app's HTTP API has one endpoint, `/translate` (text, direction or source and target,
beam size -> translation, seconds), which `gradio_client` calls.
"""

import os
import time
from dataclasses import dataclass

from transformers import pipeline

from modeling_dwlstm.precision import AUTO, PRECISIONS, prepare_for_inference

from .checkpoints import load_saved_model, load_saved_tokenizer
from .evaluation import tagged_languages

MODEL_VARIABLE = "MODEL_ID"  # the Space convention: the model comes from the Space's settings
PRECISION_VARIABLE = "PRECISION"  # the Space's precision ("auto", "int8", ...; float32 unset)
GRADIO_MISSING = "The demo needs Gradio: pip install 'modeling-dwlstm[demo]'."
MAX_BEAMS = 8
UNNAMED_DIRECTION = "as trained"  # a model whose config lists no language_pairs


def precision_from_environment() -> str:
    """The precision `$PRECISION` names (a Space's setting), float32 where unset; a ValueError for
    another name."""
    precision = os.environ.get(PRECISION_VARIABLE) or "float32"
    if precision not in (AUTO, *PRECISIONS):
        raise ValueError(
            f"{PRECISION_VARIABLE} must be {AUTO} or one of {', '.join(PRECISIONS)} (or unset: "
            f"float32), got {precision!r}."
        )
    return precision


@dataclass
class Directions:
    """What the page offers: a bilingual model's pairs ("en-de"), or a multilingual model's sources
    and targets."""

    pairs: list[str]
    sources: list[str]
    targets: list[str]

    @property
    def multilingual(self) -> bool:
        return bool(self.targets)


def model_directions(model, tokenizer) -> Directions:
    """The directions of a loaded model: with `<2xx>` tags for two targets or more, every language
    of its pairs and tags as a source and every tag as a target; otherwise its config's
    `language_pairs` (none listed: one unnamed direction)."""
    pairs = list(getattr(model.config, "language_pairs", None) or [])
    tagged = tagged_languages(tokenizer)
    if len(tagged) >= 2:
        sources = sorted(set(tagged) | {code for pair in pairs for code in pair.split("-")})
        return Directions(pairs, sources, tagged)
    return Directions(pairs or [UNNAMED_DIRECTION], [], [])


class DemoTranslator:
    """The model behind the page: its pipeline and directions, and one translation with its time."""

    def __init__(
        self, model_name_or_path: str, trust_remote_code: bool = False, precision: str = "float32"
    ):
        self.name = str(model_name_or_path)
        tokenizer = load_saved_tokenizer(self.name, "--model", trust_remote_code=trust_remote_code)
        model = load_saved_model(self.name, "--model", trust_remote_code=trust_remote_code)
        model = prepare_for_inference(model, precision=precision)
        self.precision = model.inference_precision  # "auto" resolved
        self.directions = model_directions(model, tokenizer)
        self.pipeline = pipeline("translation", model=model, tokenizer=tokenizer)

    def translate(
        self, text: str, source: str | None, target: str | None, num_beams: int
    ) -> tuple[str, float]:
        """The translation of `text` and the seconds it took; a ValueError (the pipeline's) for what
        the model refuses."""
        if not 1 <= int(num_beams) <= MAX_BEAMS:
            raise ValueError(f"The beam size is 1 to {MAX_BEAMS}, got {num_beams}.")
        languages = {"src_lang": source or None, "tgt_lang": target or None}
        start = time.perf_counter()
        output = self.pipeline(text, num_beams=int(num_beams), **languages)
        return output[0]["translation_text"], time.perf_counter() - start

    def translate_direction(self, text: str, direction: str, num_beams: int) -> tuple[str, float]:
        """`translate` for a bilingual model's direction, "en-de" (or `UNNAMED_DIRECTION`: no
        languages)."""
        source, _, target = (
            ("", "", "") if direction == UNNAMED_DIRECTION else direction.partition("-")
        )
        return self.translate(text, source, target, num_beams)


def build_demo(
    model_name_or_path: str, trust_remote_code: bool = False, precision: str = "float32"
):
    """The Gradio page (a `gradio.Blocks`) for the model, decoding in `precision` (a key of
    `modeling_dwlstm.precision.PRECISIONS`, or "auto"); `.launch()` serves it."""
    try:
        import gradio as gr
    except ImportError as error:
        raise ImportError(GRADIO_MISSING) from error
    translator = DemoTranslator(model_name_or_path, trust_remote_code, precision)
    directions = translator.directions

    def translate(text, *choices):
        *languages, num_beams = choices
        try:
            if directions.multilingual:
                translation, seconds = translator.translate(text, *languages, num_beams)
            else:
                translation, seconds = translator.translate_direction(text, languages[0], num_beams)
        except ValueError as error:
            raise gr.Error(str(error)) from None
        return translation, f"{seconds:.2f} s"

    with gr.Blocks(title=f"Translate with {translator.name}") as demo:
        gr.Markdown(f"## Translate with `{translator.name}` ({translator.precision})")
        text = gr.Textbox(label="Text", lines=3, elem_id="source-text")
        with gr.Row():
            if directions.multilingual:
                boxes = [
                    gr.Dropdown(
                        directions.sources,
                        value=directions.sources[0],
                        label="Source language",
                        allow_custom_value=True,
                        elem_id="source-lang",
                    ),
                    gr.Dropdown(
                        directions.targets,
                        value=directions.targets[0],
                        label="Target language",
                        allow_custom_value=True,
                        elem_id="target-lang",
                    ),
                ]
            else:
                boxes = [
                    gr.Dropdown(
                        directions.pairs,
                        value=directions.pairs[0],
                        label="Direction",
                        allow_custom_value=True,
                        elem_id="direction",
                    )
                ]
            beams = gr.Slider(1, MAX_BEAMS, value=4, step=1, label="Beam size", elem_id="beams")
        button = gr.Button("Translate", variant="primary", elem_id="translate")
        translation = gr.Textbox(
            label="Translation", lines=3, interactive=False, elem_id="translation"
        )
        seconds = gr.Textbox(label="Time", interactive=False, elem_id="seconds")
        button.click(translate, [text, *boxes, beams], [translation, seconds], api_name="translate")
    return demo


__all__ = ["DemoTranslator", "Directions", "MODEL_VARIABLE", "build_demo", "model_directions"]
