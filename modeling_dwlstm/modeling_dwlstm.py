"""PyTorch Transformer with depth-wise LSTMs (Xu et al.), and the skeleton every family member shares.

Read top to bottom:
 1. building blocks: positions, embeddings, masks, multi-head attention (SDPA, v5 KV cache);
 2. the depth-wise LSTM (SPEC §2): gates, hidden variants, one step over depth;
 3. layers: every layer maps a `LayerState` to a `LayerState`, so one can be swapped for another
    (the layer non-linearity analysis of 000 §4 replaces a single layer by a linear map);
 4. the encoder / decoder stacks, which pick their layer class by name from the config, and the two
    hooks that connect layers across a stack (a depth connection forms each layer's input from the
    earlier layer outputs; a cross-attention source gives each decoder layer its encoder states);
 5. `DwLstmModel` and `DwLstmForConditionalGeneration`, the Hugging Face wrappers.

Other members (residual, ...) live in their own `modeling_*.py` file: a config subclass, layer
classes registered with `register_layers`, and two thin model subclasses.
"""

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)

from .configuration_dwlstm import DwLstmConfig, FamilyMember, TranslationTransformerConfig

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "silu": nn.SiLU}


# ---------------------------------------------------------------------------------------------
# 1. Building blocks
# ---------------------------------------------------------------------------------------------


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher-forcing decoder input: labels shifted right behind the start token, -100 read as padding."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def attach_shared(parent: nn.Module, name: str, module: nn.Module, owned: bool):
    """Give `parent` the attribute `name`. Shared modules (depth-wise LSTM gates, token embeddings)
    are registered only by their owner, so a checkpoint holds them once; the other users keep a plain
    reference, which still follows the owner through `.to()`, loading and `deepcopy`."""
    if owned:
        setattr(parent, name, module)
    else:
        object.__setattr__(parent, name, module)


class SharedModules:
    """Modules several layers use, built by the first layer that asks (which then owns them)."""

    def __init__(self):
        self.modules = {}

    def get(self, key: tuple, build) -> tuple[nn.Module, bool]:
        if key in self.modules:
            return self.modules[key], False
        self.modules[key] = build()
        return self.modules[key], True


class SinusoidalPositions(nn.Module):
    """Fixed sin/cos positions (Vaswani et al. §3.5): sin on the first half of the features, cos on the second."""

    def __init__(self, num_positions: int, d_model: int):
        super().__init__()
        self.num_positions, self.d_model = num_positions, d_model
        self.register_buffer("table", self.build_table(), persistent=False)

    def build_table(self) -> torch.Tensor:
        half = self.d_model // 2
        inverse_frequency = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float) / max(half - 1, 1))
        angles = torch.arange(self.num_positions, dtype=torch.float)[:, None] * inverse_frequency[None, :]
        table = torch.cat([angles.sin(), angles.cos()], dim=-1)
        return F.pad(table, (0, self.d_model - 2 * half))  # odd d_model: one zero feature

    def init_parameters(self):
        init.copy_(self.table, self.build_table())

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table[positions]


class LearnedPositions(nn.Embedding):
    """Learned absolute positions (the option to sinusoidal ones)."""

    @property
    def num_positions(self) -> int:
        return self.num_embeddings


