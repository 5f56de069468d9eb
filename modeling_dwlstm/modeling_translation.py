"""The encoder-decoder Transformer every family member shares: the skeleton, which knows no member.

Read top to bottom: 1. building blocks (positions, embeddings, masks, attention:
building_blocks.py); 2. the layer interface (a layer maps a `LayerState` to a `LayerState`, so one
layer can replace another: Xu et al. 2020, §4); 3. connections across a stack (the *depth
connection* that feeds each layer, the *cross-attention source* of each decoder layer); 4. the
encoder and decoder stacks; 5. the Hugging Face models, which a member subclasses to name its parts:

    class DwLstmModel(TranslationTransformerModel):
        config_class = DwLstmConfig
        encoder_layer_class = DepthWiseLstmEncoderLayer
        decoder_layer_class = DepthWiseLstmDecoderLayer

The members' equations, and our choices where the papers are silent: the repository's
docs/members.md.
"""

import dataclasses
import os
from dataclasses import dataclass, fields
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.utils import logging

from .building_blocks import TranslationEmbeddings, attach_shared, causal_mask, padding_mask
from .configuration_translation import TranslationTransformerConfig
from .generation_translation import SHORTLIST_FILE, Shortlist, load_shortlist, translation_generate
from .language_aware import make_language_transform, make_layer_norm, make_target_language
from .lora import LoraReachCheck
from .loss import IGNORE_INDEX, linear_label_smoothed_cross_entropy
from .precision import has_quantized_projections, int8_class, packed_class

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "silu": nn.SiLU}

logger = logging.get_logger(__name__)

# transformers 5.24 renamed the KV cache `past_key_values` to `cache` (forward()'s keyword, the
# outputs' field). Only here: the forwards take either keyword (`cache_argument`) and return the
# installed version's field.
CACHE_FIELD = (
    "cache" if "cache" in {field.name for field in fields(Seq2SeqLMOutput)} else "past_key_values"
)


def cache_argument(past_key_values: Cache | None, cache: Cache | None) -> Cache | None:
    """The cache a forward was given, under either name (`cache` is the one generate() passes from
    5.24 on)."""
    if past_key_values is not None and cache is not None and past_key_values is not cache:
        raise ValueError(
            "Pass the cache once: as `cache` or as `past_key_values` (its name before "
            "transformers 5.24)."
        )
    return past_key_values if cache is None else cache


# 1. Building blocks -------------------------------------------------------------------------------


def forward_replaced_or_hooked(module: nn.Module) -> bool:
    """Whether calling `module` may run more than its class's forward: a forward set on the
    instance, or forward hooks of its own or global ones. torch keeps the hooks in these dicts, with
    no public accessor; where a torch release keeps them elsewhere, the answer is yes."""
    hooks = [getattr(module, name, None) for name in ("_forward_hooks", "_forward_pre_hooks")] + [
        getattr(nn.modules.module, name, None)
        for name in ("_global_forward_hooks", "_global_forward_pre_hooks")
    ]
    return "forward" in vars(module) or any(found is None or len(found) for found in hooks)


