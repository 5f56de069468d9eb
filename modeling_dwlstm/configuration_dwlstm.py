"""Configurations of the modeling_dwlstm family.

Every member is the same encoder-decoder NMT Transformer skeleton (``TranslationTransformerConfig``:
tied joint-BPE embeddings scaled by sqrt(d_model), sinusoidal or learned positions, multi-head
attention, a final LayerNorm on each stack, label-smoothed cross-entropy). Members differ only in how
layers are connected, and each adds its own fields in a small subclass:

- ``DwLstmConfig`` (``dwlstm``): depth-wise LSTM, Xu et al. (papers 000/001; SPEC §2).
- ``ResidualTransformerConfig`` (``dwlstm-residual``): post-/pre-norm residual Transformer (003 §2).
- ``HighwayTransformerConfig`` (``dwlstm-highway``): self-dependency units, Chai et al. (004).
- ``DepthWiseRnnConfig`` (``dwlstm-rnn``): the depth-wise LSTM without gates or cell (001 Table 2).
- ``DlclConfig`` (``dwlstm-dlcl``): dynamic linear combination of layers (003 §3).
- ``TransparentAttentionConfig`` (``dwlstm-ta``): transparent attention (Bapna et al. 2018).

Field names follow Marian's config. Defaults are the Transformer-base setting of the papers
(d_model 512, ffn_dim 2048, 8 heads, 6+6 layers, dropout 0.1) with the joint vocabulary of 001's
WMT14 En-De setup (35,603 tokens). Invalid values raise ``ValueError`` naming the field.
"""

import difflib
from dataclasses import dataclass, field, fields

from transformers import PreTrainedConfig


def _check_choice(name: str, value, allowed: tuple):
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {list(allowed)}, got {value!r}.")


def _check_int(name: str, value, minimum: int):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")