class TranslationEmbeddings(nn.Module):
    """x = dropout(sqrt(d) * E[token] + P[position]); E is the model's one shared (tied) embedding."""

    def __init__(self, config: TranslationTransformerConfig, token_embedding: nn.Embedding):
        super().__init__()
        attach_shared(self, "token_embedding", token_embedding, owned=False)
        position_class = SinusoidalPositions if config.position_embedding_type == "sinusoidal" else LearnedPositions
        self.positions = position_class(config.max_position_embeddings, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.dropout = config.dropout

    def forward(self, input_ids=None, inputs_embeds=None, position_offset: int = 0) -> torch.Tensor:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(
                "Pass exactly one of `input_ids` and `inputs_embeds` (decoder: `decoder_input_ids` and `decoder_inputs_embeds`)."
            )
        if input_ids is not None:
            check_token_ids(input_ids, self.token_embedding.num_embeddings)  # follows resize_token_embeddings
            inputs_embeds = self.token_embedding(input_ids)
        length = inputs_embeds.shape[1]
        if position_offset + length > self.positions.num_positions:
            raise ValueError(
                f"Sequence of {position_offset + length} positions is longer than max_position_embeddings="
                f"{self.positions.num_positions}; truncate the input or raise max_position_embeddings."
            )
        positions = torch.arange(position_offset, position_offset + length, device=inputs_embeds.device)
        hidden = inputs_embeds * self.scale + self.positions(positions).to(inputs_embeds.dtype)  # (B, T, d)
        return F.dropout(hidden, self.dropout, self.training)


def check_token_ids(input_ids: torch.Tensor, vocab_size: int):
    """Shape and range check. The range needs the values: read on the CPU (one reduction); on an
    accelerator it is asserted on the device instead, so that a decode step does not wait for the host."""
    if input_ids.dim() != 2:
        raise ValueError(f"Token ids must have shape (batch, length), got {tuple(input_ids.shape)}.")
    if not input_ids.numel() or torch.compiler.is_compiling():
        return
    if input_ids.device.type != "cpu":
        torch._assert_async(((input_ids >= 0) & (input_ids < vocab_size)).all(), "token ids outside [0, vocab_size)")
        return
    lowest, highest = torch.aminmax(input_ids)
    if lowest < 0 or highest >= vocab_size:
        raise ValueError(
            f"Token ids must lie in [0, vocab_size={vocab_size}); got ids from {int(lowest)} to "
            f"{int(highest)}. Was the input made with this model's tokenizer?"
        )


def padding_mask(attention_mask: torch.Tensor | None, length: int) -> torch.Tensor | None:
    """(batch, key_length) of 1/0 -> boolean (batch, 1, 1, key_length), True = may attend.
    None when nothing is masked (SDPA's fastest kernels), checked only on the CPU, where reading the
    mask costs no device synchronisation (and not while torch.compile traces)."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2 or attention_mask.shape[1] != length:
        raise ValueError(
            f"attention_mask must have shape (batch, {length}) to match its token ids, got {tuple(attention_mask.shape)}."
        )
    if attention_mask.device.type == "cpu" and not torch.compiler.is_compiling() and bool(attention_mask.all()):
        return None
    return attention_mask.bool()[:, None, None, :]


def causal_mask(query_length: int, key_length: int, attention_mask: torch.Tensor | None, device) -> torch.Tensor | None:
    """Query t (at absolute position past + t) sees keys 0..past + t, minus padded keys.
    A single new query with no padding needs no mask at all (the fast path of cached decoding)."""
    if query_length == 1 and attention_mask is None:
        return None
    past = key_length - query_length
    query_positions = torch.arange(query_length, device=device)[:, None] + past
    allowed = torch.arange(key_length, device=device)[None, :] <= query_positions  # (Tq, Tk)
    mask = allowed[None, None]
    if attention_mask is not None:
        if attention_mask.shape[-1] != key_length:
            raise ValueError(
                f"decoder_attention_mask covers {attention_mask.shape[-1]} positions, expected {key_length} "
                "(past + new decoder tokens)."
            )
        # A query always sees itself, so a padded query gets no all-masked row (which would give NaN).
        mask = (mask & attention_mask.bool()[:, None, None, :]) | (query_positions == torch.arange(key_length, device=device))
    return mask


class FusedLinear(nn.Linear):
    """`blocks` projections of the same input stored as one (blocks * out, in) matrix, so they cost one
    matmul; each block is initialised as its own Xavier matrix, as if the projections were separate."""

    def __init__(self, in_features: int, out_features: int, blocks: int):
        super().__init__(in_features, blocks * out_features)
        self.blocks = blocks


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over `num_heads` heads (Vaswani et al. §3.2), computed with SDPA.

    Self-attention projects queries, keys and values with one fused matmul (`qkv_proj`) and caches
    keys/values in `past_key_values.self_attention_cache`; cross-attention projects keys and values
    of the encoder output with one matmul (`kv_proj`) once per generation and reuses them
    (`is_updated[layer_idx]`).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float, layer_idx: int, is_cross_attention: bool = False):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.dropout, self.layer_idx, self.is_cross_attention = dropout, layer_idx, is_cross_attention
        if is_cross_attention:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = FusedLinear(d_model, d_model, blocks=2)
        else:
            self.qkv_proj = FusedLinear(d_model, d_model, blocks=3)
        self.out_proj = nn.Linear(d_model, d_model)

    def split_heads(self, x: torch.Tensor, parts: int = 1):  # (B, T, parts * d) -> parts x (B, H, T, d/H)
        return x.unflatten(-1, (parts, self.num_heads, self.head_dim)).permute(2, 0, 3, 1, 4).unbind(0)

    def cross_keys_values(self, encoder_output: torch.Tensor, cache: EncoderDecoderCache | None):
        if cache is not None and cache.is_updated.get(self.layer_idx):
            cached = cache.cross_attention_cache.layers[self.layer_idx]
            return cached.keys, cached.values
        keys, values = self.split_heads(self.kv_proj(encoder_output), 2)  # (B, H, S, d/H) each
        if cache is not None:
            keys, values = cache.cross_attention_cache.update(keys, values, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return keys, values

    def queries_keys_values(self, hidden_states, key_value_states, cache: EncoderDecoderCache | None):
        if self.is_cross_attention:
            (query,) = self.split_heads(self.q_proj(hidden_states))
            return (query, *self.cross_keys_values(key_value_states, cache))
        query, keys, values = self.split_heads(self.qkv_proj(hidden_states), 3)
        if cache is not None:
            keys, values = cache.self_attention_cache.update(keys, values, self.layer_idx)
        return query, keys, values

    def forward(self, hidden_states, attention_mask=None, key_value_states=None, past_key_values=None, output_attentions=False):
        query, keys, values = self.queries_keys_values(hidden_states, key_value_states, past_key_values)  # (B, H, T, d/H)
        dropout = self.dropout if self.training else 0.0
        if output_attentions:  # SDPA does not return the weights
            scores = query @ keys.transpose(-1, -2) / math.sqrt(self.head_dim)
            if attention_mask is not None:
                scores = scores.masked_fill(~attention_mask, float("-inf"))
            weights = F.dropout(scores.softmax(dim=-1).nan_to_num(0.0), dropout, self.training)  # as SDPA: 0 for all-masked rows
            attended = weights @ values
        else:
            weights = None
            attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=attention_mask, dropout_p=dropout)
        return self.out_proj(attended.transpose(1, 2).flatten(2)), weights  # (B, Tq, d)


# ---------------------------------------------------------------------------------------------
# 2. The depth-wise LSTM (SPEC §2; 001 Eqs. 1-8, 000 Eqs. 3-10)
# ---------------------------------------------------------------------------------------------


class DepthwiseLstmGates(nn.Module):
    """i, f, g = sigmoid(LN_k(W_k c + b_k)), k = input, forget, output: one matmul for the three gates,
    then a LayerNorm per gate (weights of shape (3, d)) done as one batched normalisation."""

    def __init__(self, input_dim: int, d_model: int):
        super().__init__()
        self.d_model = d_model
        self.weight = nn.Parameter(torch.empty(3 * d_model, input_dim))  # rows: W_i, W_f, W_o
        self.bias = nn.Parameter(torch.zeros(3 * d_model))
        self.norm_weight = nn.Parameter(torch.ones(3, d_model))
        self.norm_bias = nn.Parameter(torch.zeros(3, d_model))

    def init_parameters(self):
        if not getattr(self.weight, "_is_hf_initialized", False):
            for gate_weight in self.weight.chunk(3):  # Xavier per gate, as for three separate W_k
                nn.init.xavier_uniform_(gate_weight)
        init.zeros_(self.bias)
        init.ones_(self.norm_weight)
        init.zeros_(self.norm_bias)

    def forward(self, concatenated: torch.Tensor):
        gates = F.linear(concatenated, self.weight, self.bias).unflatten(-1, (3, self.d_model))  # (B, T, 3, d)
        gates = F.layer_norm(gates, (self.d_model,)) * self.norm_weight + self.norm_bias
        return torch.sigmoid(gates).unbind(-2)  # three (B, T, d)


class LinearHidden(nn.Module):
    """h = act(LN(W_h c + b_h)), W_h: input -> d (001 Eq. 5)."""

    def __init__(self, input_dim: int, config: DwLstmConfig):
        super().__init__()
        self.projection = nn.Linear(input_dim, config.d_model)
        self.norm = nn.LayerNorm(config.d_model)
        self.activation = ACTIVATIONS[config.lstm_activation]()

    def forward(self, concatenated: torch.Tensor) -> torch.Tensor:
        return self.activation(self.norm(self.projection(concatenated)))


class FeedForwardHidden(nn.Module):
    """h = W_2 act(LN(W_1 c + b_1)) + b_2, W_1: input -> d_ff (000 Eq. 8)."""

    def __init__(self, input_dim: int, config: DwLstmConfig):
        super().__init__()
        self.fc1 = nn.Linear(input_dim, config.ffn_dim)
        self.norm = nn.LayerNorm(config.ffn_dim)
        self.activation = ACTIVATIONS[config.lstm_activation]()
        self.fc2 = nn.Linear(config.ffn_dim, config.d_model)
        self.activation_dropout = config.activation_dropout

    def forward(self, concatenated: torch.Tensor) -> torch.Tensor:
        inner = self.activation(self.norm(self.fc1(concatenated)))  # (B, T, d_ff)
        return self.fc2(F.dropout(inner, self.activation_dropout, self.training))


class GluHidden(nn.Module):
    """h = W_2 GLU(LN(W_1 c + b_1)) + b_2, GLU(a; b) = a * sigmoid(b) halves d_ff (001 Eq. 6)."""

    def __init__(self, input_dim: int, config: DwLstmConfig):
        super().__init__()
        self.fc1 = nn.Linear(input_dim, config.ffn_dim)
        self.norm = nn.LayerNorm(config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim // 2, config.d_model)
        self.activation_dropout = config.activation_dropout

    def forward(self, concatenated: torch.Tensor) -> torch.Tensor:
        inner = F.glu(self.norm(self.fc1(concatenated)), dim=-1)  # (B, T, d_ff / 2)
        return self.fc2(F.dropout(inner, self.activation_dropout, self.training))


LSTM_HIDDEN_CLASSES = {"linear": LinearHidden, "ffn": FeedForwardHidden, "glu": GluHidden}


class LayerState(NamedTuple):
    """What one layer hands the next."""

    output: torch.Tensor  # (batch, length, d_model): the layer output the next layer attends over
    cell: torch.Tensor | None = None  # (batch, length, d_model): depth-wise LSTM cell; None for residual layers


class DepthwiseLstm(nn.Module):
    """One step of the LN-LSTM over depth: (x, o_{l-1}, c_{l-1}) -> (o_l, c_l).

        c   = [x ; o_{l-1}]
        c_l = f * c_{l-1} + i * hidden(c)
        o_l = g * c_l                        (no tanh on the cell)

    Gates and hidden module are shared as `share_gates` / `share_hidden` say; `scope` names this
    step's place, (stack, layer index, sub-layer), and decides which shared module it gets.
    """

    def __init__(self, config: DwLstmConfig, input_dim: int, shared_modules: SharedModules, scope: tuple):
        super().__init__()
        stack = scope[0]
        gate_scope = {"global": (), "per_stack": (stack,), "none": scope}[config.share_gates]
        hidden_scope = (stack,) if config.share_hidden else scope
        gates, owns_gates = shared_modules.get(
            ("gates", input_dim, *gate_scope), lambda: DepthwiseLstmGates(input_dim, config.d_model)
        )
        hidden, owns_hidden = shared_modules.get(
            ("hidden", input_dim, *hidden_scope), lambda: LSTM_HIDDEN_CLASSES[config.lstm_hidden](input_dim, config)
        )
        attach_shared(self, "gates", gates, owns_gates)
        attach_shared(self, "hidden", hidden, owns_hidden)

    def forward(self, x: torch.Tensor, state: LayerState) -> LayerState:
        concatenated = torch.cat([x, state.output], dim=-1)  # (B, T, input_dim)
        input_gate, forget_gate, output_gate = self.gates(concatenated)
        cell = forget_gate * state.cell + input_gate * self.hidden(concatenated)
        return LayerState(output=output_gate * cell, cell=cell)


# ---------------------------------------------------------------------------------------------
# 3. Layers. Encoder layers: (state, mask) -> (state, (self-attention weights,)).
#    Decoder layers: (state, encoder output, masks, cache) -> (state, (self, cross weights)).
# ---------------------------------------------------------------------------------------------

ENCODER_LAYER_CLASSES: dict[str, type] = {}
DECODER_LAYER_CLASSES: dict[str, type] = {}


def register_layers(name: str, encoder_layer: type, decoder_layer: type):
    """Make a connection style available to the stacks under the name its config returns
    from `encoder_layer_type` / `decoder_layer_type`."""
    ENCODER_LAYER_CLASSES[name] = encoder_layer
    DECODER_LAYER_CLASSES[name] = decoder_layer


class DepthwiseLstmEncoderLayer(nn.Module):
    """a = SelfAttn(o_{l-1});  (o_l, c_l) = LSTM(a, o_{l-1}, c_{l-1})   (SPEC §2.2)."""

    def __init__(self, config: DwLstmConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        d = config.d_model
        self.self_attn = MultiHeadAttention(d, config.encoder_attention_heads, config.attention_dropout, layer_idx)
        self.depthwise_lstm = DepthwiseLstm(config, 2 * d, shared_modules, ("encoder", layer_idx, 0))
        self.dropout = config.dropout

    @staticmethod
    def initial_state(embeddings: torch.Tensor) -> LayerState:
        return LayerState(output=embeddings, cell=embeddings)  # o_0 = c_0 = embeddings

    def forward(self, state: LayerState, attention_mask=None, output_attentions=False):
        attended, weights = self.self_attn(state.output, attention_mask, output_attentions=output_attentions)
        attended = F.dropout(attended, self.dropout, self.training)  # (B, S, d)
        return self.depthwise_lstm(attended, state), (weights,)


class DepthwiseLstmDecoderLayer(nn.Module):
    """s = MaskedSelfAttn(o_{l-1});  x = CrossAttn(s + o_{l-1}, enc);  (o_l, c_l) = LSTM(merge(s, x), o_{l-1}, c_{l-1})
    with merge = s + x ("add") or [s; x] ("concat")   (SPEC §2.3, 001 Fig. 3a)."""

    def __init__(self, config: DwLstmConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        d, heads = config.d_model, config.decoder_attention_heads
        self.self_attn = MultiHeadAttention(d, heads, config.attention_dropout, layer_idx)
        self.cross_attn = MultiHeadAttention(d, heads, config.attention_dropout, layer_idx, is_cross_attention=True)
        self.concat = config.decoder_merge == "concat"
        lstm_input_dim = 3 * d if self.concat else 2 * d
        self.depthwise_lstm = DepthwiseLstm(config, lstm_input_dim, shared_modules, ("decoder", layer_idx, 0))
        self.dropout = config.dropout

    initial_state = staticmethod(DepthwiseLstmEncoderLayer.initial_state)

    def forward(self, state, encoder_hidden_states, encoder_mask=None, self_mask=None, past_key_values=None, output_attentions=False):
        s, self_weights = self.self_attn(state.output, self_mask, past_key_values=past_key_values, output_attentions=output_attentions)
        s = F.dropout(s, self.dropout, self.training)  # (B, T, d)
        x, cross_weights = self.cross_attn(
            s + state.output, encoder_mask, encoder_hidden_states, past_key_values, output_attentions
        )
        x = F.dropout(x, self.dropout, self.training)  # (B, T, d)
        merged = torch.cat([s, x], dim=-1) if self.concat else s + x
        return self.depthwise_lstm(merged, state), (self_weights, cross_weights)


class TwoLstmDecoderLayer(nn.Module):
    """001 Fig. 3b: a depth-wise LSTM after each attention sub-layer, replacing both residual connections.
        s = MaskedSelfAttn(o_{l-1});  (o', c') = LSTM_1(s, o_{l-1}, c_{l-1})
        x = CrossAttn(o', enc);       (o_l, c_l) = LSTM_2(x, o', c')"""

    def __init__(self, config: DwLstmConfig, layer_idx: int, shared_modules: SharedModules):
        super().__init__()
        d, heads = config.d_model, config.decoder_attention_heads
        self.self_attn = MultiHeadAttention(d, heads, config.attention_dropout, layer_idx)
        self.self_attn_lstm = DepthwiseLstm(config, 2 * d, shared_modules, ("decoder", layer_idx, 0))
        self.cross_attn = MultiHeadAttention(d, heads, config.attention_dropout, layer_idx, is_cross_attention=True)
        self.cross_attn_lstm = DepthwiseLstm(config, 2 * d, shared_modules, ("decoder", layer_idx, 1))
        self.dropout = config.dropout

    initial_state = staticmethod(DepthwiseLstmEncoderLayer.initial_state)

    def forward(self, state, encoder_hidden_states, encoder_mask=None, self_mask=None, past_key_values=None, output_attentions=False):
        s, self_weights = self.self_attn(state.output, self_mask, past_key_values=past_key_values, output_attentions=output_attentions)
        state = self.self_attn_lstm(F.dropout(s, self.dropout, self.training), state)
        x, cross_weights = self.cross_attn(state.output, encoder_mask, encoder_hidden_states, past_key_values, output_attentions)
        state = self.cross_attn_lstm(F.dropout(x, self.dropout, self.training), state)
        return state, (self_weights, cross_weights)


register_layers("depthwise_lstm", DepthwiseLstmEncoderLayer, DepthwiseLstmDecoderLayer)
register_layers("depthwise_lstm_two", DepthwiseLstmEncoderLayer, TwoLstmDecoderLayer)


# ---------------------------------------------------------------------------------------------
# 4. Stacks
# ---------------------------------------------------------------------------------------------


def build_layers(registry: dict, layer_type: str, config, count: int, shared_modules: SharedModules) -> nn.ModuleList:
    check_registered(registry, layer_type, "layer class")
    return nn.ModuleList(registry[layer_type](config, i, shared_modules) for i in range(count))


def check_registered(registry: dict, name: str, what: str):
    if name not in registry:
        raise ValueError(
            f"No {what} is registered as {name!r} (known: {sorted(registry)}); import the module "
            "that defines this family member (e.g. `import modeling_dwlstm`)."
        )


@dataclass
class TranslationEncoderOutput(BaseModelOutput):
    """`BaseModelOutput` plus, for decoders that read every encoder layer (transparent attention),
    `layer_outputs` (batch, source length, encoder_layers + 1, d_model): the embeddings, each layer's
    output and the final output, i.e. `hidden_states` stacked. A top-level tensor, so `generate()`
    expands it for beams like `last_hidden_state`. None for every other member."""

    layer_outputs: torch.FloatTensor | None = None


class LayerCombination(nn.Module):
    """Scalar weights that mix several layers' outputs (DLCL, transparent attention). `weights` is a
    parameter when learned and a buffer when fixed; initialised to `initial_weights()`."""

    def initial_weights(self) -> torch.Tensor:
        raise NotImplementedError

    def init_parameters(self):
        init.copy_(self.weights, self.initial_weights())


class PreviousLayer(nn.Module):
    """The default depth connection: layer l+1 reads layer l's output as it is (residual and depth-wise
    LSTM stacks). A depth connection decides what a stack remembers of the layer outputs y_0 .. y_c seen
    so far (`remember` returns the new history, a list passed along by the stack) and forms from it the
    input of consumer c: layer c+1, or the stack output for c = L."""

    def __init__(self, config: TranslationTransformerConfig, num_layers: int):
        super().__init__()

    def remember(self, history: list[LayerState], state: LayerState) -> list[LayerState]:
        return [state]  # only the latest output is ever read

    def forward(self, history: list[LayerState], consumer: int) -> LayerState:
        return history[-1]


class TopEncoderLayer(nn.Module):
    """The default cross-attention source: every decoder layer attends over the encoder's final output."""

    reads_all_encoder_layers = False

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__()

    def encoder_states(self, encoder_outputs: BaseModelOutput) -> torch.Tensor:
        """What the model hands the decoder as `encoder_hidden_states`."""
        return encoder_outputs.last_hidden_state

    def forward(self, encoder_states: torch.Tensor, layer_idx: int, past_key_values=None) -> torch.Tensor | None:
        """The memory decoder layer `layer_idx` cross-attends over."""
        return encoder_states


DEPTH_CONNECTION_CLASSES: dict[str, type] = {"previous_layer": PreviousLayer}
CROSS_ATTENTION_SOURCE_CLASSES: dict[str, type] = {"top_encoder_layer": TopEncoderLayer}


class LayerStack(nn.Module):
    """What both stacks share: running a layer, under gradient checkpointing when it is enabled
    (`model.activation_checkpointing_enable()` sets `gradient_checkpointing` here)."""

    gradient_checkpointing = False

    def call_layer(self, layer: nn.Module, *args):
        if self.gradient_checkpointing and self.training:
            # Non-reentrant: the LayerState tuple carries the tensors that need gradients.
            return torch.utils.checkpoint.checkpoint(layer, *args, use_reentrant=False)
        return layer(*args)


class TranslationEncoder(LayerStack):
    """Embeddings, `encoder_layers` layers of the config's connection style, final LayerNorm."""

    def __init__(self, config: TranslationTransformerConfig, token_embedding: nn.Embedding, shared_modules: SharedModules):
        super().__init__()
        self.config = config
        self.embeddings = TranslationEmbeddings(config, token_embedding)
        self.layers = build_layers(ENCODER_LAYER_CLASSES, config.encoder_layer_type, config, config.encoder_layers, shared_modules)
        self.depth_connection = build_depth_connection(config, config.encoder_layers)
        self.exports_layer_outputs = cross_attention_source_class(config).reads_all_encoder_layers
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, output_attentions=None,
                output_hidden_states=None, return_dict=None) -> TranslationEncoderOutput:
        hidden = self.embeddings(input_ids, inputs_embeds)  # (B, S, d)
        mask = padding_mask(attention_mask, hidden.shape[1])
        state = self.layers[0].initial_state(hidden)
        all_hidden, all_attentions, history = [state.output], [], self.depth_connection.remember([], state)
        for i, layer in enumerate(self.layers):
            state, (weights,) = self.call_layer(layer, self.depth_connection(history, i), mask, bool(output_attentions))
            history = self.depth_connection.remember(history, state)
            all_hidden.append(state.output)
            all_attentions.append(weights)
        output = self.final_layer_norm(self.depth_connection(history, len(self.layers)).output)
        all_hidden[-1] = output  # y_0 .. y_{L-1} and the stack output
        return TranslationEncoderOutput(
            last_hidden_state=output,
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
            layer_outputs=torch.stack(all_hidden, dim=2) if self.exports_layer_outputs else None,  # (B, S, L+1, d)
        )


def build_depth_connection(config: TranslationTransformerConfig, num_layers: int) -> nn.Module:
    check_registered(DEPTH_CONNECTION_CLASSES, config.depth_connection_type, "depth connection")
    return DEPTH_CONNECTION_CLASSES[config.depth_connection_type](config, num_layers)


def cross_attention_source_class(config: TranslationTransformerConfig) -> type:
    check_registered(CROSS_ATTENTION_SOURCE_CLASSES, config.cross_attention_source_type, "cross-attention source")
    return CROSS_ATTENTION_SOURCE_CLASSES[config.cross_attention_source_type]


class TranslationDecoder(LayerStack):
    """Embeddings, `decoder_layers` layers (masked self-attention, cross-attention), final LayerNorm.
    With a cache only the new positions are computed: the depth-wise state is per position, so the
    attention KV cache is all that carries over between steps. `encoder_hidden_states` is what the
    cross-attention source reads: the encoder output (B, S, d), or for transparent attention every
    encoder layer's output (B, S, L_enc+1, d)."""

    def __init__(self, config: TranslationTransformerConfig, token_embedding: nn.Embedding, shared_modules: SharedModules):
        super().__init__()
        self.config = config
        self.embeddings = TranslationEmbeddings(config, token_embedding)
        self.layers = build_layers(DECODER_LAYER_CLASSES, config.decoder_layer_type, config, config.decoder_layers, shared_modules)
        self.depth_connection = build_depth_connection(config, config.decoder_layers)
        self.cross_attention_source = cross_attention_source_class(config)(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, input_ids=None, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                past_key_values=None, inputs_embeds=None, use_cache=None, output_attentions=None,
                output_hidden_states=None, return_dict=None) -> BaseModelOutputWithPastAndCrossAttentions:
        if encoder_hidden_states is None:
            raise ValueError("The decoder needs `encoder_hidden_states` (the encoder's output).")
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        hidden = self.embeddings(input_ids, inputs_embeds, position_offset=past_length)  # (B, T, d)
        if encoder_hidden_states.shape[0] != hidden.shape[0]:
            raise ValueError(
                f"Decoder batch ({hidden.shape[0]}) and encoder batch ({encoder_hidden_states.shape[0]}) differ."
            )
        self_mask = causal_mask(hidden.shape[1], past_length + hidden.shape[1], attention_mask, hidden.device)
        encoder_mask = padding_mask(encoder_attention_mask, encoder_hidden_states.shape[1])
        state = self.layers[0].initial_state(hidden)
        all_hidden, self_attentions, cross_attentions = [state.output], [], []
        history = self.depth_connection.remember([], state)
        for i, layer in enumerate(self.layers):
            memory = self.cross_attention_source(encoder_hidden_states, i, past_key_values)  # (B, S, d) or None once cached
            state, (self_weights, cross_weights) = self.call_layer(
                layer, self.depth_connection(history, i), memory, encoder_mask, self_mask, past_key_values, bool(output_attentions)
            )
            history = self.depth_connection.remember(history, state)
            all_hidden.append(state.output)
            self_attentions.append(self_weights)
            cross_attentions.append(cross_weights)
        output = self.final_layer_norm(self.depth_connection(history, len(self.layers)).output)
        all_hidden[-1] = output
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=output,
            past_key_values=past_key_values,
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            attentions=tuple(self_attentions) if output_attentions else None,
            cross_attentions=tuple(cross_attentions) if output_attentions else None,
        )