def shift_tokens_right(
    labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int
) -> torch.Tensor:
    """Teacher-forcing decoder input: labels shifted right behind the start token, -100 read as
    padding."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class SharedModules:
    """Modules several layers use, built by the first layer that asks (which then owns them)."""

    def __init__(self):
        self.modules = {}

    def get(self, key: tuple, build) -> tuple[nn.Module, bool]:
        if key in self.modules:
            return self.modules[key], False
        self.modules[key] = build()
        return self.modules[key], True


class LayerState(NamedTuple):
    """What one layer hands the next."""

    output: torch.Tensor  # (batch, length, d_model): the layer output the next layer attends over
    # (batch, length, d_model): depth-wise LSTM cell; None for residual layers
    cell: torch.Tensor | None = None


class LayerOutput(NamedTuple):
    """What a layer returns: its new state and its attention weights (None unless asked for). Flat,
    not nested, so that a reentrant checkpoint function tracks the tensors in it."""

    output: torch.Tensor
    cell: torch.Tensor | None = None
    self_attention: torch.Tensor | None = None
    cross_attention: torch.Tensor | None = None


class TranslationLayer(GradientCheckpointingLayer):
    """The base of every encoder and decoder layer; tensors positional, for checkpoint functions:

        encoder layer:  layer(hidden_states, cell, attention_mask=..., output_attentions=...)
        decoder layer:  layer(hidden_states, cell, encoder_hidden_states, attention_mask=..., encoder_attention_mask=...,
                              past_key_values=..., output_attentions=...)
        -> LayerOutput(output, cell, self-attention weights[, cross-attention weights])

    `hidden_states` (B, T, d): what the depth connection made of the layers below (o_{l-1} by
    default); `cell`: the depth-wise LSTM's c_{l-1}, None for the residual members. `initial_state`
    is the state entering the first layer."""  # noqa: E501

    def initial_state(self, embeddings: torch.Tensor) -> LayerState:
        return LayerState(output=embeddings)


# 3. Connections across a stack --------------------------------------------------------------------


class LayerCombination(nn.Module):
    """Scalar weights that mix several layers' outputs (DLCL, transparent attention). `weights` is a
    parameter when learned and a buffer when fixed; initialised to `initial_weights()`."""

    def initial_weights(self) -> torch.Tensor:
        raise NotImplementedError

    def init_parameters(self):
        init.copy_(self.weights, self.initial_weights())


class PreviousLayer(nn.Module):
    """The default depth connection: layer l+1 reads layer l's output as it is (residual and
    depth-wise LSTM stacks). A depth connection decides what a stack remembers of the layer outputs
    y_0 .. y_c seen so far (`remember` returns the new history, a list passed along by the stack)
    and forms from it the input of consumer c: layer c+1, or the stack output for c = L."""

    def __init__(self, config: TranslationTransformerConfig, num_layers: int):
        super().__init__()

    def remember(self, history: list[LayerState], state: LayerState) -> list[LayerState]:
        return [state]  # only the latest output is ever read

    def forward(self, history: list[LayerState], consumer: int) -> LayerState:
        return history[-1]


class TopEncoderLayer(nn.Module):
    """The default cross-attention source: every decoder layer attends over the encoder's
    final output."""

    # the model asks the encoder for every layer's output when True
    reads_all_encoder_layers = False

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__()

    def encoder_states(self, encoder_outputs: BaseModelOutput) -> torch.Tensor:
        """What the model hands the decoder as `encoder_hidden_states`."""
        return encoder_outputs.last_hidden_state

    def forward(
        self, encoder_states: torch.Tensor, layer_idx: int, past_key_values=None
    ) -> torch.Tensor | None:
        """The memory decoder layer `layer_idx` cross-attends over, (B, S, d)."""
        return encoder_states


@dataclass
class TranslationEncoderOutput(BaseModelOutput):
    """`BaseModelOutput` plus `layer_outputs` (B, S, encoder_layers + 1, d), `hidden_states`
    stacked, for decoders that read every encoder layer (transparent attention); `target_language`
    (B,), each sentence's, for a language-aware decoder; `rows_per_sentence`, set by generate() when
    a sentence's consecutive decoder rows (its beams) share its one copy of the encoder output.
    Tensors at the top level, so generate() expands them."""

    layer_outputs: torch.FloatTensor | None = None
    target_language: torch.LongTensor | None = None
    rows_per_sentence: int | None = None


# 4. Stacks ----------------------------------------------------------------------------------------


class TranslationStack(nn.Module):
    """Embeddings, `num_layers` layers of `layer_class` joined by a `depth_connection_class`, a
    final LayerNorm. Each stack sets the model's `TargetLanguage` before its layers run (a no-op
    unless it is language-aware)."""

    reads_target_language = True

    def __init__(
        self,
        config: TranslationTransformerConfig,
        num_layers: int,
        *,
        token_embedding: nn.Embedding,
        shared_modules: SharedModules,
        layer_class: type,
        depth_connection_class: type,
    ):
        super().__init__()
        self.config = config
        self.embeddings = TranslationEmbeddings(config, token_embedding)
        self.layers = nn.ModuleList(
            layer_class(config, i, shared_modules) for i in range(num_layers)
        )
        self.depth_connection = depth_connection_class(config, num_layers)
        self.final_layer_norm = make_layer_norm(config, config.d_model)


class TranslationEncoder(TranslationStack):
    """The encoder stack. `exports_layer_outputs`: also return every layer's output stacked
    (transparent attention). With LaLT the decoder attends to H W_t (`hidden_states[-1]` is H)."""

    def __init__(
        self, config: TranslationTransformerConfig, *, exports_layer_outputs: bool = False, **parts
    ):
        super().__init__(config, config.encoder_layers, **parts)
        self.exports_layer_outputs = exports_layer_outputs
        self.language_transform = make_language_transform(config)

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        inputs_embeds=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
    ) -> TranslationEncoderOutput:
        output_attentions = (
            self.config.output_attentions if output_attentions is None else output_attentions
        )
        output_hidden_states = (
            self.config.output_hidden_states
            if output_hidden_states is None
            else output_hidden_states
        )
        hidden = self.embeddings(input_ids=input_ids, inputs_embeds=inputs_embeds)  # (B, S, d)
        # (B,) rows, or None
        target_language = self.target_language.from_source(input_ids, attention_mask)
        mask = padding_mask(attention_mask, hidden.shape[:2])
        state = self.layers[0].initial_state(hidden)
        all_hidden, all_attentions, history = (
            [state.output],
            [],
            self.depth_connection.remember([], state),
        )
        for i, layer in enumerate(self.layers):
            output, cell, weights, _ = layer(
                *self.depth_connection(history, i),
                attention_mask=mask,
                output_attentions=bool(output_attentions),
            )
            state = LayerState(output, cell)
            history = self.depth_connection.remember(history, state)
            all_hidden.append(state.output)
            all_attentions.append(weights)
        output = self.final_layer_norm(self.depth_connection(history, len(self.layers)).output)
        all_hidden[-1] = output  # y_0 .. y_{L-1} and the stack output
        # (B, S, L+1, d)
        layer_outputs = torch.stack(all_hidden, dim=2) if self.exports_layer_outputs else None
        return TranslationEncoderOutput(
            last_hidden_state=self.language_transform(output),
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
            layer_outputs=None if layer_outputs is None else self.language_transform(layer_outputs),
            target_language=target_language,
        )


def state_cached_sentences(cache: EncoderDecoderCache, sentences: int) -> None:
    """Tells torch.compile that the cached cross-attention keys hold one row per sentence, as the
    encoder output does. The step's rows per sentence (its beams: decoder rows // key rows) are then
    a number in the traced graph rather than a ratio of two dynamic sizes, over which a base
    model's beam-search step took minutes of symbolic reasoning to compile instead of seconds."""
    for layer in cache.cross_attention_cache.layers:
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor) and keys.dim() == 4:  # (sentences, heads, S, d/H)
            torch._check(keys.shape[0] == sentences)


