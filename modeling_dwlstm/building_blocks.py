"""The building blocks every member shares: positions and embeddings, the attention masks, and
multi-head attention (Vaswani et al., 2017, Eq. 1 and Sec. 3.2.2) with the two ways a decoding step
attends: scaled dot-product attention, or, for a CPU decoding step with many rows, two matrix
products (`decoding_step_attention`). A sentence's beams may share its cross-attention keys and
values (`rows_per_sentence`): the queries of its rows are folded onto one set of keys."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, EncoderDecoderCache, StaticLayer

from .configuration_translation import TranslationTransformerConfig


def attach_shared(parent: nn.Module, name: str, module: nn.Module, owned: bool):
    """Give `parent` the attribute `name`. Shared modules (depth-wise LSTM gates, token embeddings)
    are registered only by their owner, so a checkpoint holds them once; the other users keep a
    plain reference, which still follows the owner through `.to()`, loading and `deepcopy`."""
    if owned:
        setattr(parent, name, module)
    else:
        object.__setattr__(parent, name, module)


class SinusoidalPositions(nn.Module):
    """Fixed sin/cos positions (Vaswani et al. §3.5): sin on the first half of the features, cos on
    the second."""

    def __init__(self, num_positions: int, d_model: int):
        super().__init__()
        self.num_positions, self.d_model = num_positions, d_model
        self.register_buffer("table", self.build_table(), persistent=False)

    def build_table(self) -> torch.Tensor:
        half = self.d_model // 2
        inverse_frequency = torch.exp(
            -math.log(10000.0) * torch.arange(half, dtype=torch.float) / max(half - 1, 1)
        )
        angles = (
            torch.arange(self.num_positions, dtype=torch.float)[:, None]
            * inverse_frequency[None, :]
        )
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
    """x = dropout(sqrt(d) * E[token] + P[position]); E is the model's one shared (tied) embedding."""  # noqa: E501

    def __init__(self, config: TranslationTransformerConfig, token_embedding: nn.Embedding):
        super().__init__()
        attach_shared(self, "token_embedding", token_embedding, owned=False)
        position_class = (
            SinusoidalPositions
            if config.position_embedding_type == "sinusoidal"
            else LearnedPositions
        )
        self.positions = position_class(config.max_position_embeddings, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.dropout = config.dropout

    def forward(self, input_ids=None, inputs_embeds=None, position_offset: int = 0) -> torch.Tensor:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(
                "Pass exactly one of `input_ids` and `inputs_embeds` (decoder: "
                "`decoder_input_ids` and `decoder_inputs_embeds`)."
            )
        if input_ids is not None:
            # follows resize_token_embeddings
            check_token_ids(input_ids, self.token_embedding.num_embeddings)
            inputs_embeds = self.token_embedding(input_ids)
        length = inputs_embeds.shape[1]
        # A static cache's length is a tensor, which torch.compile cannot branch on (generate()
        # sized that cache); the growing cache's length is a size, checked compiled or not.
        static_length = isinstance(position_offset, torch.Tensor) and torch.compiler.is_compiling()
        if not static_length and position_offset + length > self.positions.num_positions:
            raise ValueError(
                f"Sequence of {position_offset + length} positions is longer than "
                f"max_position_embeddings={self.positions.num_positions}; truncate the input or "
                "raise max_position_embeddings."
            )
        positions = torch.arange(length, device=inputs_embeds.device) + position_offset
        # (B, T, d)
        hidden = inputs_embeds * self.scale + self.positions(positions).to(inputs_embeds.dtype)
        return F.dropout(hidden, self.dropout, self.training)


def check_token_ids(input_ids: torch.Tensor, vocab_size: int):
    """Shape and range check. The range needs the values: read on the CPU (one reduction); on an
    accelerator it is asserted on the device instead, so that a decode step does not wait for
    the host."""
    if (
        not isinstance(input_ids, torch.Tensor)
        or input_ids.dtype.is_floating_point
        or input_ids.dtype == torch.bool
    ):
        kind = input_ids.dtype if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise TypeError(
            f"Token ids must be an integer torch.Tensor of shape (batch, length), got {kind}; "
            "make them with the tokenizer: tokenizer(texts, return_tensors='pt')."
        )
    if input_ids.dim() != 2:
        raise ValueError(
            f"Token ids must have shape (batch, length), got {tuple(input_ids.shape)}."
        )
    if not input_ids.numel() or torch.compiler.is_compiling():
        return
    if input_ids.device.type != "cpu":
        torch._assert_async(
            ((input_ids >= 0) & (input_ids < vocab_size)).all(), "token ids outside [0, vocab_size)"
        )
        return
    lowest, highest = torch.aminmax(input_ids)
    if lowest < 0 or highest >= vocab_size:
        raise ValueError(
            f"Token ids must lie in [0, vocab_size={vocab_size}); got ids from {int(lowest)} to "
            f"{int(highest)}. Was the input made with this model's tokenizer?"
        )


def padding_mask(
    attention_mask: torch.Tensor | None, shape: tuple[int, int]
) -> torch.Tensor | None:
    """(batch, key_length) of 1/0 -> boolean (batch, 1, 1, key_length), True = may attend; `shape`:
    its token ids'. None when nothing is masked (SDPA's fastest kernels), checked on the CPU only
    (no device synchronisation)."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2 or tuple(attention_mask.shape) != tuple(shape):
        raise ValueError(
            f"attention_mask must have shape (batch, length) = {tuple(shape)} to match its token "
            f"ids, got {tuple(attention_mask.shape)}; a mask is never broadcast over the batch."
        )
    if (
        attention_mask.device.type == "cpu"
        and not torch.compiler.is_compiling()
        and bool(attention_mask.all())
    ):
        return None
    return attention_mask.bool()[:, None, None, :]


def causal_mask(
    batch: int,
    query_length: int,
    key_length: int,
    attention_mask: torch.Tensor | None,
    device,
    past=None,
) -> torch.Tensor | None:
    """Query t (at position past + t) sees keys 0..past + t, minus padded keys. `past` is given for
    a static cache, whose keys are its whole length. None for one new query without padding over a
    growing cache (the fast path)."""
    if attention_mask is not None and attention_mask.dim() == 4:
        # Ready-made (batch, 1, query, keys), as generate() passes with a static cache.
        if attention_mask.shape[0] != batch or attention_mask.shape[2] != query_length:
            raise ValueError(
                f"A 4D decoder_attention_mask must have shape ({batch}, 1, {query_length}, keys), "
                f"got {tuple(attention_mask.shape)}."
            )
        return attention_mask.bool() if attention_mask.dtype == torch.bool else attention_mask == 0
    static = past is not None
    if query_length == 1 and attention_mask is None and not static:
        return None
    past = key_length - query_length if past is None else past
    # the positions not filled yet are masked by causality
    if static and attention_mask is not None:
        attention_mask = F.pad(attention_mask, (0, key_length - attention_mask.shape[1]), value=1)
    query_positions = torch.arange(query_length, device=device)[:, None] + past
    allowed = torch.arange(key_length, device=device)[None, :] <= query_positions  # (Tq, Tk)
    mask = allowed[None, None]
    if attention_mask is not None:
        if attention_mask.dim() != 2 or tuple(attention_mask.shape) != (batch, key_length):
            raise ValueError(
                "decoder_attention_mask must have shape (batch, past + new decoder tokens) = "
                f"{(batch, key_length)}, got {tuple(attention_mask.shape)}; a mask is never "
                "broadcast over the batch."
            )
        # A query always sees itself, so a padded query gets no all-masked row (which would
        # give NaN).
        mask = (mask & attention_mask.bool()[:, None, None, :]) | (
            query_positions == torch.arange(key_length, device=device)
        )
    return mask


class FusedLinear(nn.Linear):
    """`blocks` projections of the same input stored as one (blocks * out, in) matrix, so they cost
    one matmul; each block is initialised as its own Xavier matrix, as if the projections were
    separate."""

    def __init__(self, in_features: int, out_features: int, blocks: int):
        super().__init__(in_features, blocks * out_features)
        self.blocks = blocks


def fold_rows(query: torch.Tensor, rows_per_sentence: int) -> torch.Tensor:
    """(sentences * g, H, Tq, e) -> (sentences, H, g * Tq, e): the queries of a sentence's g
    consecutive rows (its beams) as one sequence, attending over the sentence's one copy of
    the keys."""
    return query.unflatten(0, (-1, rows_per_sentence)).transpose(1, 2).flatten(2, 3)


def unfold_rows(states: torch.Tensor, rows_per_sentence: int) -> torch.Tensor:
    """The inverse of `fold_rows`: (sentences, H, g * Tq, e) -> (sentences * g, H, Tq, e)."""
    return states.unflatten(2, (rows_per_sentence, -1)).transpose(1, 2).flatten(0, 1)


# At a decoding step (one new position per row) over a batch of many rows and heads, PyTorch's CPU
# SDPA kernel costs more than its two matrix products: 1.15-2.1x the time of
# `decoding_step_attention` for 32-128 rows of 8 heads over 12-24 keys on an AVX2 CPU, while for 1-8
# rows SDPA is faster (experiments/speed/decoding_step_kernels.txt). rows x heads from which a CPU
# decoding step uses `decoding_step_attention`
DECODING_STEP_MIN_QUERIES = 256


def is_decoding_step(query: torch.Tensor, hidden_states: torch.Tensor) -> bool:
    """One new position per decoder row, on the CPU, over enough rows x heads for the matrix
    products to win; never inside torch.compile, whose graph keeps SDPA as one kernel but turns a
    batched product with one query row into a loop of its own (compiled steps with SDPA compiled
    in half the time and ran faster)."""
    # not compiling, asked first: a comparison of the dynamic rows would be a guard of the graph
    return (
        not torch.compiler.is_compiling()
        and hidden_states.shape[1] == 1
        and query.device.type == "cpu"
        and query.shape[0] * query.shape[1] >= DECODING_STEP_MIN_QUERIES
    )


def attention_weights(query, keys, attention_mask=None) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_head)) (Vaswani et al. 2017, Eq. 1), the scores scaled and masked in
    place: (B, H, Tq, Tk), 0 for a row with every key masked (as SDPA). query (B, H, Tq, e), keys
    (B, H, Tk, e)."""
    # (B, H, Tq, Tk)
    scores = torch.matmul(query, keys.transpose(-1, -2)).mul_(query.shape[-1] ** -0.5)
    if attention_mask is not None:
        scores.masked_fill_(~attention_mask, -math.inf)
    # not in place: softmax's backward reads its output
    return scores.softmax(dim=-1).nan_to_num(0.0)


def sdpa(query, keys, values, attention_mask=None, dropout: float = 0.0) -> torch.Tensor:
    """`F.scaled_dot_product_attention`; on a CPU under bfloat16 autocast computed in float32 and
    cast back to bfloat16: PyTorch's CPU kernels took 1.8-2.5x longer in bfloat16 than in float32 at
    a base training step's attention shapes (the float32 result is the more precise one)."""
    if (
        query.dtype == torch.bfloat16
        and query.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
    ):
        with torch.autocast("cpu", enabled=False):
            attended = F.scaled_dot_product_attention(
                query.float(),
                keys.float(),
                values.float(),
                attn_mask=attention_mask,
                dropout_p=dropout,
            )
        return attended.to(query.dtype)
    return F.scaled_dot_product_attention(
        query, keys, values, attn_mask=attention_mask, dropout_p=dropout
    )


def decoding_step_attention(query, keys, values, attention_mask=None):
    """Attention as two batched matrix products, what SDPA returns. values (B, H, Tk, e)."""
    return torch.matmul(attention_weights(query, keys, attention_mask), values)  # (B, H, Tq, e)


def fit_static_layer(cache: Cache, layer_idx: int, rows: int) -> None:
    """transformers 5.4 to 5.12 keep a static cache from one generate() call to the next where the
    decoder has as many rows (5.24 builds a new one each call); the cross-attention's rows may
    differ (one per sentence where the beams share its keys, one per beam where not): a static layer
    of another number is allocated again."""
    layer = cache.layers[layer_idx] if layer_idx < len(cache.layers) else None
    if isinstance(layer, StaticLayer) and layer.is_initialized and layer.keys.shape[0] != rows:
        layer.is_initialized = False  # its next update allocates it for `rows`


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over `num_heads` heads (Vaswani et al. 2017, §3.2).

    Self-attention projects queries, keys and values with one matmul (`qkv_proj`) and caches keys
    and values; cross-attention projects the encoder output's keys and values (`kv_proj`) once per
    generation. SDPA computes it, but for "eager", `output_attentions` and CPU decoding steps over
    many rows (`is_decoding_step`). Cross-attention keys of fewer rows than the queries are shared
    by a sentence's consecutive rows (its beams): each sentence's queries attend as one sequence
    over its one copy of the keys.
    """

    def __init__(
        self,
        config: TranslationTransformerConfig,
        num_heads: int,
        layer_idx: int,
        is_cross_attention: bool = False,
    ):
        super().__init__()
        d_model = config.d_model
        self.config = config  # read at call time: `model.set_attn_implementation()` changes it
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.dropout, self.layer_idx, self.is_cross_attention = (
            config.attention_dropout,
            layer_idx,
            is_cross_attention,
        )
        if is_cross_attention:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = FusedLinear(d_model, d_model, blocks=2)
        else:
            self.qkv_proj = FusedLinear(d_model, d_model, blocks=3)
        self.out_proj = nn.Linear(d_model, d_model)

    # (B, T, parts * d) -> parts x (B, H, T, d/H)
    def split_heads(self, x: torch.Tensor, parts: int = 1):
        return (
            x.unflatten(-1, (parts, self.num_heads, self.head_dim)).permute(2, 0, 3, 1, 4).unbind(0)
        )

    def cross_keys_values(self, encoder_output: torch.Tensor, cache: EncoderDecoderCache | None):
        if cache is not None and cache.is_updated.get(self.layer_idx):
            cached = cache.cross_attention_cache.layers[self.layer_idx]
            return cached.keys, cached.values
        keys, values = self.split_heads(self.kv_proj(encoder_output), 2)  # (B, H, S, d/H) each
        if cache is not None:
            fit_static_layer(cache.cross_attention_cache, self.layer_idx, keys.shape[0])
            keys, values = cache.cross_attention_cache.update(keys, values, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return keys, values

    def queries_keys_values(
        self, hidden_states, key_value_states, cache: EncoderDecoderCache | None
    ):
        if self.is_cross_attention:
            (query,) = self.split_heads(self.q_proj(hidden_states))
            return (query, *self.cross_keys_values(key_value_states, cache))
        query, keys, values = self.split_heads(self.qkv_proj(hidden_states), 3)
        if cache is not None:
            keys, values = cache.self_attention_cache.update(keys, values, self.layer_idx)
        return query, keys, values

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        key_value_states=None,
        past_key_values=None,
        output_attentions=False,
    ):
        query, keys, values = self.queries_keys_values(
            hidden_states, key_value_states, past_key_values
        )  # (B, H, T, d/H)
        # > 1: beams sharing their sentence's cross-attention keys; an empty batch has no sentences
        # to share them
        rows_per_sentence = query.shape[0] // keys.shape[0] if keys.shape[0] else 1
        if rows_per_sentence > 1:
            query = fold_rows(query, rows_per_sentence)  # (sentences, H, beams * Tq, d/H)
        dropout = self.dropout if self.training else 0.0
        # SDPA does not return the weights
        if output_attentions or self.config._attn_implementation == "eager":
            attended, weights = self.eager_attention(query, keys, values, attention_mask, dropout)
        elif dropout == 0.0 and is_decoding_step(query, hidden_states):
            weights = None
            attended = decoding_step_attention(query, keys, values, attention_mask)
        else:
            weights = None
            attended = sdpa(query, keys, values, attention_mask, dropout)
        if rows_per_sentence > 1:
            attended = unfold_rows(attended, rows_per_sentence)
            weights = unfold_rows(weights, rows_per_sentence) if weights is not None else None
        return self.out_proj(attended.transpose(1, 2).flatten(2)), weights  # (B, Tq, d)

    def eager_attention(self, query, keys, values, attention_mask, dropout: float):
        """softmax(Q K^T / sqrt(d_head)) V written out; returns the output and the weights (B, H,
        Tq, Tk)."""
        weights = F.dropout(attention_weights(query, keys, attention_mask), dropout, self.training)
        return weights @ values, weights


# 2. The layer interface ---------------------------------------------------------------------------
