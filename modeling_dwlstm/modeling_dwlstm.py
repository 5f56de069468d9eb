"""The Transformer with depth-wise LSTMs (Xu et al. 2020; Xu et al. 2024): the whole member.

Residual connections and feed-forward sub-layers are replaced by a layer-normalised LSTM that runs
across the depth of the network. Read top to bottom: the config, the LSTM step (gates, hidden
variants), the layers that wire attention into it, the models (which name their layer classes on the
skeleton of `modeling_translation`), the record. The depth-wise RNN (`modeling_rnn`) reuses the
config base and the layers with its own step module.
"""

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from .building_blocks import MultiHeadAttention, attach_shared
from .configuration_translation import FamilyMember, TranslationTransformerConfig, check_choice
from .language_aware import make_layer_norm
from .modeling_translation import (
    ACTIVATIONS,
    LayerOutput,
    LayerState,
    SharedModules,
    TranslationLayer,
    TranslationTransformerForConditionalGeneration,
    TranslationTransformerModel,
)

# transformers 5.4 to 5.9 copy into the remote-code cache of a local folder only the files that
# a model's own file imports (later releases follow the imports further): the files that
# modeling_translation.py needs are named here too.
if TYPE_CHECKING:
    from .generation_translation import Shortlist  # noqa: F401
    from .lora import LoraReachCheck  # noqa: F401
    from .loss import IGNORE_INDEX  # noqa: F401
    from .pipeline_translation import TranslationPipeline  # noqa: F401
    from .precision import linear_modules  # noqa: F401

# ---------------------------------------------------------------------------------------------
# 1. Config
# ---------------------------------------------------------------------------------------------

MAX_FORGET_GATE_BIAS = 100.0  # |forget_gate_bias| at most: sigmoid(20) is 1 in float32 already


class DepthWiseConfig(TranslationTransformerConfig):
    r"""
    The fields the depth-wise LSTM and the depth-wise RNN share: their hidden module and decoder
    merge (not a member itself; `DwLstmConfig` and `DepthWiseRnnConfig` extend it).

    Args: lstm_hidden (`str`, defaults to "glu"): "linear" (Xu et al. 2024, Eq. 5), "ffn" (Xu et al.
        2020, Eq. 8)
            or "glu" (Xu et al. 2024, Eq. 6).
        lstm_activation (`str`, defaults to "gelu"): `act` of "linear" and "ffn" ("gelu" or "tanh").
        share_hidden (`bool`, defaults to False): one hidden module per stack instead of per layer.
        decoder_merge (`str`, defaults to "add"): how a decoder layer merges its self-attention
        result s
            and cross-attention result x: s + x ("add") or [s; x] ("concat", a 3d input); see the
            members.
    """

    lstm_hidden: str = "glu"
    lstm_activation: str = "gelu"
    share_hidden: bool = False
    decoder_merge: str = "add"

    decoder_merges = ("add", "concat")

    def check_values(self):
        super().check_values()
        check_choice("lstm_hidden", self.lstm_hidden, ("linear", "ffn", "glu"))
        check_choice("lstm_activation", self.lstm_activation, ("gelu", "tanh"))
        if not isinstance(self.share_hidden, bool):
            raise ValueError(f"`share_hidden` must be True or False, got {self.share_hidden!r}.")
        if self.lstm_hidden == "glu" and self.ffn_dim % 2:
            raise ValueError(
                f"`ffn_dim` must be even for lstm_hidden='glu' (GLU halves it), got {self.ffn_dim}."
            )
        check_choice("decoder_merge", self.decoder_merge, self.decoder_merges)

    def unused_fields(self) -> tuple[str, ...]:
        unused = ["activation_function"]  # no FFN: the hidden module has its own activation
        if self.lstm_hidden == "glu":
            unused.append("lstm_activation")  # GLU's sigmoid half is its activation
        if self.lstm_hidden == "linear":
            unused.append("activation_dropout")  # one matrix: nothing between two to drop out
        return tuple(unused)


