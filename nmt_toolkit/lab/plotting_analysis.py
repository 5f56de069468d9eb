"""Pictures of `analysis` results: per-layer BLEU without each layer's non-linearity (Xu et al.
2020, Tables 6-7), the depth-wise LSTM's gates, the highway model's SDU gates and transparent
attention's layer weights.

Each function takes the plain data an `analysis` function returns, writes a PNG and returns the
matplotlib Figure (already saved and closed, so nothing stays open; its axes can still be read).
Needs matplotlib (`pip install -e ".[plot]"`).
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from .plotting import _pyplot, _save

STACK_NAMES = ("encoder", "decoder")
GATE_COLOURS = {"input": "#4c72b0", "forget": "#dd8452", "output": "#55a868"}
METRIC_NAMES = {"sacrebleu": "sacreBLEU", "tokenized_bleu": "tokenized BLEU"}
SUBLAYER_COLOURS = {"self_attn": "#4c72b0", "cross_attn": "#dd8452", "ffn": "#55a868"}


def plot_layer_nonlinearity(
    results: Mapping, path: str | Path, metric: str = "sacrebleu", title: str = ""
):
    """Xu et al. 2020, Tables 6-7 as bars: top row BLEU with each layer replaced by its affine map
    (the full model's BLEU dashed), bottom row its relative change Δ (%); encoder layers left,
    decoder layers right. `results` is what `analysis.layer_nonlinearity` returns; `metric`
    "sacrebleu" or "tokenized_bleu"."""
    plt = _pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(10, 6.5), sharey="row", squeeze=False)
    full, metric_name = results["full"][metric], METRIC_NAMES.get(metric, metric)
    highest = max([full, *(row[metric] for row in results["layers"])])
    for column, stack in enumerate(STACK_NAMES):
        rows = [row for row in results["layers"] if row["stack"] == stack]
        positions, labels = range(len(rows)), [str(row["layer"]) for row in rows]
        scores, axis = [row[metric] for row in rows], axes[0][column]
        bars = axis.bar(positions, scores, color="#4c72b0")
        axis.bar_label(bars, labels=[f"{score:.2f}" for score in scores], fontsize=8)
        axis.axhline(full, color="black", linestyle="--", linewidth=1)
        axis.set(
            title=f"{stack} ({len(rows)} layers); dashed: full model {full:.2f}",
            ylim=(0, highest * 1.15 + 1),
            ylabel=f"test {metric_name}" if column == 0 else "",
        )
        deltas, axis = [row[f"{metric}_delta_percent"] for row in rows], axes[1][column]
        # None: the full model scores 0, no relative change
        heights = [delta or 0.0 for delta in deltas]
        bars = axis.bar(
            positions, heights, color=["#c44e52" if height < 0 else "#55a868" for height in heights]
        )
        axis.bar_label(
            bars,
            labels=[f"{delta:+.2f}" if delta is not None else "n/a" for delta in deltas],
            fontsize=8,
        )
        axis.axhline(0, color="black", linewidth=0.8)
        axis.set(
            xlabel=f"{stack} layer replaced by y = W x + b",
            ylabel=f"Δ {metric_name} (%)" if column == 0 else "",
        )
        if not any(row[f"{metric}_delta_percent"] for row in results["layers"]):
            # no change anywhere: a readable empty axis rather than one of +-1e-17
            axis.set_ylim(-1, 1)
        for axis in axes[:, column]:
            axis.set_xticks(positions, labels)
            axis.grid(axis="y", alpha=0.3)
    figure.suptitle(title or "BLEU with one layer's non-linearity removed (Xu et al. 2020, §4)")
    _save(figure, path)
    return figure


def plot_gate_statistics(
    statistics: Mapping[str, Sequence[Mapping]], path: str | Path, title: str = ""
):
    """The depth-wise LSTM's gates per layer: for each step three bars (input, forget, output gate)
    at their mean, with the 10th-90th percentile range as the error bar; encoder and decoder side by
    side. `statistics` is what `analysis.depthwise_lstm_gate_statistics` returns."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, squeeze=False)
    for axis, stack in zip(axes[0], STACK_NAMES):
        rows = statistics[stack]
        # the two-LSTM decoder: name the step under its layer
        several = len({row["step"] for row in rows}) > 1
        labels = [
            f"{row['layer']}" + (f"\n{row['step'].removesuffix('_lstm')}" if several else "")
            for row in rows
        ]
        _grouped_bars(
            axis, labels, {gate: [row[gate] for row in rows] for gate in GATE_COLOURS}, GATE_COLOURS
        )
        axis.set(
            title=f"{stack} ({len(rows)} depth-wise LSTM steps)",
            xlabel=f"{stack} layer",
            ylim=(0, 1),
        )
    axes[0][0].set_ylabel("gate value: mean, 10th-90th percentile")
    # clear of the bars
    axes[0][-1].legend(title="gate", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.suptitle(title or "Depth-wise LSTM gates over the corpus")
    _save(figure, path)
    return figure


def plot_sdu_gates(statistics: Mapping[str, Sequence[Mapping]], path: str | Path, title: str = ""):
    """The highway model's transform gates T(X) per layer and sub-layer: mean with the 10th-90th
    percentile range; encoder and decoder side by side. `statistics` is what
    `analysis.sdu_gate_statistics` returns."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, squeeze=False)
    for axis, stack in zip(axes[0], STACK_NAMES):
        rows = statistics[stack]
        layers = sorted({row["layer"] for row in rows})
        groups = {
            name: [
                next(
                    (row for row in rows if row["layer"] == layer and row["sublayer"] == name), None
                )
                for layer in layers
            ]
            for name in SUBLAYER_COLOURS
            if any(row["sublayer"] == name for row in rows)
        }
        _grouped_bars(axis, [str(layer) for layer in layers], groups, SUBLAYER_COLOURS)
        axis.set(title=f"{stack} ({len(layers)} gated layers)", xlabel=f"{stack} layer")
        axis.axhline(0, color="black", linewidth=0.8)
    axes[0][0].set_ylabel("T(X): mean, 10th-90th percentile")
    handles = {
        label: handle
        for axis in axes[0]
        for handle, label in zip(*axis.get_legend_handles_labels())
    }
    # in layer order
    handles = {name: handles[name] for name in SUBLAYER_COLOURS if name in handles}
    axes[0][-1].legend(
        handles.values(),
        handles.keys(),
        title="sub-layer",
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
    )
    figure.suptitle(title or "SDU transform gates over the corpus (Chai et al. 2020, Eq. 21)")
    _save(figure, path)
    return figure


def plot_transparent_attention_weights(weights, path: str | Path, title: str = ""):
    """Transparent attention's mixing weights as a heatmap: decoder layer (rows) x encoder layer
    output (columns, 0 = embeddings, last = encoder output), each cell's weight written in it.
    `weights` is `analysis.transparent_attention_weights(model)` (or the same as nested lists)."""
    plt = _pyplot()
    weights = torch.as_tensor(weights, dtype=torch.float).numpy()
    rows, columns = weights.shape
    figure, axis = plt.subplots(figsize=(max(6.5, 0.6 * columns + 2.5), max(3.5, 0.5 * rows + 1.8)))
    image = axis.imshow(weights, cmap="viridis", vmin=0, aspect="auto")
    for row in range(rows):
        for column in range(columns):
            colour = "white" if weights[row, column] < 0.6 * weights.max() else "black"
            axis.text(
                column,
                row,
                f"{weights[row, column]:.2f}",
                ha="center",
                va="center",
                fontsize=7,
                color=colour,
            )
    axis.set_xticks(range(columns), [str(column) for column in range(columns)])
    axis.set_yticks(range(rows), [str(row + 1) for row in range(rows)])
    axis.set(
        xlabel="encoder layer output e_j (0: embeddings; last: encoder output)",
        ylabel="decoder layer",
    )
    figure.colorbar(image, ax=axis, shrink=0.8, label="softmax weight")
    axis.set_title(title or "Transparent attention: weights of the encoder layers")
    _save(figure, path)
    return figure


def plot_dlcl_weights(
    matrices: Mapping[str, torch.Tensor], path: str | Path, mask_below: float = 0.0
) -> Path:
    """Draw each weight matrix of `DlclModel.dlcl_weight_matrices()` as a heatmap side by side (Wang
    et al. 2019, Fig. 5) and save the figure as `path` (PNG). Entries with |w| < `mask_below` x the
    row's maximum |w| are left blank (Wang et al. mask below 5%); entries above the diagonal are
    always blank. Returns `path`."""
    if not matrices:
        raise ValueError("No weight matrices to plot; pass model.dlcl_weight_matrices().")
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(matrices), figsize=(4.5 * len(matrices), 4), squeeze=False)
    for axis, (name, matrix) in zip(axes[0], matrices.items()):
        matrix = matrix.detach().float().cpu()
        row_maximum = matrix.abs().amax(dim=1, keepdim=True)
        hidden = torch.ones_like(matrix, dtype=torch.bool).triu(1) | (
            matrix.abs() < mask_below * row_maximum
        )
        image = axis.imshow(matrix.masked_fill(hidden, float("nan")).numpy(), cmap="viridis")
        axis.set_title(f"{name} ({matrix.shape[0] - 1} layers)")
        axis.set_xlabel("earlier layer output y_k (0 = embeddings)")
        axis.set_ylabel("consumer (layer l+1; last row: stack output)")
        figure.colorbar(image, ax=axis, shrink=0.8)
    return _save(figure, path)


def plot_model_internals(name: str, data, path: str | Path):
    """Draw what `analysis.model_internals` returned as (name, data); returns the Figure, or for
    DLCL the path that `plot_dlcl_weights` writes."""
    if name == "dlcl_weights":
        return plot_dlcl_weights(
            {stack: torch.tensor(matrix) for stack, matrix in data.items()}, path
        )
    plotters = {
        "depthwise_lstm_gates": plot_gate_statistics,
        "sdu_gates": plot_sdu_gates,
        "transparent_attention_weights": plot_transparent_attention_weights,
    }
    if name not in plotters:
        raise ValueError(f"No plot for {name!r} (known: {sorted([*plotters, 'dlcl_weights'])}).")
    return plotters[name](data, path)


def _grouped_bars(
    axis, labels: Sequence[str], groups: Mapping[str, Sequence[Mapping | None]], colours: Mapping
):
    """Bars of each group's "mean" side by side at every label, error bars from "p10" to "p90"; a
    None entry (no such sub-layer in that layer) leaves its slot empty."""
    width = 0.8 / max(len(groups), 1)
    for offset, (name, entries) in enumerate(groups.items()):
        present = [(position, entry) for position, entry in enumerate(entries) if entry is not None]
        positions = [position + (offset - (len(groups) - 1) / 2) * width for position, _ in present]
        means = [entry["mean"] for _, entry in present]
        # percentiles are bin centres
        spread = [
            [max(entry["mean"] - entry["p10"], 0.0) for _, entry in present],
            [max(entry["p90"] - entry["mean"], 0.0) for _, entry in present],
        ]
        axis.bar(positions, means, width, yerr=spread, capsize=2, color=colours[name], label=name)
    axis.set_xticks(range(len(labels)), labels)
    axis.grid(axis="y", alpha=0.3)


__all__ = [
    "plot_layer_nonlinearity",
    "plot_gate_statistics",
    "plot_sdu_gates",
    "plot_transparent_attention_weights",
    "plot_model_internals",
]


def plot_depth_diagnosis(
    traces: Mapping[str, Sequence[Mapping]], path: str | Path, title: str = ""
):
    """What reaches each layer during training, one line per (model, recorded step), layers along
    the x axis (encoder then decoder): the gradient arriving at each layer's output (log scale),
    each layer's output RMS, and, for models with a depth-wise LSTM, the forget gate and the
    embedding's share of the cell. `traces` is {model name: what `depth_diagnosis.trace_training`
    returned}."""
    plt = _pyplot()
    panels = [
        ("output_gradient_norm", "gradient norm at the layer output", True),
        ("output_rms", "layer output RMS", False),
        ("forget", "mean forget gate", False),
        ("embedding_share", "embedding share of the cell (prod f)", True),
    ]
    panels = [
        panel
        for panel in panels
        if any(
            panel[0] in row
            for trace in traces.values()
            for record in trace
            for stack in STACK_NAMES
            for row in record[stack]
        )
    ]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), squeeze=False)
    styles = ["-", "--", ":", "-."]
    for axis, (key, label, logarithmic) in zip(axes[0], panels):
        for colour, (name, trace) in enumerate(traces.items()):
            shown = [trace[0], trace[len(trace) // 2], trace[-1]] if len(trace) > 2 else list(trace)
            for style, record in zip(styles, shown):
                encoder, decoder = record["encoder"], record["decoder"]
                # two segments: the stacks are not a chain
                for offset, rows in ((0, encoder), (len(encoder), decoder)):
                    axis.plot(
                        range(offset + 1, offset + len(rows) + 1),
                        [row.get(key, float("nan")) for row in rows],
                        style,
                        color=f"C{colour}",
                        label=f"{name}, step {record['step']}" if offset == 0 else None,
                    )
            boundary = len(trace[0]["encoder"]) + 0.5
        axis.axvline(boundary, color="grey", linewidth=0.8)
        axis.set(
            xlabel="layer (encoder | decoder)",
            ylabel=label,
            yscale="log" if logarithmic else "linear",
        )
        axis.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.suptitle(title or "What reaches each layer during training")
    _save(figure, path)
    return figure


def plot_source_variation(
    models: Mapping[str, Sequence[Mapping]], path: str | Path, title: str = ""
):
    """Two panels, encoder layers along the x axis (0: the embeddings; the last: the encoder's
    output), one line per model (log scale): how much the vectors vary between sources and within
    one, as shares of their mean square. `models` is {model name: what `analysis.source_variation`
    returned}."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for axis, key in zip(axes, ("between sources", "within a source")):
        for name, rows in models.items():
            axis.plot(
                [row["layer"] for row in rows], [row[key] for row in rows], marker=".", label=name
            )
        axis.set(
            yscale="log",
            xlabel="encoder layer (0: the embeddings; last: the encoder's output)",
            ylabel=f"variance {key} / mean square",
            title=f"how much the vectors vary {key}",
        )
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle(title or "What of the source reaches each encoder layer")
    _save(figure, path)
    return figure