def _check_probability(name: str, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a number in [0, 1), got {value!r}.")


@dataclass(frozen=True)
class FamilyMember:
    """Everything the package says about one member, declared once, as `MEMBER` in its modeling file.
    `FAMILY` (Auto registration), `paper_configs` (hub_configs/) and the model card read it."""

    config_class: type
    model_class: type
    generation_class: type
    name: str  # the card's "A {name} translation model"
    citations: tuple[str, ...]  # BibTeX entries
    card_fields: tuple[str, ...] = ()  # the member's own config fields, shown after the shared ones
    presets: dict = field(default_factory=dict)  # hub_configs/ name -> config fields (paper_configs)
    hub_depths: dict = field(default_factory=dict)  # preset -> [(size, encoder, decoder layers)]; default every size x depth


class TranslationTransformerConfig(PreTrainedConfig):
    r"""
    The part every family member shares: an encoder-decoder Transformer for translation.

    Args:
        vocab_size (`int`, defaults to 35603): size of the joint (source + target) vocabulary.
        d_model (`int`, defaults to 512): width of every layer.
        encoder_layers / decoder_layers (`int`, defaults to 6): depth of each stack.
        encoder_attention_heads / decoder_attention_heads (`int`, defaults to 8).
        ffn_dim (`int`, defaults to 2048): d_ff, the inner width of the residual FFN and of the
            depth-wise LSTM's hidden computation.
        activation_function (`str`, defaults to "relu"): activation of the residual FFN.
        dropout (`float`, defaults to 0.1): on embeddings and on every sub-layer output.
        attention_dropout (`float`, defaults to 0.0): on attention probabilities.
        activation_dropout (`float`, defaults to 0.0): after the activation inside FFN / LSTM hidden.
        max_position_embeddings (`int`, defaults to 1024): longest sequence the positions cover.
        position_embedding_type (`str`, defaults to "sinusoidal"): "sinusoidal" (Vaswani et al.) or "learned".
        scale_embedding (`bool`, defaults to True): multiply token embeddings by sqrt(d_model).
        label_smoothing (`float`, defaults to 0.1): of the training cross-entropy (papers: 0.1).
        language_pairs (`list[str]`, defaults to []): translation directions the model was trained for,
            e.g. ["en-de"]; each becomes a `translation_en_to_de` task of the saved model's pipeline.
        pad_token_id / bos_token_id / eos_token_id / decoder_start_token_id: special token ids; the
            decoder starts from `decoder_start_token_id` (defaults to the pad id, as in Marian).
        tie_word_embeddings (`bool`, defaults to True): share the output projection with the embeddings.
    """

    model_type = "dwlstm-base"
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 35603
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    max_position_embeddings: int = 1024
    position_embedding_type: str = "sinusoidal"
    scale_embedding: bool = True
    label_smoothing: float = 0.1
    language_pairs: list[str] | None = None
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = None
    tie_word_embeddings: bool = True
    use_cache: bool = True
    is_encoder_decoder: bool = True

    def __post_init__(self, **kwargs):
        self._reject_misspelled_fields(kwargs)
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.pad_token_id
        if self.language_pairs is None:
            self.language_pairs = []
        super().__post_init__(**kwargs)
        self.check_values()

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """Refuse a checkpoint of another family member: loading it would silently re-initialise weights."""
        stored_type = config_dict.get("model_type")
        if stored_type and stored_type != cls.model_type:
            raise ValueError(
                f"This checkpoint is a {stored_type!r} model, but {cls.__name__} builds {cls.model_type!r} models. "
                f"Load it with AutoModelForSeq2SeqLM / AutoConfig, or the classes registered for {stored_type!r}."
            )
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def _reject_misspelled_fields(cls, kwargs: dict):
        """`share_gate="none"` would otherwise be stored as an unused attribute and silently ignored."""
        known = [f.name for f in fields(cls)]
        for key in kwargs:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
            if close and key not in known:
                raise ValueError(f"Unknown config field `{key}`; did you mean `{close[0]}`?")

    def check_values(self):
        """Raise a ValueError naming the first field whose value the model cannot be built with."""
        for name in ("vocab_size", "d_model", "encoder_attention_heads", "decoder_attention_heads", "ffn_dim",
                     "encoder_layers", "decoder_layers", "max_position_embeddings"):
            _check_int(name, getattr(self, name), 1)
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            _check_probability(name, getattr(self, name))
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                raise ValueError(f"`d_model` ({self.d_model}) must be divisible by `{name}` ({getattr(self, name)}).")
        _check_choice("position_embedding_type", self.position_embedding_type, ("sinusoidal", "learned"))
        _check_choice("activation_function", self.activation_function, ("relu", "gelu", "tanh", "silu"))
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.vocab_size):
                raise ValueError(f"`{name}` must be None or an id in [0, vocab_size={self.vocab_size}), got {value!r}.")
        if self.pad_token_id is None:
            raise ValueError("`pad_token_id` must be set: padding and the decoder start depend on it.")
        for pair in self.language_pairs:
            if not isinstance(pair, str) or pair.count("-") != 1 or "" in pair.split("-"):
                raise ValueError(f"`language_pairs` entries look like 'en-de', got {pair!r}.")

    # One entry per connection style; the modeling code picks layer classes by these names.
    @property
    def encoder_layer_type(self) -> str:
        raise NotImplementedError

    @property
    def decoder_layer_type(self) -> str:
        raise NotImplementedError

    # Connections across a stack (modeling_dwlstm.DEPTH_CONNECTION_CLASSES / CROSS_ATTENTION_SOURCE_CLASSES):
    # by default layer l+1 reads layer l, and every decoder layer attends over the encoder's output.
    @property
    def depth_connection_type(self) -> str:
        return "previous_layer"

    @property
    def cross_attention_source_type(self) -> str:
        return "top_encoder_layer"


class DepthWiseConfig(TranslationTransformerConfig):
    r"""
    The fields the depth-wise LSTM and the depth-wise RNN share: their hidden module and decoder merge
    (not a member itself; `DwLstmConfig` and `DepthWiseRnnConfig` extend it).

    Args:
        lstm_hidden (`str`, defaults to "glu"): "linear" (001 Eq. 5), "ffn" (000 Eq. 8) or "glu" (001 Eq. 6).
        lstm_activation (`str`, defaults to "gelu"): `act` of "linear" and "ffn" ("gelu" or "tanh").
        share_hidden (`bool`, defaults to False): one hidden module per stack instead of per layer.
        decoder_merge (`str`, defaults to "add"): how a decoder layer merges its self-attention result s
            and cross-attention result x: s + x ("add") or [s; x] ("concat", a 3d input); see the members.
    """

    lstm_hidden: str = "glu"
    lstm_activation: str = "gelu"
    share_hidden: bool = False
    decoder_merge: str = "add"

    decoder_merges = ("add", "concat")

    def check_values(self):
        super().check_values()
        _check_choice("lstm_hidden", self.lstm_hidden, ("linear", "ffn", "glu"))
        _check_choice("lstm_activation", self.lstm_activation, ("gelu", "tanh"))
        if not isinstance(self.share_hidden, bool):
            raise ValueError(f"`share_hidden` must be True or False, got {self.share_hidden!r}.")
        if self.lstm_hidden == "glu" and self.ffn_dim % 2:
            raise ValueError(f"`ffn_dim` must be even for lstm_hidden='glu' (GLU halves it), got {self.ffn_dim}.")
        _check_choice("decoder_merge", self.decoder_merge, self.decoder_merges)


