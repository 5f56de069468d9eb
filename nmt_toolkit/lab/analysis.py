"""Look inside trained models: how much each layer's non-linearity is worth, and what the gates do.

1. Layer non-linearity (Xu et al. 2020, §4, Eqs. 11-12, Tables 6-7). One layer at a time, the
   layer's function y = F(x) is replaced by an affine map y = W_d x + b_d of its input state, fitted
   with the rest of the model frozen; the test set is decoded with beam search and BLEU is compared
   with the full model's. x and y are the state passed between layers: the output o, and for the
   depth-wise LSTM the output and the cell, [o; c]. `layer_nonlinearity` does it for every layer.
2. Internals of the members that have them, averaged over a corpus (padding left out): the
   depth-wise LSTM's input, forget and output gates per layer (`depthwise_lstm_gate_statistics`),
   the highway model's SDU transform gate T(X) per layer and sub-layer (`sdu_gate_statistics`; Chai
   et al. 2020, Eq. 21), and, read off the parameters, transparent attention's layer-mixing weights
   (`transparent_attention_weights`); DLCL has `model.dlcl_weight_matrices()`. `model_internals`
   picks what applies to a model from its `model_type`.
3. What of the source each encoder layer still carries (`source_variation`): how much its output
   differs between sources and between the positions of one source. Attention without a skip path
   loses both with depth (Dong et al. 2021, "Attention is not all you need: pure attention loses
   rank doubly exponentially with depth"); a depth-wise LSTM's only skip path is its cell, kept in
   proportion to its forget gates.

Layers are found structurally: `model.get_encoder().layers` / `model.get_decoder().layers`, each
mapping a layer state (a NamedTuple with `output` and `cell`) to `(state, attention weights)`.
"""

import contextlib
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import nn

from modeling_dwlstm.modeling_translation import LayerOutput, LayerState

from ..evaluation import DEFAULT_MAX_TOKENS, score_translations, translate_sentences

STACKS = ("encoder", "decoder")
GATE_NAMES = ("input", "forget", "output")  # the order DepthWiseLstmGates returns them in


# ---------------------------------------------------------------------------------------------
# Data: tokenized batches and which of their positions are real tokens
# ---------------------------------------------------------------------------------------------