class TranslationDecoder(TranslationStack):
    """The decoder stack. With a cache only the new positions are computed (the depth-wise state is
    per position). `encoder_hidden_states`: what `cross_attention_source` (built by the model,
    registered here for its checkpoint names) reads: the encoder output (B, S, d), or every encoder
    layer's output (B, S, L_enc+1, d)."""

    def __init__(
        self, config: TranslationTransformerConfig, *, cross_attention_source: nn.Module, **parts
    ):
        super().__init__(config, config.decoder_layers, **parts)
        self.cross_attention_source = cross_attention_source

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        past_key_values=None,
        inputs_embeds=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        cache=None,
        target_language=None,
        rows_per_sentence: int = 1,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        output_attentions = (
            self.config.output_attentions if output_attentions is None else output_attentions
        )
        output_hidden_states = (
            self.config.output_hidden_states
            if output_hidden_states is None
            else output_hidden_states
        )
        if encoder_hidden_states is None:
            raise ValueError("The decoder needs `encoder_hidden_states` (the encoder's output).")
        self.target_language.use(target_language, rows_per_sentence)  # LaLN's in every layer
        past_key_values = cache_argument(past_key_values, cache)
        if (
            self.training
            and torch.is_grad_enabled()
            and any(getattr(layer, "gradient_checkpointing", False) for layer in self.layers)
        ):
            # A checkpointed layer runs again in the backward pass and would write the cache
            # twice (GradientCheckpointingLayer drops it under its own version's keyword only).
            if use_cache or past_key_values is not None:
                logger.warning_once(
                    "Caching is incompatible with gradient checkpointing: the decoder runs "
                    "without a cache."
                )
            use_cache, past_key_values = False, None
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(
                DynamicCache(config=self.config), DynamicCache(config=self.config)
            )
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        hidden = self.embeddings(
            input_ids=input_ids, inputs_embeds=inputs_embeds, position_offset=past_length
        )  # (B, T, d)
        if encoder_hidden_states.shape[0] * rows_per_sentence != hidden.shape[0]:
            shared = (
                f" x {rows_per_sentence} decoder rows per sentence" if rows_per_sentence > 1 else ""
            )
            raise ValueError(
                f"Decoder batch ({hidden.shape[0]}) and encoder batch ("
                f"{encoder_hidden_states.shape[0]}{shared}) differ."
            )
        self_cache = past_key_values.self_attention_cache if past_key_values is not None else None
        if past_key_values is not None and torch.compiler.is_compiling():
            state_cached_sentences(past_key_values, sentences=encoder_hidden_states.shape[0])
        # a static cache: keys over its whole length
        if self_cache is not None and self_cache.is_compileable:
            self_mask = causal_mask(
                hidden.shape[0],
                hidden.shape[1],
                self_cache.layers[0].max_cache_len,
                attention_mask,
                hidden.device,
                past=past_length,
            )
        else:
            self_mask = causal_mask(
                hidden.shape[0],
                hidden.shape[1],
                past_length + hidden.shape[1],
                attention_mask,
                hidden.device,
            )
        encoder_mask = padding_mask(encoder_attention_mask, encoder_hidden_states.shape[:2])
        state = self.layers[0].initial_state(hidden)
        all_hidden, self_attentions, cross_attentions = [state.output], [], []
        history = self.depth_connection.remember([], state)
        for i, layer in enumerate(self.layers):
            # (B, S, d) or None once cached
            memory = self.cross_attention_source(encoder_hidden_states, i, past_key_values)
            output, cell, self_weights, cross_weights = layer(
                *self.depth_connection(history, i),
                memory,
                attention_mask=self_mask,
                encoder_attention_mask=encoder_mask,
                past_key_values=past_key_values,
                output_attentions=bool(output_attentions),
            )
            state = LayerState(output, cell)
            history = self.depth_connection.remember(history, state)
            all_hidden.append(state.output)
            self_attentions.append(self_weights)
            cross_attentions.append(cross_weights)
        output = self.final_layer_norm(self.depth_connection(history, len(self.layers)).output)
        all_hidden[-1] = output
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=output,
            **{CACHE_FIELD: past_key_values},
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            attentions=tuple(self_attentions) if output_attentions else None,
            cross_attentions=tuple(cross_attentions) if output_attentions else None,
        )


