"""Export any member of the family to ONNX and translate with ONNX Runtime, in float32 or int8.

CTranslate2 runs only the residual members (`ctranslate2_export.py`); ONNX expresses every member,
the depth-wise LSTM included, since the exported graphs are our own modules traced op by op. A model
becomes two graphs:

- `encoder.onnx`: source ids and mask -> every decoder layer's cross-attention keys and values (what
  the KV cache's cross-attention part holds for a whole decoding; for transparent attention each
  layer's mix of the encoder layers is taken there, once);
- `decoder_step.onnx`: one decoder step: the last tokens (batch, 1), the source mask, the
  self-attention keys and values of the earlier steps and the cross-attention ones -> the next-token
  logits (batch, vocabulary) and the self-attention keys and values including this step (each
  layer's past plus one position).

Both are exported with `torch.onnx.export(dynamo=True)` (torch.export underneath) with dynamic
batch, source and past lengths; the first step takes pasts of length 0.
`export_onnx(model_dir, output_dir)` (what `scripts/export_onnx.py` runs) writes them with the
tokenizer, `onnx_export.json` (what the decoding loop needs) and, unless `int8=False`, their int8
versions made by ONNX Runtime's dynamic quantisation (`onnxruntime.quantization.quantize_dynamic`:
int8 weights, activations quantised per call).

`OnnxTranslator(folder, precision="float32" or "int8")` loads such a folder and decodes greedily, as
`generate(num_beams=1, do_sample=False)` does (same token ids, same stopping: a finished sentence is
padded until every sentence has ended or `max_length` is reached); the loop is numpy around two ONNX
Runtime sessions, feeding each step's keys and values back as the next step's past and the encoder's
cross-attention ones unchanged. `score()` gives teacher-forced logits the same way.
`tests/test_onnx_export.py` checks, for every member, the float32 graphs token for token against
`generate()` and their logits against the model's.
"""

import contextlib
import json
import logging
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import AutoTokenizer
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from modeling_dwlstm.building_blocks import MultiHeadAttention
from modeling_dwlstm.precision import is_quantized, linear_modules

from .checkpoints import load_saved_model, load_saved_tokenizer
from .files import atomic_directory, atomic_write_json, prepare_output_dir, releasing_output_dirs

INSTALL_ONNX = "pip install 'modeling-dwlstm[onnx]' (or: pip install onnxruntime onnx onnxscript)"
INFO_FILE = "onnx_export.json"
GRAPH_FILES = {
    "float32": ("encoder.onnx", "decoder_step.onnx"),
    "int8": ("encoder_int8.onnx", "decoder_step_int8.onnx"),
}
FORMAT_VERSION = 1
# weights beyond 1 GiB go to external data files (a protobuf file stops at 2 GiB)
SINGLE_FILE_LIMIT = 1 << 30
# Example sizes for tracing: all different and above 1, so that torch.export neither specialises a
# dynamic size to its example nor unifies two sizes that happen to be equal.
EXAMPLE_BATCH, EXAMPLE_SOURCE, EXAMPLE_PAST = 2, 7, 3


# ---------------------------------------------------------------------------------------------
# The two graphs, as modules around the model
# ---------------------------------------------------------------------------------------------


def cross_attentions(model) -> list[MultiHeadAttention]:
    """The decoder's cross-attentions in layer order (one per decoder layer, whatever the member's
    layer class)."""
    found = {
        module.layer_idx: module
        for module in model.get_decoder().modules()
        if isinstance(module, MultiHeadAttention) and module.is_cross_attention
    }
    return [found[index] for index in sorted(found)]