# ---------------------------------------------------------------------------------------------
# 5. Hugging Face models
# ---------------------------------------------------------------------------------------------


class DwLstmPreTrainedModel(PreTrainedModel):
    """Initialisation as in the papers' toolkits (SPEC §1): Xavier-uniform projections with zero
    biases, embeddings N(0, d_model^-1/2), LayerNorm weight 1 and bias 0. Any other module with
    parameters or buffers to set defines `init_parameters()` (under no_grad, with `transformers.initialization`
    functions, which skip weights loaded from a checkpoint)."""

    config_class = DwLstmConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _no_split_modules = ["DepthwiseLstmEncoderLayer", "DepthwiseLstmDecoderLayer", "TwoLstmDecoderLayer"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        if isinstance(module, nn.Linear):
            if not getattr(module.weight, "_is_hf_initialized", False):
                for block in module.weight.chunk(getattr(module, "blocks", 1)):  # fused projections: Xavier per block
                    nn.init.xavier_uniform_(block)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):  # tokens and learned positions
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif hasattr(module, "init_parameters"):  # modules with their own initialisation say so themselves
            module.init_parameters()

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Also save the translation pipeline (transformers 5 dropped the task), so that
        `pipeline("translation", model=save_directory, trust_remote_code=True)` works anywhere."""
        self.config.custom_pipelines = {**(getattr(self.config, "custom_pipelines", None) or {}), **translation_pipeline_tasks(self.config)}
        super().save_pretrained(save_directory, *args, **kwargs)
        if PIPELINE_FILE.exists() and kwargs.get("is_main_process", True):
            shutil.copy(PIPELINE_FILE, os.path.join(save_directory, PIPELINE_FILE.name))


PIPELINE_FILE = Path(__file__).with_name("pipeline_translation.py")


def translation_pipeline_tasks(config: TranslationTransformerConfig) -> dict:
    """`custom_pipelines` entries: "translation" and one "translation_xx_to_yy" per `config.language_pairs`."""
    entry = {"impl": "pipeline_translation.TranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    tasks = ["translation"] + [f"translation_{pair.replace('-', '_to_')}" for pair in config.language_pairs]
    return {task: dict(entry) for task in tasks}


class DwLstmModel(DwLstmPreTrainedModel):
    """The bare encoder-decoder: token ids in, the decoder's last hidden states out."""

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        shared_modules = SharedModules()  # lets share_gates="global" reach across both stacks
        self.encoder = TranslationEncoder(config, self.shared, shared_modules)
        self.decoder = TranslationDecoder(config, self.shared, shared_modules)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding):
        self.shared = value
        for stack in (self.encoder, self.decoder):
            attach_shared(stack.embeddings, "token_embedding", value, owned=False)

    def get_encoder(self):
        return self.encoder

    def get_decoder(self):
        return self.decoder

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs=None, past_key_values: Cache | None = None, inputs_embeds=None,
                decoder_inputs_embeds=None, use_cache=None, output_attentions=None, output_hidden_states=None,
                return_dict=None) -> Seq2SeqModelOutput:
        if use_cache is None:
            use_cache = self.config.use_cache
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask, inputs_embeds, output_attentions, output_hidden_states)
        elif isinstance(encoder_outputs, torch.Tensor):
            encoder_outputs = BaseModelOutput(last_hidden_state=encoder_outputs)
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError("Pass `decoder_input_ids` (or `labels`, from which they are derived).")
        decoder_outputs = self.decoder(
            decoder_input_ids, decoder_attention_mask, self.decoder.cross_attention_source.encoder_states(encoder_outputs), attention_mask,
            past_key_values, decoder_inputs_embeds, use_cache, output_attentions, output_hidden_states,
        )
        output = Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return output if return_dict is not False else output.to_tuple()