class DwLstmConfig(DepthWiseConfig):
    r"""
    Transformer with depth-wise LSTMs (Xu et al. 2020; Xu et al. 2024).

    Residual connections and the FFN sub-layer are replaced by a layer-normalised LSTM running over
    depth: layer l turns its attention result x and the previous state (o, c) into

        i, f, g = sigmoid(LN_k(W_k [x; o] + b_k))   for k = input, forget, output   (per-gate LN)
        h       = hidden([x; o])
        c_l     = f * c + i * h
        o_l     = g * c_l                            (no tanh on the cell)

    with o_0 = c_0 = the embedded input.

    Args:
        lstm_hidden (`str`, defaults to "glu"): the hidden computation h.
            "linear" h = act(LN(W_h [x;o] + b_h))                      (Xu et al. 2024, Eq. 5, W_h: 2d -> d)
            "ffn"    h = W_2 act(LN(W_1 [x;o] + b_1)) + b_2            (Xu et al. 2020, Eq. 8, W_1: 2d -> d_ff)
            "glu"    h = W_2 GLU(LN(W_1 [x;o] + b_1)) + b_2            (Xu et al. 2024, Eq. 6, GLU halves d_ff)
        lstm_activation (`str`, defaults to "gelu"): `act` of "linear" and "ffn" ("gelu" or "tanh");
            "glu" uses its own sigmoid gate and no other activation.
        share_gates (`str`, defaults to "per_stack"): one gate module for every layer of both stacks
            ("global"), one per stack ("per_stack", Xu et al. 2024's default) or one per layer
            ("none"). With `decoder_merge="concat"` the decoder's gates read a 3d input and cannot
            be shared with the encoder's, so "global" then means one module per stack.
        share_hidden (`bool`, defaults to False): one hidden module per stack instead of per layer.
        forget_gate_bias (`float`, defaults to 0.0): where the forget gates' LayerNorm bias starts.
        0 is the
            papers' initialisation (their LayerNorms start at ones and zeros), under which every
            forget gate starts near sigmoid(0) = 0.5 and a 12-layer stack passes about 0.5^12 of the
            embedding's cell to its top; b > 0 starts them near sigmoid(b) (1: 0.73 per layer, 2:
            0.88), as LSTMs over time often do (Gers et al. 2000; Jozefowicz et al. 2015). Only the
            initialisation changes: a saved model loads the same either way.
        decoder_merge (`str`, defaults to "add"): how a decoder layer combines its self-attention
            result s and cross-attention result x before the LSTM: "add" (s + x), "concat" ([s; x],
            a 3d LSTM input) or "two_lstm" (Xu et al. 2024, Fig. 3b: one depth-wise LSTM after the
            self-attention and another after the cross-attention; each has its own hidden module
            unless `share_hidden`).

    Dropout (our choice; the papers leave it to their toolkit): `dropout` on attention results
    before they enter the LSTM, `activation_dropout` between the two matrices of the "ffn" and
    "glu" hidden.
    """  # noqa: E501

    model_type = "dwlstm"

    share_gates: str = "per_stack"
    forget_gate_bias: float = 0.0

    decoder_merges = ("add", "concat", "two_lstm")

    def check_values(self):
        super().check_values()
        check_choice("share_gates", self.share_gates, ("global", "per_stack", "none"))
        bias = self.forget_gate_bias
        # Bounded: a float32 parameter holds it (1e39 overflowed), and past about +-20 the sigmoid
        # is flat anyway.
        if (
            isinstance(bias, bool)
            or not isinstance(bias, (int, float))
            or not abs(bias) <= MAX_FORGET_GATE_BIAS
        ):
            raise ValueError(
                f"`forget_gate_bias` must be a finite number within +-{MAX_FORGET_GATE_BIAS:g} "
                f"(0.0 is the papers' initialisation), got {bias!r}."
            )


# ---------------------------------------------------------------------------------------------
# 2. The depth-wise LSTM step (Xu et al. 2024, Eqs. 1-8; Xu et al. 2020, Eqs. 3-10)
# ---------------------------------------------------------------------------------------------


