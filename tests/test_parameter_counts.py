"""The papers' parameter counts (Xu et al. 2024, Tables 2-6), within 0.3%, vocabulary 35,603."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM
from transformers.testing_utils import CaptureLogger

from modeling_dwlstm import DepthWiseRnnConfig, DwLstmConfig, ResidualTransformerConfig
from modeling_dwlstm.configuration_translation import logger as configuration_logger
from modeling_dwlstm.paper_configs import (
    config_to_json,
    hub_config_name,
    hub_config_settings,
    paper_config,
)

HUB_CONFIGS = Path(__file__).resolve().parents[1] / "hub_configs"

# (hub_configs file or None, member, layers, overrides, paper's millions)
ROWS = [
    (None, "residual-postnorm", 3, {}, 40.33),
    ("residual-postnorm-base-6l.json", "residual-postnorm", 6, {}, 62.37),
    ("residual-prenorm-base-6l.json", "residual-prenorm", 6, {}, 62.37),
    ("residual-prenorm-base-12l.json", "residual-prenorm", 12, {}, 106.47),
    ("residual-prenorm-base-18l.json", "residual-prenorm", 18, {}, 150.57),
    ("residual-prenorm-base-24l.json", "residual-prenorm", 24, {}, 194.66),
    (None, "dwlstm", 3, {}, 46.63),
    ("dwlstm-base-12l.json", "dwlstm", 12, {}, 122.23),
    ("dwlstm-base-18l.json", "dwlstm", 18, {}, 172.63),
    ("dwlstm-base-24l.json", "dwlstm", 24, {}, 223.02),
    (None, "dwlstm", 6, {"share_gates": "global"}, 70.25),
    (None, "dwlstm", 6, {"share_gates": "global", "lstm_hidden": "linear"}, 45.05),
    (None, "dwlstm", 6, {"share_gates": "global", "ffn_dim": 1536}, 62.37),
    (None, "dwlstm", 6, {"share_gates": "global", "decoder_merge": "concat"}, 78.90),
    (None, "dwlstm", 6, {"share_gates": "none"}, 87.59),
    (None, "dwlstm", 6, {"share_gates": "global", "share_hidden": True}, 44.00),
    ("highway-sdu-base-6l.json", "highway-sdu", 6, {}, 78.13),
    ("depthwise-rnn-base-6l.json", "depthwise-rnn", 6, {}, 68.67),
    # Xu et al. 2024, Table 6 baselines: TA with a 16-layer encoder, DLCL with a 30-layer encoder
    # (6-layer decoders).
    (
        "transparent-attention-base-enc16-dec6.json",
        "transparent-attention",
        16,
        {"decoder_layers": 6},
        93.87,
    ),
    ("dlcl-prenorm-base-enc30-dec6.json", "dlcl-prenorm", 30, {"decoder_layers": 6}, 137.97),
]


def count_millions(config) -> float:
    with torch.device("meta"):  # shapes only: counting a 223M model takes no memory
        model = AutoModelForSeq2SeqLM.from_config(config)
    return model.num_parameters() / 1e6


@pytest.mark.parametrize("hub_file,member,layers,overrides,paper", ROWS)
def test_parameter_count_matches_paper(hub_file, member, layers, overrides, paper):
    if hub_file:
        config = AutoConfig.from_pretrained(HUB_CONFIGS / hub_file)
    else:
        config = paper_config(member, "base", layers, **overrides)
    assert abs(count_millions(config) - paper) / paper < 0.003


@pytest.mark.parametrize("member,size,layers,decoder_layers", hub_config_settings())
def test_hub_configs_are_the_papers_settings(member, size, layers, decoder_layers):
    """hub_configs/ is what paper_configs produces (regenerate with scripts/make_hub_configs.py)."""
    path = HUB_CONFIGS / hub_config_name(member, size, layers, decoder_layers)
    assert path.read_text() == config_to_json(
        paper_config(member, size, layers, decoder_layers=decoder_layers)
    )
    config = AutoConfig.from_pretrained(path)
    assert config.to_dict()["model_type"] == json.loads(path.read_text())["model_type"]
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (
        {"base": 512, "big": 1024}[size],
        layers,
        decoder_layers,
    )


def test_hub_configs_holds_nothing_stale():
    expected = {
        hub_config_name(member, size, layers, decoder)
        for member, size, layers, decoder in hub_config_settings()
    }
    assert {path.name for path in HUB_CONFIGS.glob("*.json")} == expected


@pytest.mark.parametrize("path", sorted(HUB_CONFIGS.glob("*.json")), ids=lambda path: path.stem)
def test_presets_carry_only_fields_their_member_reads(path):
    config = AutoConfig.from_pretrained(path)
    assert set(config.unused_fields()).isdisjoint(json.loads(path.read_text()))


@pytest.mark.parametrize(
    "fields,unused",
    [
        ({"lstm_hidden": "glu"}, {"activation_function", "lstm_activation"}),
        ({"lstm_hidden": "ffn"}, {"activation_function"}),
        ({"lstm_hidden": "linear"}, {"activation_function", "activation_dropout"}),
    ],
)
def test_depthwise_configs_name_the_fields_they_leave_unread(fields, unused):
    for config_class in (DwLstmConfig, DepthWiseRnnConfig):
        assert set(config_class(**fields).unused_fields()) == unused
    assert ResidualTransformerConfig().unused_fields() == ()


def test_setting_a_field_the_member_leaves_unread_warns():
    with CaptureLogger(configuration_logger) as captured:
        # the default hidden module is "glu": its activation is its own
        DwLstmConfig(lstm_activation="tanh")
    assert "`lstm_activation='tanh'` has no effect" in captured.out
    with CaptureLogger(configuration_logger) as captured:
        DwLstmConfig(lstm_hidden="ffn", lstm_activation="tanh")
        DwLstmConfig(activation_function="relu")  # the default value: nothing was asked for
    assert captured.out == ""
