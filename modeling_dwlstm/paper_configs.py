"""The papers' model settings (Vaswani et al. 2017; Xu et al. 2024; Wang et al. 2019), as configs:
what `hub_configs/` holds.

Base: d_model 512, d_ff 2048, 8 heads, dropout 0.1. Big: d_model 1024, d_ff 4096, 16 heads, dropout
0.3 (the papers' En-De setting; use 0.1 elsewhere). Vocabulary: Xu et al. 2024's joint BPE of 35,603
tokens. Depth: L encoder and L decoder layers.
"""

import json
from dataclasses import fields
from pathlib import Path

from transformers import PreTrainedConfig

from . import MEMBERS
from .configuration_translation import TranslationTransformerConfig
from .pipeline_translation import OPUS100_LANGUAGES

SIZES = {
    "base": dict(
        d_model=512, ffn_dim=2048, encoder_attention_heads=8, decoder_attention_heads=8, dropout=0.1
    ),
    "big": dict(
        d_model=1024,
        ffn_dim=4096,
        encoder_attention_heads=16,
        decoder_attention_heads=16,
        dropout=0.3,
    ),
}
# Preset name -> (config class, fields), from each member's record (`FamilyMember.presets`).
MEMBER_PRESETS = {
    preset: (member.config_class, preset_fields)
    for member in MEMBERS
    for preset, preset_fields in member.presets.items()
}
LAYERS = (6, 12, 18, 24)
# Members published with deep encoders and 6-layer decoders: (size, encoder layers, decoder layers)
# to write, instead of every size x LAYERS (`FamilyMember.hub_depths`).
HUB_DEPTHS = {preset: depths for member in MEMBERS for preset, depths in member.hub_depths.items()}
PAPER_VOCAB_SIZE = 35603

# Xu et al. 2024, §3.5's multilingual setting (OPUS-100 many-to-many, following Zhang et al. 2020):
# the 6+6 base model, one 64k joint vocabulary, every English-centric direction (99 languages with
# English, both ways), for the depth-wise LSTM and the residual baseline (pre-norm: our choice; the
# papers compare with Zhang et al.'s numbers).
OPUS100_PAIRS = [
    pair
    for language in OPUS100_LANGUAGES
    if language != "en"
    for pair in (f"en-{language}", f"{language}-en")
]
OPUS100_SETTING = dict(vocab_size=64000, language_pairs=OPUS100_PAIRS)
# Every hub_configs/ preset: the members' (MEMBER_PRESETS) and the data settings built on them.
PRESETS = {
    **MEMBER_PRESETS,
    **{
        f"{member}-opus100": (
            MEMBER_PRESETS[member][0],
            {**MEMBER_PRESETS[member][1], **OPUS100_SETTING},
        )
        for member in ("dwlstm", "residual-prenorm")
    },
}
HUB_DEPTHS.update(
    {f"{member}-opus100": [("base", 6, 6)] for member in ("dwlstm", "residual-prenorm")}
)
# Xu et al. 2024, Table 7's second system and the baseline of its win ratio, "Transformer + LaLN +
# LaLT (Zhang et al. 2020)", at that setting: the residual pre-norm model with language-aware
# LayerNorms and encoder-output transform.
LANGUAGE_AWARE = dict(language_aware_norm=True, language_aware_transform=True)
PRESETS["residual-prenorm-laln-lalt-opus100"] = (
    PRESETS["residual-prenorm-opus100"][0],
    {**PRESETS["residual-prenorm-opus100"][1], **LANGUAGE_AWARE},
)
HUB_DEPTHS["residual-prenorm-laln-lalt-opus100"] = [("base", 6, 6)]


def paper_config(
    member: str, size: str = "base", layers: int = 6, **overrides
) -> TranslationTransformerConfig:
    """The config of `member` (a key of PRESETS) at a paper size with `layers` encoder and decoder
    layers (override `decoder_layers` for a deep encoder with a shallow decoder)."""
    if member not in PRESETS or size not in SIZES:
        raise ValueError(
            f"Unknown member {member!r} or size {size!r}; members: {sorted(PRESETS)}, sizes: "
            f"{sorted(SIZES)}."
        )
    config_class, member_fields = PRESETS[member]
    settings = dict(vocab_size=PAPER_VOCAB_SIZE, encoder_layers=layers, decoder_layers=layers)
    return config_class(**{**settings, **SIZES[size], **member_fields, **overrides})


def hub_config_name(member: str, size: str, layers: int, decoder_layers: int | None = None) -> str:
    """`{member}-{size}-{L}l.json` for L + L layers, `{member}-{size}-enc{L}-dec{M}.json`
    otherwise."""
    if decoder_layers is None or decoder_layers == layers:
        return f"{member}-{size}-{layers}l.json"
    return f"{member}-{size}-enc{layers}-dec{decoder_layers}.json"


def hub_config_settings() -> list[tuple[str, str, int, int]]:
    """(member, size, encoder layers, decoder layers) of every file in hub_configs/."""
    return [
        (member, size, encoder_layers, decoder_layers)
        for member in PRESETS
        for size, encoder_layers, decoder_layers in HUB_DEPTHS.get(
            member, [(size, L, L) for size in SIZES for L in LAYERS]
        )
    ]


def config_to_json(config: TranslationTransformerConfig) -> str:
    """Every field the member reads, written out (no default hidden), plus model_type."""
    inherited = {field.name for field in fields(PreTrainedConfig)}
    unused = set(config.unused_fields())
    declared = [field.name for field in fields(config) if field.name not in inherited | unused]
    values = {name: getattr(config, name) for name in sorted(declared)}
    return json.dumps({"model_type": config.model_type, **values}, indent=2) + "\n"


def write_hub_configs(directory: str | Path, overwrite: bool = False) -> list[Path]:
    """Write every member x size x depth config into `directory`; return the paths. A file of the
    same name that holds something else (a preset edited by hand) is refused, before anything is
    written, unless `overwrite`."""
    directory = Path(directory)
    texts = {
        directory / hub_config_name(member, size, encoder_layers, decoder_layers): config_to_json(
            paper_config(member, size, encoder_layers, decoder_layers=decoder_layers)
        )
        for member, size, encoder_layers, decoder_layers in hub_config_settings()
    }
    edited = sorted(
        path.name for path, text in texts.items() if path.is_file() and path.read_text() != text
    )
    if edited and not overwrite:
        raise ValueError(
            f"{directory} holds {len(edited)} preset(s) that differ from the papers' settings "
            "(e.g. "
            f"{edited[0]}, edited by hand?): pass --overwrite to replace them, or choose another "
            "--output_dir."
        )
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in texts.items():
        path.write_text(text)
    return list(texts)