# 5. Hugging Face models ---------------------------------------------------------------------------


class TranslationTransformerPreTrainedModel(LoraReachCheck, PreTrainedModel):
    """Initialisation as in the papers' toolkits: Xavier-uniform projections with zero biases,
    embeddings N(0, d_model^-1/2), LayerNorm 1 and 0; another module with parameters or buffers
    defines `init_parameters()` (with `transformers.initialization`, which skips loaded weights).
    LoRA adapters are checked as PEFT attaches them."""

    config_class = TranslationTransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        if isinstance(module, nn.Linear):
            if not getattr(module.weight, "_is_hf_initialized", False):
                # fused projections: Xavier per block
                for block in module.weight.chunk(getattr(module, "blocks", 1)):
                    nn.init.xavier_uniform_(block)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):  # tokens and learned positions
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5)
            if module.padding_idx is not None and not getattr(
                module.weight, "_is_hf_initialized", False
            ):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        # modules with their own initialisation say so themselves
        if hasattr(module, "init_parameters"):
            module.init_parameters()

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Also name the translation pipeline in `config.json`'s `custom_pipelines` (transformers 5
        dropped the task), so that `pipeline("translation", model=save_directory,
        trust_remote_code=True)` works anywhere, and write the vocabulary shortlist beside the
        weights first (a push carries it) or delete another model's. An int8-prepared model is
        refused before anything is written: it would load back silently wrong."""
        # Imported here: loading a model need not import transformers.pipelines (seconds). The
        # file still travels with the model code (transformers reads imports from the source).
        from .pipeline_translation import translation_pipeline_entries

        if has_quantized_projections(self):
            raise ValueError(
                "This model was quantised to int8 for inference "
                "(precision.prepare_for_inference) and cannot be saved: save the float32 model, "
                "and prepare it again after loading."
            )
        others = {
            task: entry
            for task, entry in (getattr(self.config, "custom_pipelines", None) or {}).items()
            # ours are rewritten: language_pairs may have changed
            if not task.startswith("translation")
        }
        self.config.custom_pipelines = {
            **others,
            **translation_pipeline_entries(self.config.language_pairs),
        }
        shortlist_path = os.path.join(save_directory, SHORTLIST_FILE)
        if getattr(self, "shortlist", None) is not None and kwargs.get("is_main_process", True):
            os.makedirs(save_directory, exist_ok=True)
            self.shortlist.save(shortlist_path)
        elif os.path.isfile(shortlist_path) and kwargs.get("is_main_process", True):
            os.remove(shortlist_path)  # another model's: it would be loaded with this one
        # FSDP2 (`fully_shard`) gives a sharded model a subclass defined in torch: save ours
        # instead.
        sharded_class = type(self)
        self.__class__ = next(
            cls for cls in sharded_class.__mro__ if not cls.__module__.startswith("torch.")
        )
        try:
            super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            self.__class__ = sharded_class


class TranslationTransformerModel(TranslationTransformerPreTrainedModel):
    """The bare encoder-decoder: token ids in, the decoder's last hidden states out. A member names
    its parts: `encoder_layer_class` / `decoder_layer_class` (or `layer_classes(config)`), and where
    it changes them `depth_connection_class` (how a stack feeds each layer) and
    `cross_attention_source_class` (what each decoder layer attends over)."""

    encoder_layer_class: type | None = None
    decoder_layer_class: type | None = None
    depth_connection_class: type = PreviousLayer
    cross_attention_source_class: type = TopEncoderLayer

    @classmethod
    def layer_classes(cls, config: TranslationTransformerConfig) -> tuple[type, type]:
        """(encoder layer class, decoder layer class) for `config`."""
        if cls.encoder_layer_class is None or cls.decoder_layer_class is None:
            raise TypeError(
                f"{cls.__name__} names no layer classes: a family member's model sets "
                "`encoder_layer_class` and `decoder_layer_class` (or overrides `layer_classes`)."
            )
        return cls.encoder_layer_class, cls.decoder_layer_class

    def __init__(self, config: TranslationTransformerConfig):
        super().__init__(config)
        encoder_layer_class, decoder_layer_class = self.layer_classes(config)
        self.shared = nn.Embedding(
            config.vocab_size, config.d_model, padding_idx=config.pad_token_id
        )
        self.target_language = make_target_language(config)
        shared_modules = SharedModules()  # lets share_gates="global" reach across both stacks
        cross_attention_source = self.cross_attention_source_class(config)
        self.encoder = TranslationEncoder(
            config,
            token_embedding=self.shared,
            shared_modules=shared_modules,
            layer_class=encoder_layer_class,
            depth_connection_class=self.depth_connection_class,
            exports_layer_outputs=cross_attention_source.reads_all_encoder_layers,
        )
        self.decoder = TranslationDecoder(
            config,
            token_embedding=self.shared,
            shared_modules=shared_modules,
            layer_class=decoder_layer_class,
            depth_connection_class=self.depth_connection_class,
            cross_attention_source=cross_attention_source,
        )
        self.target_language.share_with(self)
        # The layer classes this config builds: accelerate's FSDP wraps each class named here and
        # refuses one the model lacks. post_init() gives a model holding this one its children's.
        self._no_split_modules = sorted(
            {encoder_layer_class.__name__, decoder_layer_class.__name__}
        )
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

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        past_key_values: Cache | None = None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        cache: Cache | None = None,
    ) -> Seq2SeqModelOutput:
        past_key_values = cache_argument(past_key_values, cache)
        if use_cache is None:
            use_cache = self.config.use_cache
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
            )
        elif isinstance(encoder_outputs, torch.Tensor):
            encoder_outputs = BaseModelOutput(last_hidden_state=encoder_outputs)
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError("Pass `decoder_input_ids` (or `labels`, from which they are derived).")
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=self.decoder.cross_attention_source.encoder_states(
                encoder_outputs
            ),
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            target_language=getattr(encoder_outputs, "target_language", None),
            rows_per_sentence=getattr(encoder_outputs, "rows_per_sentence", None) or 1,
        )
        output = Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_FIELD: getattr(decoder_outputs, CACHE_FIELD)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return output if return_dict is not False else output.to_tuple()


class TranslationTransformerForConditionalGeneration(
    TranslationTransformerPreTrainedModel, GenerationMixin
):
    """The translation model: `base_model_class`, the output projection (tied to the embeddings) and
    the papers' label-smoothed cross-entropy. `generate()` runs `generation_translation`'s loop,
    optionally over the vocabulary `shortlist` saved beside the weights (`use_shortlist=True`). A
    training step computes the loss fused with the output projection (`loss.py`) and returns no
    `logits`; other calls return them as usual."""

    base_model_class: type = TranslationTransformerModel
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
        # the vocabulary shortlist, read and written with the weights
        self.shortlist: Shortlist | None = None

    def get_encoder(self):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear):
        self.lm_head = value

    def decoding_step_projection(self) -> nn.Linear | None:
        """The output projection, where a decoding loop may apply it to `self.model`'s output itself
        (into tensors it reuses from step to step) and get this forward's logits: a bias-free
        nn.Linear (its weight packed for bfloat16, or int8 on the `torch._int_mm` route, or
        neither), and this class's forward, called as it is. None where that would skip something:
        a subclass's own forward, a forward replaced or hooked on the model or the projection
        (accelerate's hooks, `register_forward_hook`), another kind of projection (fbgemm's int8,
        whose output is its own new tensor; LoRA)."""
        projection = self.lm_head
        if (
            type(self).forward is not TranslationTransformerForConditionalGeneration.forward
            or type(projection)
            not in (nn.Linear, packed_class(nn.Linear), int8_class(nn.Linear, "int_mm"))
            or projection.bias is not None
            or forward_replaced_or_hooked(self)
            or forward_replaced_or_hooked(projection)
        ):
            return None
        return projection

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        past_key_values: Cache | None = None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        cache: Cache | None = None,
    ) -> Seq2SeqLMOutput:
        past_key_values = cache_argument(past_key_values, cache)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden = outputs.last_hidden_state  # (B, T, d)
        if (
            labels is not None
            and self.training
            and torch.is_grad_enabled()
            and type(self.lm_head) is nn.Linear
        ):
            # A training step needs the loss, not the logits: the fused loss never materialises them
            # (loss.py).
            logits = None
            loss = linear_label_smoothed_cross_entropy(
                hidden,
                self.lm_head.weight,
                self.loss_targets(labels, hidden.shape[:2]),
                self.config.label_smoothing,
            )
        else:
            logits = self.lm_head(hidden)  # (B, T, vocab)
            loss = self.translation_loss(logits, labels) if labels is not None else None
        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **{k: v for k, v in outputs.items() if k != "last_hidden_state"},
        )
        return output if return_dict is not False else output.to_tuple()

    def translation_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Label-smoothed cross-entropy averaged over target tokens; -100 and padding are
        ignored."""
        targets = self.loss_targets(labels, logits.shape[:2])
        return F.cross_entropy(
            logits.flatten(0, 1).float(),
            targets.flatten(),
            ignore_index=IGNORE_INDEX,
            label_smoothing=self.config.label_smoothing,
        )

    def loss_targets(self, labels: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """`labels` with padding set to IGNORE_INDEX, checked against the (batch, target length)
        `shape`."""
        if labels.shape != shape:
            raise ValueError(
                f"labels have shape {tuple(labels.shape)}, expected (batch, target length) = "
                f"{tuple(shape)}."
            )
        return labels.masked_fill(labels == self.config.pad_token_id, IGNORE_INDEX)

    @staticmethod
    def _reorder_cache(
        past_key_values: EncoderDecoderCache, beam_idx: torch.Tensor
    ) -> EncoderDecoderCache:
        """Beam search: reorder the self-attention cache only; a sentence's beams share its
        cross-attention keys and values, and beams never move between sentences."""
        past_key_values.self_attention_cache.reorder_cache(beam_idx)
        return past_key_values

    def _expand_inputs_for_generation(
        self, expand_size: int = 1, is_encoder_decoder: bool = False, input_ids=None, **model_kwargs
    ):
        """generate()'s copies of each sentence's inputs for its beams, but for the encoder output
        and its mask: one per sentence, marked `rows_per_sentence`, so that cross-attention computes
        their keys and values once. Where the encoder's attentions or hidden states are asked for,
        or the output is not ours, everything is copied."""
        # A private hook, kept: generate() copies every tensor of `encoder_outputs` here, before
        # `custom_generate` sees them, so undoing it in our loop would still make the (rows x beams)
        # copy, and transformers' loop would lose the sharing. A static method up to 5.12, a method
        # in 5.24: super() calls either. If a release stops calling it, the beams read copies (the
        # same tokens) and the decoding suite's test of the cross-attention's rows fails.
        encoder_outputs = model_kwargs.get("encoder_outputs")
        if (
            expand_size == 1
            or not isinstance(encoder_outputs, TranslationEncoderOutput)
            or encoder_outputs.attentions is not None
            or encoder_outputs.hidden_states is not None
        ):
            return super()._expand_inputs_for_generation(
                expand_size, is_encoder_decoder, input_ids, **model_kwargs
            )
        del model_kwargs["encoder_outputs"]
        attention_mask = model_kwargs.pop("attention_mask", None)
        input_ids, model_kwargs = super()._expand_inputs_for_generation(
            expand_size, False, input_ids, **model_kwargs
        )
        shared = dataclasses.replace(
            encoder_outputs,
            rows_per_sentence=(encoder_outputs.rows_per_sentence or 1) * expand_size,
        )
        return input_ids, {
            **model_kwargs,
            "encoder_outputs": shared,
            "attention_mask": attention_mask,
        }

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(
            labels, self.config.pad_token_id, self.config.decoder_start_token_id
        )

    def generate(self, inputs=None, **kwargs):
        """`GenerationMixin.generate` through this family's decoding loop
        (`translation_generate`)."""
        return translation_generate(self, inputs, **kwargs)

    def mask_from_padding(self, input_ids: torch.Tensor) -> torch.Tensor | None:
        """The attention mask of padded sources given without one (transformers 5 no longer derives
        it), so that a padded sentence translates as alone. None when nothing is padded or the pad
        id is the end-of-sentence id."""
        pad, eos = self.config.pad_token_id, self.config.eos_token_id
        if pad is None or pad == eos or not bool((input_ids == pad).any()):
            return None
        return input_ids.ne(pad).long()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, plus the vocabulary shortlist saved beside the
        weights, if any."""
        loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        if pretrained_model_name_or_path is not None:
            hub_kwargs = {
                name: kwargs[name]
                for name in (
                    "cache_dir",
                    "force_download",
                    "local_files_only",
                    "token",
                    "revision",
                    "subfolder",
                    "proxies",
                )
                if name in kwargs
            }
            model.shortlist = load_shortlist(pretrained_model_name_or_path, **hub_kwargs)
        return loaded


__all__ = [
    "LayerState",
    "LayerOutput",
    "TranslationLayer",
    "TranslationEncoderOutput",
    "TranslationTransformerPreTrainedModel",
    "TranslationTransformerModel",
    "TranslationTransformerForConditionalGeneration",
]
