"""Checkpoints saved before the member files were reorganised (issue 10; written by
tests/fixtures/make_checkpoints.py with main at d017a91) still load strictly and give the logits saved
beside them: state-dict key names, parameter shapes, config loading and the computation are unchanged."""

import json
from pathlib import Path

import pytest
import torch
from fixtures.make_checkpoints import DECODER_INPUT_IDS, FIXTURE_CASES, INPUT_IDS
from transformers import AutoModelForSeq2SeqLM

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"


def test_every_fixture_case_is_saved():
    assert sorted(path.name for path in FIXTURES.iterdir()) == sorted(FIXTURE_CASES)


@pytest.mark.parametrize("case", FIXTURE_CASES)
def test_old_checkpoint_loads_strictly_with_its_logits(case):
    model, info = AutoModelForSeq2SeqLM.from_pretrained(FIXTURES / case, output_loading_info=True)
    assert {key: value for key, value in info.items() if value} == {}  # no missing, unexpected or mismatched keys
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(INPUT_IDS), attention_mask=(torch.tensor(INPUT_IDS) != 1).long(),
                       decoder_input_ids=torch.tensor(DECODER_INPUT_IDS)).logits
    expected = torch.tensor(json.loads((FIXTURES / case / "logits.json").read_text()))
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)