class DepthWiseLstmGates(nn.Linear):
    """The three gates at once: z = W c + b with rows W_i, W_f, W_o (weight (3d, input)), then

        i, f, g = sigmoid(LN_k(z_k))   k = input, forget, output   (`activations`)

    with a LayerNorm per gate (weights (3, d)) done as one batched normalisation. `forward` is
    nn.Linear's, the linear map alone, so that quantisers, LoRA and pruning tools see the gate
    projection as the projection it is and a wrapper around it stays correct; the step applies
    `activations` after it. `blocks = 3` makes the skeleton's `_init_weights` Xavier-initialise each
    W_k as its own matrix (docs/members.md); the LayerNorm parameters are set by `init_parameters`.
    """

    blocks = 3

    def __init__(self, input_dim: int, d_model: int, forget_bias: float = 0.0):
        super().__init__(input_dim, 3 * d_model)
        self.d_model, self.forget_bias = d_model, forget_bias
        self.norm_weight = nn.Parameter(torch.ones(3, d_model))
        self.norm_bias = nn.Parameter(torch.zeros(3, d_model))

    def reset_parameters(self):
        """Zeros instead of nn.Linear's Kaiming draw (`_init_weights` sets the real values): drawing
        no random numbers here keeps a seeded model's weights what they were before the gates became
        an nn.Linear."""
        nn.init.zeros_(self.weight)
        nn.init.zeros_(self.bias)

    def init_parameters(self):
        init.ones_(self.norm_weight)
        initial_bias = torch.zeros_like(self.norm_bias)  # (..., 3, d): input, forget, output
        initial_bias[..., 1, :] = self.forget_bias
        init.copy_(self.norm_bias, initial_bias)

    def activations(self, projected: torch.Tensor) -> tuple[torch.Tensor, ...]:
        gates = projected.unflatten(-1, (3, self.d_model))  # (B, T, 3, d)
        gates = F.layer_norm(gates, (self.d_model,)) * self.norm_weight + self.norm_bias
        return torch.sigmoid(gates).unbind(-2)  # three (B, T, d)