class DwLstmConfig(DepthWiseConfig):
    r"""
    Transformer with depth-wise LSTMs (Xu et al., papers 000 and 001; SPEC §2).

    Residual connections and the FFN sub-layer are replaced by a layer-normalised LSTM running over
    depth: layer l turns its attention result x and the previous state (o, c) into

        i, f, g = sigmoid(LN_k(W_k [x; o] + b_k))   for k = input, forget, output   (per-gate LN)
        h       = hidden([x; o])
        c_l     = f * c + i * h
        o_l     = g * c_l                            (no tanh on the cell)

    with o_0 = c_0 = the embedded input.

    Args:
        lstm_hidden (`str`, defaults to "glu"): the hidden computation h.
            "linear" h = act(LN(W_h [x;o] + b_h))                      (001 Eq. 5, W_h: 2d -> d)
            "ffn"    h = W_2 act(LN(W_1 [x;o] + b_1)) + b_2            (000 Eq. 8, W_1: 2d -> d_ff)
            "glu"    h = W_2 GLU(LN(W_1 [x;o] + b_1)) + b_2            (001 Eq. 6, GLU halves d_ff)
        lstm_activation (`str`, defaults to "gelu"): `act` of "linear" and "ffn" ("gelu" or "tanh");
            "glu" uses its own sigmoid gate and no other activation.
        share_gates (`str`, defaults to "per_stack"): one gate module for every layer of both stacks
            ("global"), one per stack ("per_stack", 001's default) or one per layer ("none").
            With `decoder_merge="concat"` the decoder's gates read a 3d input and cannot be shared
            with the encoder's, so "global" then means one module per stack.
        share_hidden (`bool`, defaults to False): one hidden module per stack instead of per layer.
        decoder_merge (`str`, defaults to "add"): how a decoder layer combines its self-attention
            result s and cross-attention result x before the LSTM: "add" (s + x), "concat" ([s; x],
            a 3d LSTM input) or "two_lstm" (001 Fig. 3b: one depth-wise LSTM after the self-attention
            and another after the cross-attention; each has its own hidden module unless `share_hidden`).

    Dropout (our choice; the papers leave it to their toolkit): `dropout` on attention results before
    they enter the LSTM, `activation_dropout` between the two matrices of the "ffn" and "glu" hidden.
    """

    model_type = "dwlstm"

    share_gates: str = "per_stack"

    decoder_merges = ("add", "concat", "two_lstm")

    def check_values(self):
        super().check_values()
        _check_choice("share_gates", self.share_gates, ("global", "per_stack", "none"))

    @property
    def encoder_layer_type(self) -> str:
        return "depthwise_lstm"

    @property
    def decoder_layer_type(self) -> str:
        return "depthwise_lstm_two" if self.decoder_merge == "two_lstm" else "depthwise_lstm"


class ResidualTransformerConfig(TranslationTransformerConfig):
    r"""
    The residual Transformer baseline (Vaswani et al.; Wang et al. 003 §2, Eqs. 3-4).

    Args:
        norm_position (`str`, defaults to "post"):
            "post"  x = LN(x + F(x)) after every sub-layer (003 Eq. 3);
            "pre"   x = x + F(LN(x)) (003 Eq. 4), with the stack's final LayerNorm on its output.
            Both end each stack with a LayerNorm, as the skeleton does for every member (SPEC §1); for
            post-norm that final LayerNorm follows the last sub-layer's own, which 003 Eq. 3 does not have
            (it adds 2 x 2d parameters and an affine map).
    """

    model_type = "dwlstm-residual"

    norm_position: str = "post"

    def check_values(self):
        super().check_values()
        _check_choice("norm_position", self.norm_position, ("post", "pre"))

    @property
    def encoder_layer_type(self) -> str:
        return f"{self.norm_position}_norm"

    @property
    def decoder_layer_type(self) -> str:
        return f"{self.norm_position}_norm"


