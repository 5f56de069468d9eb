"""Checkpoints saved by an earlier version of the package (written by
tests/fixtures/make_checkpoints.py before the member files were reorganised and classes renamed)
still load strictly and give the logits saved beside them, from a folder and from the Hub:
state-dict key names, parameter shapes, config loading and the computation are unchanged."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fixtures.make_checkpoints import DECODER_INPUT_IDS, FIXTURE_CASES, INPUT_IDS
from hub_server import LoopbackHub
from huggingface_hub import HfApi
from transformers import AutoModelForSeq2SeqLM

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"


def test_every_fixture_case_is_saved():
    assert sorted(path.name for path in FIXTURES.iterdir()) == sorted(FIXTURE_CASES)


@pytest.mark.parametrize("case", FIXTURE_CASES)
def test_old_checkpoint_loads_strictly_with_its_logits(case):
    model, info = AutoModelForSeq2SeqLM.from_pretrained(FIXTURES / case, output_loading_info=True)
    # no missing, unexpected or mismatched keys
    assert {key: value for key, value in info.items() if value} == {}
    model.eval()
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor(INPUT_IDS),
            attention_mask=(torch.tensor(INPUT_IDS) != 1).long(),
            decoder_input_ids=torch.tensor(DECODER_INPUT_IDS),
        ).logits
    expected = torch.tensor(json.loads((FIXTURES / case / "logits.json").read_text()))
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)


PULL_OLD_REPOSITORIES = """
import json, sys
import torch
from transformers import AutoModelForSeq2SeqLM
import modeling_dwlstm  # noqa: F401  (registers the family: no remote code needed)
input_ids, decoder_input_ids = torch.tensor(json.loads(sys.argv[1])), torch.tensor(json.loads(sys.argv[2]))
results = {}
for repo_id in sys.argv[3:]:
    model, info = AutoModelForSeq2SeqLM.from_pretrained(repo_id, output_loading_info=True)
    with torch.no_grad():
        logits = model.eval()(input_ids=input_ids, attention_mask=(input_ids != 1).long(),
                              decoder_input_ids=decoder_input_ids).logits
    results[repo_id] = {"info": {key: list(value) for key, value in info.items() if value}, "logits": logits.tolist()}
print(json.dumps(results))
"""  # noqa: E501


def test_old_repositories_on_the_hub_load_strictly_with_their_logits(tmp_path):
    """The same checkpoints as published repositories (config.json and weights as saved then),
    pulled from a loopback Hub by a process with the package installed: every one loads strictly and
    gives its logits."""
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HUB_OFFLINE",)}
    with LoopbackHub() as hub:
        api = HfApi(endpoint=hub.endpoint, token="t")
        for case in FIXTURE_CASES:
            api.create_repo(f"old/{case}")
            api.upload_folder(
                repo_id=f"old/{case}",
                folder_path=FIXTURES / case,
                allow_patterns=["*.json", "*.safetensors"],
            )
        env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                PULL_OLD_REPOSITORIES,
                json.dumps(INPUT_IDS),
                json.dumps(DECODER_INPUT_IDS),
                *(f"old/{case}" for case in FIXTURE_CASES),
            ],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    pulled = json.loads(result.stdout.strip().splitlines()[-1])
    for case in FIXTURE_CASES:
        assert pulled[f"old/{case}"]["info"] == {}, case
        expected = torch.tensor(json.loads((FIXTURES / case / "logits.json").read_text()))
        torch.testing.assert_close(
            torch.tensor(pulled[f"old/{case}"]["logits"]), expected, atol=1e-5, rtol=0
        )