def tokenized_batches(
    tokenizer, pairs: Sequence[tuple[str, str]], batch_size: int = 64, max_length: int = 256
) -> Iterator[dict]:
    """One pass over (source, target) `pairs` in batches of `batch_size`: input_ids, attention_mask
    and labels (padded with the pad id, which the loss and the statistics here ignore), cut at
    `max_length`."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
    if not pairs:
        raise ValueError("No sentence pairs: the corpus is empty.")
    for start in range(0, len(pairs), batch_size):
        sources, targets = zip(*pairs[start : start + batch_size])
        encoded = tokenizer(
            list(sources),
            text_target=list(targets),
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        )
        yield {name: encoded[name] for name in ("input_ids", "attention_mask", "labels")}


def real_positions(batch: dict, pad_token_id: int) -> dict[str, torch.Tensor]:
    """{"encoder": (B, S), "decoder": (B, T)} booleans, True where a real token (not padding) is.
    Decoder position t predicts labels[t], so it is real when that label is (neither pad nor
    -100)."""
    labels = batch["labels"]
    return {
        "encoder": batch["attention_mask"].bool(),
        "decoder": (labels != pad_token_id) & (labels != -100),
    }


def stack_layers(model, stack: str) -> nn.ModuleList:
    if stack not in STACKS:
        raise ValueError(f"`stack` must be one of {list(STACKS)}, got {stack!r}.")
    return (model.get_encoder() if stack == "encoder" else model.get_decoder()).layers


def _run_model(model, batch: dict, encoder_only: bool = False):
    batch = {name: tensor.to(model.device) for name, tensor in batch.items()}
    if encoder_only:  # the decoder's layers are not looked at: skip half the work
        return model.get_encoder()(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        )
    return model(**batch)


# ---------------------------------------------------------------------------------------------
# 1. Layer non-linearity (Xu et al. 2020, §4)
# ---------------------------------------------------------------------------------------------


def state_features(state) -> torch.Tensor:
    """A layer state as one feature tensor: o (B, T, d), or [o; c] (B, T, 2d) when it carries
    a cell."""
    return state.output if state.cell is None else torch.cat([state.output, state.cell], dim=-1)


class AffineLayer(nn.Module):
    """y = W_d x + b_d (Xu et al. 2020, Eq. 12) in place of an encoder layer; x, y are
    `state_features` of the layer's input and output states. Called like an encoder layer
    (`TranslationLayer`)."""

    def __init__(self, layer: nn.Module, in_features: int, out_features: int, has_cell: bool):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.has_cell = has_cell
        # a stack asks its first layer for the embeddings' state
        self.initial_state = layer.initial_state

    def map_state(self, state: LayerState) -> LayerState:
        features = self.linear(state_features(state))  # (B, T, out_features)
        if not self.has_cell:
            return LayerState(output=features)
        output, cell = features.chunk(2, dim=-1)  # (B, T, d) each
        return LayerState(output=output, cell=cell)

    def forward(self, hidden_states, cell=None, *, attention_mask=None, output_attentions=False):
        return LayerOutput(*self.map_state(LayerState(hidden_states, cell)))


class AffineDecoderLayer(AffineLayer):
    """`AffineLayer` called like a decoder layer. Under a KV cache the decoder runs each step on the
    new positions only, which an affine map per position handles as it is; but the decoder reads how
    many positions are past from the self-attention cache (layer 0's slot), so this layer still
    appends a (B, 1, T, 1) placeholder to its slot, keeping it as long as the others."""

    def __init__(
        self, layer: nn.Module, in_features: int, out_features: int, has_cell: bool, layer_idx: int
    ):
        super().__init__(layer, in_features, out_features, has_cell)
        self.layer_idx = layer_idx

    def forward(
        self,
        hidden_states,
        cell=None,
        encoder_hidden_states=None,
        *,
        attention_mask=None,
        encoder_attention_mask=None,
        past_key_values=None,
        output_attentions=False,
    ):
        if past_key_values is not None:
            placeholder = hidden_states.new_zeros(
                hidden_states.shape[0], 1, hidden_states.shape[1], 1
            )  # (B, 1, T, 1)
            past_key_values.self_attention_cache.update(placeholder, placeholder, self.layer_idx)
        return LayerOutput(*self.map_state(LayerState(hidden_states, cell)))


@contextlib.contextmanager
def replaced_layer(model, stack: str, index: int, replacement: nn.Module):
    """Run the model with layer `index` (from 0) of `stack` replaced; the original is put back on
    exit, whatever happens. The model stays a normal PreTrainedModel meanwhile (forward, generate,
    caching)."""
    layers = stack_layers(model, stack)
    if not 0 <= index < len(layers):
        raise ValueError(f"The {stack} has {len(layers)} layers; there is no layer index {index}.")
    original = layers[index]
    layers[index] = replacement
    try:
        yield model
    finally:
        layers[index] = original


class LeastSquares:
    """The running sums that fix the affine least-squares fit y ~ W x + b over positions seen one
    batch at a time: [x; 1]^T [x; 1], [x; 1]^T y, sum y and sum y^2, in float64."""

    def __init__(self, in_features: int, out_features: int, device=None):
        self.gram = torch.zeros(
            in_features + 1, in_features + 1, dtype=torch.float64, device=device
        )
        self.cross = torch.zeros(in_features + 1, out_features, dtype=torch.float64, device=device)
        self.target_sum = torch.zeros(out_features, dtype=torch.float64, device=device)
        self.target_square_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.count = 0

    def add(self, inputs: torch.Tensor, targets: torch.Tensor):  # (N, in), (N, out)
        inputs = torch.cat([inputs, inputs.new_ones(inputs.shape[0], 1)], dim=-1).double()
        targets = targets.double()
        self.gram += inputs.T @ inputs
        self.cross += inputs.T @ targets
        self.target_sum += targets.sum(0)
        self.target_square_sum += targets.square().sum()
        self.count += inputs.shape[0]

    def solve(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        """(W (out, in), b (out,), unexplained variance). The minimum-norm solution (gelsd): a layer
        input with redundant features, such as the depth-wise LSTM's first [o_0; c_0] = [emb; emb],
        is no error. Unexplained variance = residual sum of squares / total sum of squares (0: the
        layer is affine)."""
        if self.count == 0:
            raise ValueError("No positions were seen: the fitting batches hold no real tokens.")
        gram, cross = self.gram.cpu(), self.cross.cpu()  # gelsd runs on the CPU
        solution = torch.linalg.lstsq(gram, cross, driver="gelsd").solution  # (in + 1, out)
        residual = (
            self.target_square_sum.cpu()
            - 2 * (solution * cross).sum()
            + (solution * (gram @ solution)).sum()
        )
        total = self.target_square_sum.cpu() - self.target_sum.cpu().square().sum() / self.count
        unexplained = float((residual / total).clamp(min=0)) if total > 0 else 0.0
        return solution[:-1].T, solution[-1], unexplained


def fit_affine_layers(
    model, batches: Iterable[dict], layers: Sequence[tuple[str, int]] | None = None
) -> dict:
    """Fit y = W_d x + b_d to each layer in `layers` ((stack, index) pairs; default all) by least
    squares on `batches` (training data, see `tokenized_batches`), with the model frozen: one
    forward pass per batch.

    The objective is the mean squared error between the map's output and the layer's true output
    state, given the layer's true input state, at every real position (padding left out):

        min_{W, b} sum_t || W x_t + b - F(x_t) ||^2

    rather than the translation loss through the rest of the network: it isolates the layer (what is
    measured is how far F is from affine, not how well the layers above can adapt to a change),
    needs no backward pass and no decoding, and, being quadratic in (W, b), is solved exactly from
    running sums (`LeastSquares`) instead of by a few hundred gradient steps with a learning rate to
    tune. With the model intact while fitting, one pass over the batches fits every layer at once.

    Returns {(stack, index): (replacement layer, {"positions": N, "unexplained_variance": r})}.
    """
    layers = (
        list(layers)
        if layers is not None
        else [(stack, i) for stack in STACKS for i in range(len(stack_layers(model, stack)))]
    )
    sums, has_cell, masks = {}, {}, {}

    def capture(key):
        def hook(module, args, output):
            # the layer's call and LayerOutput
            before, after = LayerState(*args[:2]), LayerState(output.output, output.cell)
            # (B, T, in), (B, T, out)
            inputs, targets = state_features(before), state_features(after)
            if key not in sums:
                sums[key] = LeastSquares(inputs.shape[-1], targets.shape[-1], inputs.device)
                has_cell[key] = after.cell is not None
            real = masks[key[0]].to(inputs.device)
            sums[key].add(inputs[real], targets[real])

        return hook

    handles = [
        stack_layers(model, stack)[index].register_forward_hook(capture((stack, index)))
        for stack, index in layers
    ]
    model.eval()
    try:
        with torch.inference_mode():
            for batch in batches:
                masks.update(real_positions(batch, model.config.pad_token_id))
                _run_model(
                    model, batch, encoder_only=all(stack == "encoder" for stack, _ in layers)
                )
    finally:
        for handle in handles:
            handle.remove()
    if len(sums) < len(layers):
        raise ValueError("No fitting batches were given (`fit_steps` must be at least 1).")
    fits = {}
    for stack, index in layers:
        weight, bias, unexplained = sums[stack, index].solve()
        layer = stack_layers(model, stack)[index]
        replacement = (
            AffineLayer(layer, weight.shape[1], weight.shape[0], has_cell[stack, index])
            if stack == "encoder"
            else AffineDecoderLayer(
                layer, weight.shape[1], weight.shape[0], has_cell[stack, index], index
            )
        )
        with torch.no_grad():
            replacement.linear.weight.copy_(weight)
            replacement.linear.bias.copy_(bias)
        fits[stack, index] = (
            replacement.to(device=model.device, dtype=model.dtype),
            {"positions": sums[stack, index].count, "unexplained_variance": unexplained},
        )
    return fits


def relative_change(value: float, reference: float) -> float | None:
    """100 (value - reference) / reference, the Δ (%) of Xu et al. 2020, Tables 6-7; None when the
    reference is 0."""
    return round(100.0 * (value - reference) / reference, 2) if reference else None


def layer_nonlinearity(
    model,
    tokenizer,
    train_pairs: Sequence[tuple[str, str]],
    test_pairs: Sequence[tuple[str, str]],
    fit_steps: int = 300,
    batch_size: int = 64,
    num_beams: int = 4,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    target_lang: str | None = None,
    **generate_kwargs,
) -> dict:
    """Xu et al. 2020, §4 for every layer: fit its affine replacement on `fit_steps` batches of
    `batch_size` training pairs (`fit_affine_layers`; the pairs are cycled when there are fewer),
    then decode `test_pairs`' sources with beam search (`evaluation.translate_sentences`) with that
    layer replaced, and score them.

    Returns {"fit": settings, "full": scores of the model as it is, "layers": one row per layer with
    stack, layer (from 1), sacreBLEU / tokenized BLEU and their Δ (%) against the full model, and
    the fit's unexplained variance, "hypotheses": {"full" | "encoder-1" | ...: hypotheses}}. The
    model is unchanged after.
    """
    if isinstance(fit_steps, bool) or not isinstance(fit_steps, int) or fit_steps < 1:
        raise ValueError(f"`fit_steps` must be a positive integer, got {fit_steps!r}.")
    max_length = min(256, model.config.max_position_embeddings)
    # tokenized as used
    batches = itertools.cycle(tokenized_batches(tokenizer, train_pairs, batch_size, max_length))
    fits = fit_affine_layers(model, itertools.islice(batches, fit_steps))
    sources, references = [source for source, _ in test_pairs], [target for _, target in test_pairs]

    def decode_and_score(name: str) -> dict:
        translations = translate_sentences(
            model, tokenizer, sources, num_beams=num_beams, max_tokens=max_tokens, **generate_kwargs
        )
        hypotheses[name] = translations.hypotheses
        scores = score_translations(translations.hypotheses, references, target_lang)
        return {"sacrebleu": scores["sacrebleu"], "tokenized_bleu": scores["tokenized_bleu"]}

    hypotheses = {}
    full = decode_and_score("full")
    rows = []
    for (stack, index), (replacement, fit) in fits.items():
        with replaced_layer(model, stack, index, replacement):
            scores = decode_and_score(f"{stack}-{index + 1}")
        rows.append(
            {
                "stack": stack,
                "layer": index + 1,
                **scores,
                **{
                    f"{metric}_delta_percent": relative_change(scores[metric], full[metric])
                    for metric in full
                },
                **fit,
            }
        )
    return {
        "fit": {
            "objective": "mse_to_layer_output_least_squares",
            "steps": fit_steps,
            "batch_size": batch_size,
            "train_pairs": len(train_pairs),
        },
        "decoding": {
            "num_beams": num_beams,
            "max_tokens": max_tokens,
            "test_pairs": len(test_pairs),
        },
        "full": full,
        "layers": rows,
        "hypotheses": hypotheses,
    }


# ---------------------------------------------------------------------------------------------
# 2. Gates and layer weights
# ---------------------------------------------------------------------------------------------


class RunningStatistics:
    """Count, mean, standard deviation and percentiles of a stream of values in [-1, 1] (gates)
    without keeping them: mean and squared deviations merged batch by batch (Chan et al.), in
    float64, and a histogram of `bins` bins, so percentiles are exact to within one bin (0.001)."""

    def __init__(self, bins: int = 2000, low: float = -1.0, high: float = 1.0):
        self.count, self.mean, self.squared_deviations = 0, 0.0, 0.0
        self.low, self.high = low, high
        self.histogram = torch.zeros(bins, dtype=torch.float64)

    def add(self, values: torch.Tensor):
        # on its device; only sums and the histogram come back
        values = values.detach().flatten().double()
        if not values.numel():
            return
        count, mean = values.numel(), float(values.mean())
        delta, total = mean - self.mean, self.count + count
        self.squared_deviations += (
            float((values - mean).square().sum()) + delta**2 * self.count * count / total
        )
        self.mean += delta * count / total
        self.count = total
        self.histogram += torch.histc(values, len(self.histogram), self.low, self.high).cpu()

    def percentile(self, q: float) -> float:
        cumulative = self.histogram.cumsum(0)
        index = int(torch.searchsorted(cumulative, q / 100 * cumulative[-1]))
        width = (self.high - self.low) / len(self.histogram)
        return self.low + (min(index, len(self.histogram) - 1) + 0.5) * width  # the bin's centre

    def summary(self) -> dict:
        if not self.count:
            raise ValueError("No values were recorded (the batches hold no real tokens).")
        return {
            "mean": self.mean,
            "std": math.sqrt(self.squared_deviations / self.count),
            "p10": self.percentile(10),
            "p90": self.percentile(90),
            "count": self.count,
        }


def _over_corpus(model, batches: Iterable[dict], masks: dict):
    """Run the model (teacher forcing, eval mode) on every batch, with `masks` set to its real
    positions."""
    model.eval()
    with torch.inference_mode():
        for batch in batches:
            masks.update(real_positions(batch, model.config.pad_token_id))
            _run_model(model, batch)


def depthwise_lstm_steps(model) -> list[tuple[str, int, str, nn.Module]]:
    """(stack, layer index, name, module) of every depth-wise LSTM step in layer order: the
    sub-modules of a layer that have `gates` (one per layer; two in the two-LSTM decoder layer,
    self- then cross-attention)."""
    return [
        (stack, index, name, module)
        for stack in STACKS
        for index, layer in enumerate(stack_layers(model, stack))
        for name, module in layer.named_modules()
        if isinstance(getattr(module, "gates", None), nn.Module)
    ]


def depthwise_lstm_gate_statistics(model, batches: Iterable[dict]) -> dict:
    """Input, forget and output gates i, f, g = sigmoid(LN(W c + b)) (Xu et al. 2024, Eqs. 2-4) of
    every depth-wise LSTM step, over the real positions of `batches` (see `tokenized_batches`;
    teacher forcing).

    Gate modules may be shared across layers (`share_gates`): a shared module is called once per
    step, so each step's forward pre-hook names the step that the next gate call belongs to. Returns
    {"encoder": rows, "decoder": rows}, a row per step in layer order: {"layer": from 1, "step":
    name in the layer, "input" / "forget" / "output": `RunningStatistics.summary()`}.
    """
    steps = depthwise_lstm_steps(model)
    if not steps:
        raise ValueError(
            f"{type(model).__name__} has no depth-wise LSTM gates (model_type "
            f"{model.config.model_type!r})."
        )
    statistics = {
        (stack, index, name): [RunningStatistics() for _ in GATE_NAMES]
        for stack, index, name, _ in steps
    }
    current, masks = {}, {}

    def record(module, args, projected):  # the gates' projection z = W c + b, (B, T, 3d)
        gates = module.activations(projected)  # i, f, g: three (B, T, d)
        stack = current["step"][0]
        for gate, gate_statistics in zip(gates, statistics[current["step"]]):
            gate_statistics.add(gate[masks[stack].to(gate.device)])

    handles = [
        step.register_forward_pre_hook(
            lambda module, args, key=(stack, index, name): current.update(step=key)
        )
        for stack, index, name, step in steps
    ]
    handles += [
        gates.register_forward_hook(record)
        for gates in {id(step.gates): step.gates for *_, step in steps}.values()
    ]
    try:
        _over_corpus(model, batches, masks)
    finally:
        for handle in handles:
            handle.remove()
    return {
        stack: [
            {
                "layer": index + 1,
                "step": name,
                **{
                    gate: values.summary()
                    for gate, values in zip(GATE_NAMES, statistics[stack, index, name])
                },
            }
            for (step_stack, index, name) in statistics
            if step_stack == stack
        ]
        for stack in STACKS
    }


def sdu_connections(model) -> list[tuple[str, int, str, nn.Module]]:
    """(stack, layer index, sub-layer, connection) of every gated connection (one with
    `transform_gate`), in layer order; the sub-layer is the connection's name without "_residual":
    self_attn, cross_attn, ffn."""
    return [
        (stack, index, name.removesuffix("_residual"), module)
        for stack in STACKS
        for index, layer in enumerate(stack_layers(model, stack))
        for name, module in layer.named_children()
        if hasattr(module, "transform_gate")
    ]


def sdu_gate_statistics(model, batches: Iterable[dict]) -> dict:
    """The highway model's transform gate T(X) = Psi(X W_1 + b_1) (Chai et al. 2020, Eq. 21; sigmoid
    or tanh) of every gated sub-layer connection, over the real positions of `batches` (teacher
    forcing).

    Each connection's `transform_gate` is wrapped for the run (an instance attribute over the
    method, removed after). Returns {"encoder": rows, "decoder": rows}, a row per gated sub-layer in
    layer order: {"layer": from 1, "sublayer": "self_attn" | "cross_attn" | "ffn",
    **`RunningStatistics.summary()`}.
    """
    connections = sdu_connections(model)
    if not connections:
        raise ValueError(
            f"{type(model).__name__} has no self-dependency units (model_type "
            f"{model.config.model_type!r})."
        )
    statistics = {
        (stack, index, name): RunningStatistics() for stack, index, name, _ in connections
    }
    masks = {}

    def recording(transform_gate, key):
        def wrapper(x):
            gate = transform_gate(x)  # (B, T, d)
            statistics[key].add(gate[masks[key[0]].to(gate.device)])
            return gate

        return wrapper

    for stack, index, name, connection in connections:
        connection.transform_gate = recording(connection.transform_gate, (stack, index, name))
    try:
        _over_corpus(model, batches, masks)
    finally:
        for *_, connection in connections:
            del connection.transform_gate  # the class's method shows through again
    return {
        stack: [
            {"layer": index + 1, "sublayer": name, **values.summary()}
            for (step_stack, index, name), values in statistics.items()
            if step_stack == stack
        ]
        for stack in STACKS
    }


def transparent_attention_weights(model) -> torch.Tensor:
    """softmax(s_i) of transparent attention, (decoder layers, encoder layers + 1), on the CPU: row
    i is how decoder layer i + 1 mixes e_0 (embeddings), e_1 .. e_{L-1} (layer outputs), e_L
    (encoder output)."""
    source = model.get_decoder().cross_attention_source
    if not hasattr(source, "weights"):
        raise ValueError(
            f"{type(model).__name__} has no transparent attention (model_type "
            f"{model.config.model_type!r})."
        )
    return source.weights.detach().float().softmax(-1).cpu()


# model_type -> the internals `model_internals` reports for it; the first two need a corpus.
INTERNALS = {
    "dwlstm": "depthwise_lstm_gates",
    "dwlstm-highway": "sdu_gates",
    "dwlstm-ta": "transparent_attention_weights",
    "dwlstm-dlcl": "dlcl_weights",
}
CORPUS_INTERNALS = ("depthwise_lstm_gates", "sdu_gates")


def internals_name(model) -> str:
    """Which internals `model_internals` reports for this model; a ValueError for members
    without any."""
    model_type = model.config.model_type
    if model_type not in INTERNALS:
        raise ValueError(
            f"model_type {model_type!r} has no gates or layer weights to look at (these do: "
            f"{', '.join(f'{key} ({value})' for key, value in INTERNALS.items())})."
        )
    return INTERNALS[model_type]


def model_internals(model, batches: Iterable[dict] | None = None) -> tuple[str, dict | list]:
    """(name, data) of what applies to the model (`INTERNALS`): gate statistics over `batches` for
    the depth-wise LSTM and the highway model; the mixing weights, as nested lists, for transparent
    attention and DLCL ({"encoder": matrix, "decoder": matrix})."""
    name = internals_name(model)
    if name in CORPUS_INTERNALS and batches is None:
        raise ValueError(f"{name} are statistics over a corpus: give sentence pairs (--data).")
    if name == "depthwise_lstm_gates":
        return name, depthwise_lstm_gate_statistics(model, batches)
    if name == "sdu_gates":
        return name, sdu_gate_statistics(model, batches)
    if name == "transparent_attention_weights":
        return name, transparent_attention_weights(model).tolist()
    return name, {stack: matrix.tolist() for stack, matrix in model.dlcl_weight_matrices().items()}


# ---------------------------------------------------------------------------------------------
# 3. What of the source reaches each encoder layer
# ---------------------------------------------------------------------------------------------


def source_variation(model, batches: Iterable[dict]) -> list[dict]:
    """For the encoder's input (the embeddings) and each layer's output, over the real positions of
    `batches` (see `tokenized_batches`): how much the vectors h vary between sources and within one,
    as shares of their mean square E[|h|^2]:

    - "between sources": the variance of the sentence vectors (a sentence's mean over its positions)
      across the corpus. 0: every source gives the same vector, so what follows cannot tell
      sources apart.
    - "within a source": the mean over sentences of the variance over its positions. 0: every
      position of a sentence holds the same vector (attention's rank collapse).

    The last row is the stack's output (after the final LayerNorm, what the decoder attends to).
    Batch size and padding do not change the numbers. Returns [{"layer": 0 (embeddings) .. L,
    "between sources", "within a source", "mean square"}].
    """
    model.eval()
    sentence_means, within, squares, tokens, sentences = None, None, None, 0, 0
    with torch.inference_mode():
        for batch in batches:
            mask = batch["attention_mask"].bool().to(model.device)  # (B, S)
            output = model.get_encoder()(
                input_ids=batch["input_ids"].to(model.device),
                attention_mask=mask.long(),
                output_hidden_states=True,
            )
            # (L+1, B, S, d)
            hidden = torch.stack(output.hidden_states).double() * mask[None, :, :, None]
            lengths = mask.sum(-1)[None, :, None].double()  # (1, B, 1)
            means = hidden.sum(2) / lengths  # (L+1, B, d)
            spread = (hidden - means[:, :, None]) * mask[None, :, :, None]  # (L+1, B, S, d)
            batch_within = (spread.square().sum((2, 3)) / lengths[..., 0]).sum(1)  # (L+1,)
            batch_squares = hidden.square().sum((1, 2, 3))  # (L+1,)
            sentence_means = (
                means if sentence_means is None else torch.cat([sentence_means, means], 1)
            )
            within = batch_within if within is None else within + batch_within
            squares = batch_squares if squares is None else squares + batch_squares
            tokens, sentences = tokens + int(mask.sum()), sentences + len(mask)
    if sentence_means is None:
        raise ValueError("No batches: source_variation needs at least one sentence.")
    mean_square = squares / tokens  # (L+1,)
    between = sentence_means.var(1, unbiased=False).sum(-1)  # (L+1,)
    return [
        {
            "layer": layer,
            "between sources": float(between[layer] / mean_square[layer]),
            "within a source": float(within[layer] / sentences / mean_square[layer]),
            "mean square": float(mean_square[layer]),
        }
        for layer in range(len(mean_square))
    ]


__all__ = [
    "AffineLayer",
    "AffineDecoderLayer",
    "LeastSquares",
    "state_features",
    "RunningStatistics",
    "tokenized_batches",
    "real_positions",
    "stack_layers",
    "replaced_layer",
    "fit_affine_layers",
    "layer_nonlinearity",
    "depthwise_lstm_gate_statistics",
    "sdu_gate_statistics",
    "transparent_attention_weights",
    "internals_name",
    "model_internals",
    "source_variation",
]