class HighwayTransformerConfig(TranslationTransformerConfig):
    r"""
    Highway Transformer (Chai et al., paper 004; SPEC §3): the post-norm residual Transformer with a
    self-gated branch on the sub-layers (self-attention, cross-attention, FFN) of both stacks. With
    T(X) = Psi(X W_1 + b_1) and f(X) = X W_2 + b_2 (one pair of d x d projections per gated sub-layer
    F, the gate reading the sub-layer's input X):

        "sdu"           U = LN(X + F(X) + T(X) * f(X))                       (004 Eqs. 21-24)
        "highway_gate"  U = LN((1 - T(X)) * X + T(X) * f(X) + F(X))           (004 Eqs. 26-29)
        "gated_mhdpa"   U = LN(X + (1 - T(X)) * F(X) + T(X) * f(X))           (004 Eqs. 30-31)

    Args:
        sdu_gate (`str`, defaults to "sigmoid"): Psi of the "sdu" variant, "sigmoid" or "tanh" (004 Eq. 21).
            The two highway variants use the sigmoid transform gate of 004 Eq. 26 (their carry gate is
            1 - T), so they accept only "sigmoid".
        highway_variant (`str`, defaults to "sdu"): "sdu", "highway_gate" or "gated_mhdpa" (above).
        sdu_layers (`int` or `None`, defaults to None): None gates every layer of both stacks (SPEC §4's
            30 gated sub-layers at 6+6); an integer k gates only layers 1..k of each stack (004 Tables
            5-6, e.g. "L1-2"), the layers above are plain post-norm residual layers. A stack with fewer
            than k layers is gated throughout; k must be between 1 and the deeper stack's depth.

    Dropout (our choice): `dropout` on F(X) and on the gated branch T(X) * f(X), as on every sub-layer
    output of the residual model; nothing is dropped from the carried input X.
    """

    model_type = "dwlstm-highway"

    sdu_gate: str = "sigmoid"
    highway_variant: str = "sdu"
    sdu_layers: int | None = None

    def check_values(self):
        super().check_values()
        _check_choice("sdu_gate", self.sdu_gate, ("sigmoid", "tanh"))
        _check_choice("highway_variant", self.highway_variant, ("sdu", "highway_gate", "gated_mhdpa"))
        if self.highway_variant != "sdu" and self.sdu_gate != "sigmoid":
            raise ValueError(
                f"`sdu_gate={self.sdu_gate!r}` applies to highway_variant='sdu' only: {self.highway_variant!r} uses "
                "the sigmoid transform gate T of 004 Eq. 26 (its carry gate is 1 - T). Set sdu_gate='sigmoid'."
            )
        deepest = max(self.encoder_layers, self.decoder_layers)
        if self.sdu_layers is not None:
            _check_int("sdu_layers", self.sdu_layers, 1)
            if self.sdu_layers > deepest:
                raise ValueError(
                    f"`sdu_layers` gates layers 1..k and must be at most the deeper stack's {deepest} layers, got "
                    f"{self.sdu_layers}; use sdu_layers=None to gate every layer."
                )

    def is_gated(self, layer_idx: int) -> bool:
        """Whether layer `layer_idx` (0-based, either stack) has the gated branch."""
        return self.sdu_layers is None or layer_idx < self.sdu_layers

    @property
    def encoder_layer_type(self) -> str:
        return "highway"

    @property
    def decoder_layer_type(self) -> str:
        return "highway"


class DepthWiseRnnConfig(DepthWiseConfig):
    r"""
    The depth-wise RNN ablation of Xu et al. (001 Table 2; SPEC §2.4): the depth-wise LSTM without
    gates or cell. Layer l turns its attention result x and the previous layer's output into

        o_l = hidden([x ; o_{l-1}])          o_0 = the embedded input

    with the depth-wise LSTM's hidden module (`DwLstmConfig`'s field names and variants) and the same
    wiring: encoder x = SelfAttn(o_{l-1}); decoder s = MaskedSelfAttn(o_{l-1}),
    x' = CrossAttn(s + o_{l-1}, enc), x = merge(s, x') (SPEC §2.3). Defaults reproduce 001 Table 2's
    68.67M parameters (6+6 base, glu hidden with d_ff 2048, one hidden module per layer).

    Args:
        lstm_hidden (`str`, defaults to "glu"): "linear" (001 Eq. 5), "ffn" (000 Eq. 8) or "glu" (001 Eq. 6).
        lstm_activation (`str`, defaults to "gelu"): `act` of "linear" and "ffn" ("gelu" or "tanh").
        share_hidden (`bool`, defaults to False): one hidden module per stack instead of per layer.
        decoder_merge (`str`, defaults to "add"): s + x' ("add") or [s; x'] ("concat", a 3d input).
    """

    model_type = "dwlstm-rnn"

    @property
    def encoder_layer_type(self) -> str:
        return "depthwise_rnn"

    @property
    def decoder_layer_type(self) -> str:
        return "depthwise_rnn"