class DwLstmForConditionalGeneration(DwLstmPreTrainedModel, GenerationMixin):
    """The translation model: `DwLstmModel` plus the output projection (tied to the embeddings) and the
    label-smoothed cross-entropy of the papers (smoothing `config.label_smoothing`, padding ignored)."""

    base_model_class = DwLstmModel
    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}
    accepts_loss_kwargs = False

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__(config)
        self.model = self.base_model_class(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()
        # The papers decode with beam 4; translations need more than generate()'s default 20 tokens.
        self.generation_config.num_beams = 4
        self.generation_config.max_length = min(256, config.max_position_embeddings)

    def get_encoder(self):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear):
        self.lm_head = value

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs=None, past_key_values: Cache | None = None, inputs_embeds=None,
                decoder_inputs_embeds=None, labels=None, use_cache=None, output_attentions=None,
                output_hidden_states=None, return_dict=None) -> Seq2SeqLMOutput:
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs, past_key_values,
            inputs_embeds, decoder_inputs_embeds, use_cache, output_attentions, output_hidden_states, return_dict=True,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (B, T, vocab)
        loss = self.translation_loss(logits, labels) if labels is not None else None
        output = Seq2SeqLMOutput(loss=loss, logits=logits, **{k: v for k, v in outputs.items() if k != "last_hidden_state"})
        return output if return_dict is not False else output.to_tuple()

    def translation_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Label-smoothed cross-entropy averaged over target tokens; -100 and padding are ignored."""
        if labels.shape != logits.shape[:2]:
            raise ValueError(f"labels have shape {tuple(labels.shape)}, expected (batch, target length) = {tuple(logits.shape[:2])}.")
        targets = labels.masked_fill(labels == self.config.pad_token_id, -100)
        return F.cross_entropy(
            logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100, label_smoothing=self.config.label_smoothing
        )

    @staticmethod
    def _reorder_cache(past_key_values: EncoderDecoderCache, beam_idx: torch.Tensor) -> EncoderDecoderCache:
        """Beam search: follow the surviving beams in the self-attention cache only. The cross-attention
        keys/values are the same for every beam of a sentence and beams never move between sentences, so
        the default (reordering both caches) copies them every step for nothing."""
        past_key_values.self_attention_cache.reorder_cache(beam_idx)
        return past_key_values

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)



# BibTeX of the depth-wise LSTM papers (000, 001).
XU_2020 = """@article{xu2020transformer,
  title   = {Transformer with Depth-Wise {LSTM}},
  author  = {Xu, Hongfei and Liu, Qiuhui and Xiong, Deyi and van Genabith, Josef},
  journal = {arXiv preprint arXiv:2007.06257},
  year    = {2020}
}"""
XU_REWIRING = """@inproceedings{xu2024rewiring,
  title     = {Rewiring the Transformer with Depth-Wise {LSTM}s},
  author    = {Xu, Hongfei and others},
  booktitle = {Proceedings of the 2024 Joint International Conference on Computational Linguistics,
               Language Resources and Evaluation (LREC-COLING 2024)},
  year      = {2024}
}"""


MEMBER = FamilyMember(
    config_class=DwLstmConfig,
    model_class=DwLstmModel,
    generation_class=DwLstmForConditionalGeneration,
    name="Transformer with depth-wise LSTMs (Xu et al.)",
    citations=(XU_REWIRING, XU_2020),
    card_fields=("lstm_hidden", "lstm_activation", "share_gates", "share_hidden", "decoder_merge"),
    presets={"dwlstm": {}},
)

__all__ = [
    "DwLstmPreTrainedModel",
    "DwLstmModel",
    "DwLstmForConditionalGeneration",
    "LayerState",
    "register_layers",
    "TranslationEncoderOutput",
]