class EncoderGraph(nn.Module):
    """(input_ids, attention_mask) -> cross-attention keys and values of every decoder layer, (B, H,
    S, d/H) each, flat: keys 0, values 0, keys 1, ..."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.cross_attentions = cross_attentions(model)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        encoder_outputs = self.model.get_encoder()(
            input_ids=input_ids, attention_mask=attention_mask
        )
        source = self.model.get_decoder().cross_attention_source
        states = source.encoder_states(encoder_outputs)
        keys_values = [
            attention.cross_keys_values(source(states, index), None)
            for index, attention in enumerate(self.cross_attentions)
        ]
        return tuple(tensor for pair in keys_values for tensor in pair)


class DecoderStepGraph(nn.Module):
    """(input_ids (B, 1), encoder_attention_mask (B, S), *past self keys/values, *cross keys/values)
    -> (logits (B, V), *self keys/values with this step). The tensors fill an `EncoderDecoderCache`,
    so the model's own cached decoding runs unchanged: positions from the cache length,
    cross-attention from the cache."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.num_layers = model.config.decoder_layers

    def forward(
        self, input_ids: torch.Tensor, encoder_attention_mask: torch.Tensor, *caches: torch.Tensor
    ):
        past, cross = caches[: 2 * self.num_layers], caches[2 * self.num_layers :]
        self_cache, cross_cache = DynamicCache(), DynamicCache()
        for index in range(self.num_layers):
            self_cache.update(past[2 * index], past[2 * index + 1], index)
            cross_cache.update(cross[2 * index], cross[2 * index + 1], index)
        cache = EncoderDecoderCache(self_cache, cross_cache)
        for index in range(self.num_layers):
            # the cross-attention reads its keys/values from the cache
            cache.is_updated[index] = True
        # With the cross-attention cached the decoder reads only the encoder states' (batch,
        # source) shape.
        shape_only = encoder_attention_mask.unsqueeze(-1)
        hidden = self.model.get_decoder()(
            input_ids=input_ids,
            encoder_hidden_states=shape_only,
            encoder_attention_mask=encoder_attention_mask,
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
        logits = self.model.get_output_embeddings()(hidden[:, -1])
        return (
            logits,
            *(tensor for layer in self_cache.layers for tensor in (layer.keys, layer.values)),
        )


def cache_names(prefix: str, num_layers: int) -> list[str]:
    return [
        f"{prefix}_{kind}_{index}" for index in range(num_layers) for kind in ("keys", "values")
    ]


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------


@releasing_output_dirs
def export_onnx(
    model_dir: str, output_dir: str, int8: bool = True, overwrite: bool = False
) -> Path:
    """Export the saved model in `model_dir` (with its tokenizer) to ONNX graphs in `output_dir`,
    float32 and, unless `int8=False`, int8. Returns `output_dir`."""
    check_onnx_installed()
    if Path(output_dir).resolve() in (
        Path(model_dir).resolve(),
        *Path(model_dir).resolve().parents,
    ):
        raise ValueError(
            f"--output_dir {output_dir} holds the model being exported; choose a folder outside it."
        )
    model = load_saved_model(model_dir, "--model")
    tokenizer = load_saved_tokenizer(model_dir, "--model")
    # never over a training run's folder
    prepare_output_dir(output_dir, overwrite, replaced_whole=True)
    # Built in a staging folder that replaces `output_dir` when complete: an overwrite stopped
    # anywhere leaves the old export whole, and a finished one holds nothing of it (no graphs of
    # another precision or checkpoint).
    with atomic_directory(output_dir, replace=True) as staging:
        export_loaded(model, tokenizer, staging, int8=int8)
    return Path(output_dir)


def export_loaded(model, tokenizer, output_dir, int8: bool = True) -> Path:
    """Export a loaded float32 model and its tokenizer into `output_dir` (created if needed); see
    `export_onnx`."""
    check_onnx_installed()
    check_exportable(model)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.eval()
    encoder_file, decoder_file = GRAPH_FILES["float32"]
    external = sum(parameter.numel() * 4 for parameter in model.parameters()) > SINGLE_FILE_LIMIT
    with quiet_exporter():
        export_encoder(model, output_dir / encoder_file, external)
        export_decoder_step(model, output_dir / decoder_file, external)
    precisions = ["float32"]
    if int8:
        for source, target in zip(GRAPH_FILES["float32"], GRAPH_FILES["int8"], strict=True):
            quantize_int8(output_dir / source, output_dir / target, external)
        precisions.append("int8")
    tokenizer.save_pretrained(output_dir)
    atomic_write_json(output_dir / INFO_FILE, export_info(model, precisions))
    return output_dir


def check_onnx_installed() -> None:
    for package in ("onnx", "onnxruntime", "onnxscript"):
        try:
            __import__(package)
        except ImportError as error:
            raise ImportError(f"ONNX export needs {package}: {INSTALL_ONNX}.") from error


def check_exportable(model) -> None:
    """A one-line ValueError unless `model` is a float32 translation model of this family."""
    if not hasattr(model, "get_decoder") or not cross_attentions(model):
        raise ValueError(
            f"ONNX export takes the translation models of this family; got {type(model).__name__}."
        )
    if model.config.language_aware:
        raise ValueError(
            "ONNX export does not take a model with language-aware parameters (LaLN / LaLT, "
            "Zhang et al. 2020): its graphs have no input for each sentence's target language. "
            "Decode it with generate() or the translation pipeline."
        )
    if any(is_quantized(module) for module in linear_modules(model)):
        raise ValueError(
            "This model was prepared for int8 inference (precision.prepare_for_inference); "
            "export the float32 model: the export writes its own int8 graphs."
        )
    dtypes = {parameter.dtype for parameter in model.parameters()}
    if dtypes != {torch.float32}:
        raise ValueError(
            f"ONNX export takes a float32 model, got {sorted(map(str, dtypes))} weights; load it "
            "without dtype=... (the export writes its own int8 graphs)."
        )


def dynamic_sizes(config) -> tuple:
    """torch.export's (batch, source, past) sizes; the bounds are the model's positions."""
    positions = config.max_position_embeddings
    return (
        torch.export.Dim("batch"),
        torch.export.Dim("source", max=positions),
        torch.export.Dim("past", min=0, max=positions - 1),
    )


def example_source(config) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids and a mask with padding (row 1 is shorter)."""
    ids = torch.full((EXAMPLE_BATCH, EXAMPLE_SOURCE), config.eos_token_id, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, EXAMPLE_SOURCE - 2 :] = 0
    return ids, mask


def export_encoder(model, path: Path, external: bool) -> None:
    batch, source, _ = dynamic_sizes(model.config)
    names = cache_names("cross", model.config.decoder_layers)
    torch.onnx.export(
        EncoderGraph(model).eval(),
        example_source(model.config),
        str(path),
        dynamo=True,
        input_names=["input_ids", "attention_mask"],
        output_names=names,
        external_data=external,
        dynamic_shapes={
            "input_ids": {0: batch, 1: source},
            "attention_mask": {0: batch, 1: source},
        },
        verbose=False,
    )


def export_decoder_step(model, path: Path, external: bool) -> None:
    config = model.config
    batch, source, past = dynamic_sizes(config)
    ids, mask = example_source(config)
    heads = config.decoder_attention_heads
    with torch.no_grad():
        cross = EncoderGraph(model)(ids, mask)
    past_tensors = [
        torch.zeros(EXAMPLE_BATCH, heads, EXAMPLE_PAST, config.d_model // heads)
        for _ in range(2 * config.decoder_layers)
    ]
    step_ids = torch.full((EXAMPLE_BATCH, 1), config.decoder_start_token_id, dtype=torch.long)
    past_names, cross_names = (
        cache_names("past", config.decoder_layers),
        cache_names("cross", config.decoder_layers),
    )
    caches = tuple([{0: batch, 2: past}] * len(past_tensors) + [{0: batch, 2: source}] * len(cross))
    torch.onnx.export(
        DecoderStepGraph(model).eval(),
        (step_ids, mask, *past_tensors, *cross),
        str(path),
        dynamo=True,
        input_names=["input_ids", "encoder_attention_mask", *past_names, *cross_names],
        output_names=["logits", *cache_names("present", config.decoder_layers)],
        dynamic_shapes={
            "input_ids": {0: batch},
            "encoder_attention_mask": {0: batch, 1: source},
            "caches": caches,
        },
        external_data=external,
        verbose=False,
    )


EXPORTER_LOGGERS = ("torch.onnx._internal.exporter._registration", "torch.onnx")


@contextlib.contextmanager
def quiet_exporter():
    """Silence the exporter's notes that say nothing about this export (a missing torchvision, axis
    renaming)."""
    levels = {name: logging.getLogger(name).level for name in EXPORTER_LOGGERS}
    for name in EXPORTER_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*axis name.*will not be used")
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"copyreg")
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def not_preprocessing_advice(record: logging.LogRecord) -> bool:
    return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def quiet_quantizer():
    """Drop the quantiser's advice to pre-process the graph (logged on the root logger at every
    call): its pre-processing is shape inference and graph fusions, which the exported graphs have
    had already."""
    logging.getLogger().addFilter(not_preprocessing_advice)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(not_preprocessing_advice)


def quantize_int8(source: Path, target: Path, external: bool) -> None:
    """ONNX Runtime's dynamic int8 quantisation of every MatMul with a constant weight (the
    projections, the gates and the output projection; attention's products of two activations stay
    float32): weights int8 per output column in 7-bit ranges, activations uint8 per call. The 7
    bits: on CPUs without VNNI ONNX Runtime multiplies uint8 by int8 with an instruction whose pair
    sums saturate at 16 bits. The trained model of tests/test_onnx_export.py kept 36 of 40 greedy
    translations on such a CPU (AVX2) with 7-bit per-column weights, 31 with 7-bit per-tensor ones,
    18 with 8-bit per-column and 34 with 8-bit per-tensor ones."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with quiet_quantizer():
        quantize_dynamic(
            source,
            target,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul"],
            use_external_data_format=external,
        )