class DlclConfig(ResidualTransformerConfig):
    r"""
    Dynamic linear combination of layers, DLCL (Wang et al. 003 §3, Eqs. 7-9), on the residual layers.

    Both stacks keep every layer output y_0 .. y_l (y_0 = the embeddings) and feed layer l+1
    a weighted sum of them, with one scalar W^{(l+1)}_k per (consumer, earlier layer) pair, separately
    for encoder and decoder; the stack output (before the final LayerNorm) is one more consumer, so
    each stack has an (L+1) x (L+1) lower-triangular weight matrix (003 Fig. 5):

        pre-norm    x_{l+1} = sum_k W_k LN_k(y_k)       (Eq. 8; one LayerNorm per stored output)
        post-norm   x_{l+1} = LN_{l+1}(sum_k W_k y_k)   (Eq. 9; one LayerNorm per consumer; for the
                                                          stack output the stack's final LayerNorm is it)

    Only complete layers are combined (003 §5: "we only combine the output of a complete layer"), so
    cached decoding works position by position as for the residual model.

    Args:
        norm_position (`str`, defaults to "pre"): "pre" or "post", as for the residual model; 003's
            DLCL systems (DLCL-30L, Fig. 5, the ablations of Table 6) are pre-norm.
        dlcl_weights (`str`, defaults to "learned"): "learned" (initialised to the average 1/(l+1)),
            or the fixed ablations of 003 Table 6: "one" (W = 1) and "average" (W = 1/(l+1)).
        dlcl_layer_norm (`bool`, defaults to True): the LayerNorms of Eqs. 8/9; False is Table 6's
            "- layer norm." ablation (then DLCL with one-hot weights on the previous layer is exactly
            the residual model).
    """

    model_type = "dwlstm-dlcl"

    norm_position: str = "pre"
    dlcl_weights: str = "learned"
    dlcl_layer_norm: bool = True

    def check_values(self):
        super().check_values()
        _check_choice("dlcl_weights", self.dlcl_weights, ("learned", "one", "average"))
        if not isinstance(self.dlcl_layer_norm, bool):
            raise ValueError(f"`dlcl_layer_norm` must be True or False, got {self.dlcl_layer_norm!r}.")

    @property
    def depth_connection_type(self) -> str:
        return "dlcl"


class TransparentAttentionConfig(ResidualTransformerConfig):
    r"""
    Transparent attention (Bapna et al. 2018, "Training Deeper Neural Machine Translation Models with
    Transparent Attention"; the TA baseline of 001 Table 6) on the residual layers.

    Decoder layer i cross-attends over its own softmax-weighted combination of all encoder layer
    outputs instead of the top one only:

        memory_i = sum_j softmax(s_i)_j e_j,   j = 0 .. L_enc

    with e_0 the embeddings, e_1 .. e_{L-1} the layer outputs and e_L the encoder's final output
    (after its LayerNorm), and s a learned (decoder_layers, encoder_layers + 1) matrix initialised
    to zero (every layer weighted equally at the start).

    Args:
        norm_position (`str`, defaults to "post"): the residual layers' normalisation. Post-norm by
            default: transparent attention was proposed to train deep post-norm encoders, and 003
            Table 2 compares it among the post-norm systems.
    """

    model_type = "dwlstm-ta"

    @property
    def cross_attention_source_type(self) -> str:
        return "transparent"


__all__ = [
    "FamilyMember",
    "TranslationTransformerConfig",
    "DepthWiseConfig",
    "DwLstmConfig",
    "ResidualTransformerConfig",
    "HighwayTransformerConfig",
    "DepthWiseRnnConfig",
    "DlclConfig",
    "TransparentAttentionConfig",
]