class LanguageAwareDepthWiseLstmGates(DepthWiseLstmGates):
    """The gates with LaLN (Zhang et al. 2020): each gate's LayerNorm has one gain and bias per
    target language, `norm_weight` / `norm_bias` of shape (languages, 3, d); a sentence uses its
    target language's."""

    reads_target_language = True

    def __init__(self, input_dim: int, d_model: int, num_languages: int, forget_bias: float = 0.0):
        super().__init__(input_dim, d_model, forget_bias)
        self.norm_weight = nn.Parameter(torch.ones(num_languages, 3, d_model))
        self.norm_bias = nn.Parameter(torch.zeros(num_languages, 3, d_model))

    def activations(self, projected: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rows = self.target_language.rows  # (B,)
        # (B, T, 3, d)
        gates = F.layer_norm(projected.unflatten(-1, (3, self.d_model)), (self.d_model,))
        # each sentence's (1, 3, d)
        gates = gates * self.norm_weight[rows, None] + self.norm_bias[rows, None]
        return torch.sigmoid(gates).unbind(-2)  # three (B, T, d)


def make_gates(config: TranslationTransformerConfig, input_dim: int) -> DepthWiseLstmGates:
    """The gate module of `config`: `DepthWiseLstmGates`, language-aware with
    `language_aware_norm`."""
    if config.language_aware_norm:
        return LanguageAwareDepthWiseLstmGates(
            input_dim, config.d_model, len(config.target_languages), config.forget_gate_bias
        )
    return DepthWiseLstmGates(input_dim, config.d_model, config.forget_gate_bias)


class LinearHidden(nn.Module):
    """h = act(LN(W_h c + b_h)), W_h: input -> d (Xu et al. 2024, Eq. 5)."""

    def __init__(self, input_dim: int, config: DwLstmConfig):
        super().__init__()
        self.projection = nn.Linear(input_dim, config.d_model)
        self.norm = make_layer_norm(config, config.d_model)
        self.activation = ACTIVATIONS[config.lstm_activation]()

    def forward(self, concatenated: torch.Tensor) -> torch.Tensor:
        return self.activation(self.norm(self.projection(concatenated)))


class FeedForwardHidden(nn.Module):
    """h = W_2 act(LN(W_1 c + b_1)) + b_2, W_1: input -> d_ff (Xu et al. 2020, Eq. 8)."""

    def __init__(self, input_dim: int, config: DwLstmConfig):
        super().__init__()
        self.fc1 = nn.Linear(input_dim, config.ffn_dim)
        self.norm = make_layer_norm(config, config.ffn_dim)
        self.activation = ACTIVATIONS[config.lstm_activation]()
        self.fc2 = nn.Linear(config.ffn_dim, config.d_model)
        self.activation_dropout = config.activation_dropout

    def forward(self, concatenated: torch.Tensor) -> torch.Tensor:
        inner = self.activation(self.norm(self.fc1(concatenated)))  # (B, T, d_ff)
        return self.fc2(F.dropout(inner, self.activation_dropout, self.training))


class GluHidden(nn.Module):
    """h = W_2 GLU(LN(W_1 c + b_1)) + b_2, GLU(a; b) = a * sigmoid(b) halves d_ff (Xu et al. 2024, Eq. 6)."""  # noqa: E501

    def __init__(self, input_dim: int, config: DwLstmConfig):
        super().__init__()
        self.fc1 = nn.Linear(input_dim, config.ffn_dim)
        self.norm = make_layer_norm(config, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim // 2, config.d_model)
        self.activation_dropout = config.activation_dropout

    def forward(self, concatenated: torch.Tensor) -> torch.Tensor:
        inner = F.glu(self.norm(self.fc1(concatenated)), dim=-1)  # (B, T, d_ff / 2)
        return self.fc2(F.dropout(inner, self.activation_dropout, self.training))


LSTM_HIDDEN_CLASSES = {"linear": LinearHidden, "ffn": FeedForwardHidden, "glu": GluHidden}


class DepthWiseLstm(nn.Module):
    """One step of the LN-LSTM over depth: (x, o_{l-1}, c_{l-1}) -> (o_l, c_l).

        c   = [x ; o_{l-1}]
        c_l = f * c_{l-1} + i * hidden(c)
        o_l = g * c_l                        (no tanh on the cell)

    Gates and hidden module are shared as `share_gates` / `share_hidden` say; `scope` names this
    step's place, (stack, layer index, sub-layer), and decides which shared module it gets.
    """

    def __init__(
        self, config: DwLstmConfig, input_dim: int, shared_modules: SharedModules, scope: tuple
    ):
        super().__init__()
        stack = scope[0]
        gate_scope = {"global": (), "per_stack": (stack,), "none": scope}[config.share_gates]
        hidden_scope = (stack,) if config.share_hidden else scope
        # The gates are registered in the first step of their scope (a checkpoint holds them once)
        # and every step looks them up in that step's module slots (`gate_slots`, a plain dict, not
        # a module), so a tool that replaces the registered module (a LoRA wrapper) reaches
        # every step.
        gate_slots, owns_gates = shared_modules.get(
            ("gates", input_dim, *gate_scope), lambda: self._modules
        )
        if owns_gates:
            self.gates = make_gates(config, input_dim)
        object.__setattr__(self, "gate_slots", gate_slots)
        # a wrapper lacks them
        object.__setattr__(self, "gate_activations", gate_slots["gates"].activations)
        hidden, owns_hidden = shared_modules.get(
            ("hidden", input_dim, *hidden_scope),
            lambda: LSTM_HIDDEN_CLASSES[config.lstm_hidden](input_dim, config),
        )
        # tools replace the Linear maps inside it: seen by all
        attach_shared(self, "hidden", hidden, owns_hidden)

    @property
    def gates(self) -> nn.Module:
        """The gate projection as registered: `DepthWiseLstmGates`, or what a tool put in its
        place."""
        return self.gate_slots["gates"]

    def used_modules(self) -> dict[str, nn.Module]:
        """Modules this step calls but may not own (for tools that count work per use, e.g. the
        benchmark)."""
        return {"gates": self.gates, "hidden": self.hidden}

    @staticmethod
    def initial_state(embeddings: torch.Tensor) -> LayerState:
        return LayerState(output=embeddings, cell=embeddings)  # o_0 = c_0 = embeddings

    def forward(self, x: torch.Tensor, state: LayerState) -> LayerState:
        concatenated = torch.cat([x, state.output], dim=-1)  # (B, T, input_dim)
        # (B, T, d) each
        input_gate, forget_gate, output_gate = self.gate_activations(self.gates(concatenated))
        cell = forget_gate * state.cell + input_gate * self.hidden(concatenated)
        return LayerState(output=output_gate * cell, cell=cell)


# ---------------------------------------------------------------------------------------------
# 3. Layers: attention, then a step over depth instead of the residual connection and FFN
# ---------------------------------------------------------------------------------------------


class DepthWiseLayer(TranslationLayer):
    """What the depth-wise layers share: a step over depth in place of residual connections and the
    FFN. `step_class` is that step and `step_name` its attribute (and checkpoint key); the
    depth-wise RNN (`modeling_rnn`) reuses the layers below with its own step."""

    step_class, step_name = DepthWiseLstm, "depthwise_lstm"

    @property
    def step(self) -> nn.Module:
        return getattr(self, self.step_name)

    def initial_state(self, embeddings: torch.Tensor) -> LayerState:
        return self.step.initial_state(embeddings)


class DepthWiseLstmEncoderLayer(DepthWiseLayer):
    """a = SelfAttn(o_{l-1});  (o_l, c_l) = LSTM(a, o_{l-1}, c_{l-1})   (Xu et al. 2024, §2)."""

    def __init__(self, config: DepthWiseConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, config.encoder_attention_heads, layer_idx)
        step = self.step_class(
            config, 2 * config.d_model, shared_modules, ("encoder", layer_idx, 0)
        )
        self.add_module(self.step_name, step)
        self.dropout = config.dropout

    def forward(self, hidden_states, cell=None, *, attention_mask=None, output_attentions=False):
        attended, weights = self.self_attn(
            hidden_states, attention_mask=attention_mask, output_attentions=output_attentions
        )
        attended = F.dropout(attended, self.dropout, self.training)  # (B, S, d)
        return LayerOutput(
            *self.step(attended, LayerState(hidden_states, cell)), self_attention=weights
        )


class DepthWiseLstmDecoderLayer(DepthWiseLayer):
    """s = MaskedSelfAttn(o_{l-1});  x = CrossAttn(s + o_{l-1}, enc);  (o_l, c_l) = LSTM(merge(s, x), o_{l-1}, c_{l-1})
    with merge = s + x ("add") or [s; x] ("concat")   (Xu et al. 2024, Fig. 3a; the query s + o_{l-1} as in Xu et al. 2020, §3.3)."""  # noqa: E501

    def __init__(self, config: DepthWiseConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        heads = config.decoder_attention_heads
        self.self_attn = MultiHeadAttention(config, heads, layer_idx)
        self.cross_attn = MultiHeadAttention(config, heads, layer_idx, is_cross_attention=True)
        self.concat = config.decoder_merge == "concat"
        step_input_dim = (3 if self.concat else 2) * config.d_model
        step = self.step_class(config, step_input_dim, shared_modules, ("decoder", layer_idx, 0))
        self.add_module(self.step_name, step)
        self.dropout = config.dropout

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
        s, self_weights = self.self_attn(
            hidden_states,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            output_attentions=output_attentions,
        )
        s = F.dropout(s, self.dropout, self.training)  # (B, T, d)
        x, cross_weights = self.cross_attn(
            s + hidden_states,
            attention_mask=encoder_attention_mask,
            key_value_states=encoder_hidden_states,
            past_key_values=past_key_values,
            output_attentions=output_attentions,
        )
        x = F.dropout(x, self.dropout, self.training)  # (B, T, d)
        merged = torch.cat([s, x], dim=-1) if self.concat else s + x
        return LayerOutput(
            *self.step(merged, LayerState(hidden_states, cell)), self_weights, cross_weights
        )


class TwoLstmDecoderLayer(TranslationLayer):
    """Xu et al. 2024, Fig. 3b: a depth-wise LSTM after each attention sub-layer, replacing both
    residual connections.
    s = MaskedSelfAttn(o_{l-1});  (o', c') = LSTM_1(s, o_{l-1}, c_{l-1})
    x = CrossAttn(o', enc);       (o_l, c_l) = LSTM_2(x, o', c')"""

    def __init__(self, config: DwLstmConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        d, heads = config.d_model, config.decoder_attention_heads
        self.self_attn = MultiHeadAttention(config, heads, layer_idx)
        self.self_attn_lstm = DepthWiseLstm(
            config, 2 * d, shared_modules, ("decoder", layer_idx, 0)
        )
        self.cross_attn = MultiHeadAttention(config, heads, layer_idx, is_cross_attention=True)
        self.cross_attn_lstm = DepthWiseLstm(
            config, 2 * d, shared_modules, ("decoder", layer_idx, 1)
        )
        self.dropout = config.dropout

    initial_state = staticmethod(DepthWiseLstm.initial_state)

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
        s, self_weights = self.self_attn(
            hidden_states,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            output_attentions=output_attentions,
        )
        state = self.self_attn_lstm(
            F.dropout(s, self.dropout, self.training), LayerState(hidden_states, cell)
        )
        x, cross_weights = self.cross_attn(
            state.output,
            attention_mask=encoder_attention_mask,
            key_value_states=encoder_hidden_states,
            past_key_values=past_key_values,
            output_attentions=output_attentions,
        )
        state = self.cross_attn_lstm(F.dropout(x, self.dropout, self.training), state)
        return LayerOutput(*state, self_weights, cross_weights)


# ---------------------------------------------------------------------------------------------
# 4. Models and the record
# ---------------------------------------------------------------------------------------------


class DwLstmModel(TranslationTransformerModel):
    config_class = DwLstmConfig

    @classmethod
    def layer_classes(cls, config: DwLstmConfig) -> tuple[type, type]:
        two_lstm = config.decoder_merge == "two_lstm"
        return (
            DepthWiseLstmEncoderLayer,
            TwoLstmDecoderLayer if two_lstm else DepthWiseLstmDecoderLayer,
        )


class DwLstmForConditionalGeneration(TranslationTransformerForConditionalGeneration):
    config_class = DwLstmConfig
    base_model_class = DwLstmModel


# BibTeX of the depth-wise LSTM papers (Xu et al. 2020; Xu et al. 2024).
XU_2020 = """@article{xu2020transformer,
  title   = {Transformer with Depth-Wise {LSTM}},
  author  = {Xu, Hongfei and Liu, Qiuhui and Xiong, Deyi and van Genabith, Josef},
  journal = {arXiv preprint arXiv:2007.06257},
  year    = {2020}
}"""
XU_2024 = """@inproceedings{xu2024rewiring,
  title     = {Rewiring the Transformer with Depth-Wise {LSTM}s},
  author    = {Xu, Hongfei and Song, Yang and Liu, Qiuhui and van Genabith, Josef and Xiong, Deyi},
  booktitle = {Proceedings of the 2024 Joint International Conference on Computational Linguistics,
               Language Resources and Evaluation (LREC-COLING 2024)},
  year      = {2024}
}"""


MEMBER = FamilyMember(
    config_class=DwLstmConfig,
    model_class=DwLstmModel,
    generation_class=DwLstmForConditionalGeneration,
    name="Transformer with depth-wise LSTMs (Xu et al.)",
    citations=(XU_2024, XU_2020),
    card_fields=("lstm_hidden", "lstm_activation", "share_gates", "share_hidden", "decoder_merge"),
    # gates; the hidden computation: fc1, fc2 (ffn, glu) or projection (linear)
    projections=("gates", "fc1", "fc2", "projection"),
    presets={"dwlstm": {}},
)

__all__ = [
    "DepthWiseConfig",
    "DwLstmConfig",
    "DwLstmModel",
    "DwLstmForConditionalGeneration",
]