def export_info(model, precisions: list[str]) -> dict:
    """What the decoding loop reads besides the graphs."""
    config, generation = model.config, model.generation_config
    eos = generation.eos_token_id if generation.eos_token_id is not None else config.eos_token_id
    return {
        "format": FORMAT_VERSION,
        "model_type": config.model_type,
        "decoder_layers": config.decoder_layers,
        "decoder_attention_heads": config.decoder_attention_heads,
        "head_dim": config.d_model // config.decoder_attention_heads,
        "max_position_embeddings": config.max_position_embeddings,
        "decoder_start_token_id": generation.decoder_start_token_id
        if generation.decoder_start_token_id is not None
        else config.decoder_start_token_id,
        "eos_token_id": eos if isinstance(eos, list) else [eos],
        "pad_token_id": generation.pad_token_id
        if generation.pad_token_id is not None
        else config.pad_token_id,
        "max_length": generation.max_length,
        "graphs": {
            precision: dict(zip(("encoder", "decoder_step"), GRAPH_FILES[precision], strict=True))
            for precision in precisions
        },
        "exported_with": {"torch": torch.__version__},
    }


# ---------------------------------------------------------------------------------------------
# Decoding with ONNX Runtime
# ---------------------------------------------------------------------------------------------


class OnnxTranslator:
    """An exported folder loaded into ONNX Runtime: `generate(input_ids, attention_mask)` decodes
    greedily as `model.generate(num_beams=1, do_sample=False)` does; `translate(texts)` goes from
    text to text with the folder's tokenizer. `threads`: ONNX Runtime's intra-op threads (default:
    its own choice)."""

    def __init__(self, folder, precision: str = "float32", threads: int | None = None):
        import onnxruntime

        self.folder = Path(folder)
        self.info = read_info(self.folder)
        if precision not in self.info["graphs"]:
            raise ValueError(
                f"precision must be one of {', '.join(self.info['graphs'])} for {self.folder}, "
                f"got {precision!r}."
            )
        self.precision = precision
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        graphs = self.info["graphs"][precision]
        self.encoder, self.decoder_step = (
            onnxruntime.InferenceSession(
                str(self.folder / graphs[name]), options, providers=["CPUExecutionProvider"]
            )
            for name in ("encoder", "decoder_step")
        )
        layers = self.info["decoder_layers"]
        self.past_names, self.cross_names = (
            cache_names("past", layers),
            cache_names("cross", layers),
        )
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = AutoTokenizer.from_pretrained(self.folder)
        return self._tokenizer

    def generate(
        self,
        input_ids,
        attention_mask=None,
        max_new_tokens: int | None = None,
        max_length: int | None = None,
        min_new_tokens: int = 0,
    ) -> np.ndarray:
        """Greedy decoding of a batch: (batch, length) int ids (and mask) -> (batch, 1 + new tokens)
        ids that start with the decoder start token, as `generate()` returns them. The length limits
        are `generate()`'s: `max_new_tokens`, else `max_length` (start token included), else the
        model's generation `max_length`; the end of sentence is forbidden for the first
        `min_new_tokens` tokens."""
        input_ids, attention_mask = check_batch(
            input_ids, attention_mask, self.info["max_position_embeddings"]
        )
        steps = self.decoding_steps(max_new_tokens, max_length)
        if (
            isinstance(min_new_tokens, bool)
            or not isinstance(min_new_tokens, int)
            or min_new_tokens < 0
        ):
            raise ValueError(f"min_new_tokens must be an integer >= 0, got {min_new_tokens!r}.")
        cross, past = self.start(input_ids, attention_mask)
        tokens = np.full((input_ids.shape[0], 1), self.info["decoder_start_token_id"], np.int64)
        eos, pad = np.array(self.info["eos_token_id"]), self.info["pad_token_id"]
        sequences, finished = [tokens], np.zeros(input_ids.shape[0], bool)
        for step in range(steps):
            logits, past = self.step(tokens, attention_mask, cross, past)
            if step < min_new_tokens:
                logits[:, eos] = -np.inf
            tokens = np.where(finished, pad, logits.argmax(-1))[:, None]
            sequences.append(tokens)
            finished |= np.isin(tokens[:, 0], eos)
            if finished.all():
                break
        return np.concatenate(sequences, axis=1)

    def score(self, input_ids, attention_mask, decoder_input_ids) -> np.ndarray:
        """Teacher-forced logits (batch, target length, vocabulary) of `decoder_input_ids` (start
        token first), as `model(input_ids, attention_mask, decoder_input_ids=...).logits`, computed
        step by step with the cache."""
        input_ids, attention_mask = check_batch(
            input_ids, attention_mask, self.info["max_position_embeddings"]
        )
        decoder_input_ids = np.asarray(decoder_input_ids, dtype=np.int64)
        if decoder_input_ids.ndim != 2 or decoder_input_ids.shape[0] != input_ids.shape[0]:
            raise ValueError(
                f"decoder_input_ids must have shape ({input_ids.shape[0]}, target length), got "
                f"{decoder_input_ids.shape}."
            )
        cross, past = self.start(input_ids, attention_mask)
        scores = []
        for position in range(decoder_input_ids.shape[1]):
            logits, past = self.step(
                decoder_input_ids[:, position : position + 1], attention_mask, cross, past
            )
            scores.append(logits)
        return np.stack(scores, axis=1)

    def start(
        self, input_ids: np.ndarray, attention_mask: np.ndarray
    ) -> tuple[dict, list[np.ndarray]]:
        """The encoder's cross-attention keys and values (fed unchanged to every step) and empty
        self-attention pasts."""
        outputs = self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        empty = np.zeros(
            (input_ids.shape[0], self.info["decoder_attention_heads"], 0, self.info["head_dim"]),
            np.float32,
        )
        return dict(zip(self.cross_names, outputs, strict=True)), [empty] * len(self.past_names)

    def step(
        self, tokens: np.ndarray, attention_mask: np.ndarray, cross: dict, past: list[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One decoder step: the last tokens (batch, 1) -> next-token logits (batch, vocabulary) and
        the pasts including this step."""
        logits, *past = self.decoder_step.run(
            None,
            {
                "input_ids": tokens,
                "encoder_attention_mask": attention_mask,
                **dict(zip(self.past_names, past, strict=True)),
                **cross,
            },
        )
        return logits, past

    def decoding_steps(self, max_new_tokens: int | None, max_length: int | None) -> int:
        """New tokens at most, as `generate()` counts them; never past the model's positions."""
        if max_new_tokens is None:
            max_new_tokens = (max_length if max_length is not None else self.info["max_length"]) - 1
        if (
            isinstance(max_new_tokens, bool)
            or not isinstance(max_new_tokens, int)
            or max_new_tokens < 1
        ):
            raise ValueError(
                "max_new_tokens must be a positive integer (max_length at least 2), got "
                f"{max_new_tokens!r}."
            )
        return min(max_new_tokens, self.info["max_position_embeddings"])

    def translate(
        self, texts: list[str], max_new_tokens: int | None = None, batch_size: int = 32
    ) -> list[str]:
        """Greedy translations of `texts`, in their order; batches of similar length, an empty text
        gives ''."""
        if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
            raise ValueError("`texts` must be a list of strings, one sentence each.")
        tokenizer = self.tokenizer
        encoded = tokenizer(list(texts))["input_ids"]
        to_translate = sorted(
            (index for index, text in enumerate(texts) if text.strip()),
            key=lambda i: len(encoded[i]),
        )
        translations = [""] * len(texts)
        for start in range(0, len(to_translate), batch_size):
            indices = to_translate[start : start + batch_size]
            batch = tokenizer.pad({"input_ids": [encoded[i] for i in indices]}, return_tensors="np")
            output = self.generate(
                batch["input_ids"], batch["attention_mask"], max_new_tokens=max_new_tokens
            )
            for index, text in zip(
                indices, tokenizer.batch_decode(output, skip_special_tokens=True), strict=True
            ):
                translations[index] = text
        return translations


def read_info(folder: Path) -> dict:
    path = folder / INFO_FILE
    if not path.is_file():
        raise ValueError(
            f"{folder} holds no {INFO_FILE}: not a folder written by scripts/export_onnx.py."
        )
    info = json.loads(path.read_text(encoding="utf-8"))
    if info.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"{path} has format {info.get('format')!r}; this version reads format "
            f"{FORMAT_VERSION}: "
            "export the model again."
        )
    return info


def check_batch(input_ids, attention_mask, max_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """int64 numpy (batch, length) ids and mask (all ones when None), checked as `generate()`
    checks them."""
    input_ids = np.asarray(input_ids.numpy() if isinstance(input_ids, torch.Tensor) else input_ids)
    if input_ids.ndim != 2 or not np.issubdtype(input_ids.dtype, np.integer) or not input_ids.size:
        raise ValueError(
            f"input_ids must be integer token ids of shape (batch, length), got {input_ids.dtype} "
            f"{input_ids.shape}."
        )
    if attention_mask is None:
        attention_mask = np.ones_like(input_ids)
    attention_mask = np.asarray(
        attention_mask.numpy() if isinstance(attention_mask, torch.Tensor) else attention_mask
    )
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask must have the shape of input_ids {input_ids.shape}, got "
            f"{attention_mask.shape}."
        )
    if input_ids.shape[1] > max_positions:
        raise ValueError(
            f"Sources of {input_ids.shape[1]} tokens are longer than the model's {max_positions} "
            "positions."
        )
    empty = np.flatnonzero(attention_mask.sum(-1) == 0).tolist()
    if empty:
        raise ValueError(
            f"Source sentences {empty} have no tokens (every position masked): leave them out."
        )
    return input_ids.astype(np.int64), attention_mask.astype(np.int64)


def translate(
    folder,
    texts: list[str],
    precision: str = "float32",
    max_new_tokens: int | None = None,
    threads: int | None = None,
) -> list[str]:
    """Greedy translations of `texts` with the exported model in `folder` (one-off use; keep an
    `OnnxTranslator` to translate several times)."""
    return OnnxTranslator(folder, precision, threads).translate(
        texts, max_new_tokens=max_new_tokens
    )


__all__ = [
    "export_onnx",
    "export_loaded",
    "OnnxTranslator",
    "translate",
    "EncoderGraph",
    "DecoderStepGraph",
]
