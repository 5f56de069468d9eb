"""Zero-shot translation judged as Zhang et al. 2020 and Xu et al. 2024, Table 7 do: direct against
pivot translation through English with the same model, the averages out of / into English and over
the zero-shot directions, the subset's averages per side, the win ratio per group against a
baseline, the off-target rates."""

import json

import pytest
import torch
from conftest import MULTI30K, read_multi30k
from test_multilingual import saved_model, tokenizer  # noqa: F401  (fixtures)
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_dwlstm.generation_translation import Shortlist
from nmt_toolkit import evaluation
from nmt_toolkit.evaluation import (
    EvaluationArguments,
    results_table,
    run_evaluation,
    score_translations,
    systems_table,
    translate_sentences,
)
from nmt_toolkit.multilingual import tag_source

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}"),
]
DECODING = dict(num_beams=1, max_new_tokens=6)


def test_pivot_translation_is_the_two_steps_done_by_hand(saved_model, tmp_path):  # noqa: F811
    results = run_evaluation(
        EvaluationArguments(
            model=str(saved_model),
            output_dir=str(tmp_path / "eval"),
            data=str(MULTI30K),
            split="test_2016_flickr",
            max_pairs=4,
            language_pairs="en-de,de-en,de-fr,fr-de",
            pivot="en",
            off_target=False,
            **DECODING,
        )
    )
    model, tokenizer = (  # noqa: F811
        AutoModelForSeq2SeqLM.from_pretrained(saved_model),
        AutoTokenizer.from_pretrained(saved_model),
    )
    for source, target in (("de", "fr"), ("fr", "de")):
        sources = read_multi30k("test_2016_flickr", source, 4)
        into_english = translate_sentences(
            model, tokenizer, [tag_source(text, "en") for text in sources], **DECODING
        ).hypotheses
        by_hand = translate_sentences(
            model,
            tokenizer,
            [tag_source(text, target) if text.strip() else "" for text in into_english],
            **DECODING,
        ).hypotheses
        folder = tmp_path / "eval" / f"{source}-{target}"
        assert (folder / "pivot_en.txt").read_text().splitlines() == into_english
        assert (folder / "pivot_hypotheses.txt").read_text().splitlines() == by_hand
        expected = score_translations(by_hand, read_multi30k("test_2016_flickr", target, 4), target)
        assert results["directions"][f"{source}-{target}"]["pivot"] == {
            "via": "en",
            **expected,
            "off_target_rate": None,
        }
    assert (
        "pivot" not in results["directions"]["en-de"]
        and "pivot" not in results["directions"]["de-en"]
    )
    zero_shot = results["averages"]["zero_shot"]
    pivots = [results["directions"][name]["pivot"]["sacrebleu"] for name in ("de-fr", "fr-de")]
    assert zero_shot["pivot_sacrebleu"] == round(sum(pivots) / 2, 2)
    # the supervised directions have no pivot score
    assert "pivot_sacrebleu" not in results["averages"]["all"]
    assert results["pivot"] == "en" and results["pivot_seconds"] > 0
    assert (
        json.loads((tmp_path / "eval" / "results.json").read_text())["averages"]
        == results["averages"]
    )


def test_both_legs_through_the_pivot_decode_over_the_shortlist(saved_model, tmp_path, monkeypatch):  # noqa: F811
    """--use_shortlist reaches every decoding pass: the direct directions and both legs through
    the pivot."""
    model = AutoModelForSeq2SeqLM.from_pretrained(saved_model)
    generator = torch.Generator().manual_seed(0)
    model.shortlist = Shortlist(
        torch.randint(
            0, model.config.vocab_size, (model.config.vocab_size, 4), generator=generator
        ),
        torch.tensor([0, 1, 2, 3]),
    )
    model.save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(saved_model).save_pretrained(tmp_path / "model")
    calls, translate = [], evaluation.translate_sentences
    monkeypatch.setattr(
        evaluation,
        "translate_sentences",
        lambda *args, **kwargs: calls.append(kwargs) or translate(*args, **kwargs),
    )
    results = run_evaluation(
        EvaluationArguments(
            model=str(tmp_path / "model"),
            output_dir=str(tmp_path / "eval"),
            data=str(MULTI30K),
            split="test_2016_flickr",
            max_pairs=2,
            language_pairs="en-de,de-fr",
            pivot="en",
            off_target=False,
            use_shortlist=True,
            **DECODING,
        )
    )
    assert len(calls) == 3 and all(call.get("use_shortlist") is True for call in calls)
    assert results["use_shortlist"] is True and "pivot" in results["directions"]["de-fr"]


def test_pivot_and_report_errors(saved_model, tmp_path):  # noqa: F811
    common = dict(
        model=str(saved_model),
        data=str(MULTI30K),
        split="test_2016_flickr",
        max_pairs=2,
        **DECODING,
    )
    with pytest.raises(
        ValueError, match="--pivot translates the directions of a multilingual evaluation"
    ):
        run_evaluation(
            EvaluationArguments(
                output_dir=str(tmp_path / "a"),
                source_lang="de",
                target_lang="fr",
                add_language_tag=True,
                pivot="en",
                **common,
            )
        )
    with pytest.raises(ValueError, match="every evaluated direction .* involves en"):
        run_evaluation(
            EvaluationArguments(
                output_dir=str(tmp_path / "b"), language_pairs="en-de,de-en", pivot="en", **common
            )
        )
    with pytest.raises(ValueError, match="no tag <2it>"):
        run_evaluation(
            EvaluationArguments(
                output_dir=str(tmp_path / "c"), language_pairs="de-fr", pivot="it", **common
            )
        )


def test_the_table7_report_and_the_systems_table_on_known_numbers(saved_model, tmp_path):  # noqa: F811
    common = dict(
        model=str(saved_model),
        data=str(MULTI30K),
        split="test_2016_flickr",
        max_pairs=3,
        language_pairs="en-de,de-en,en-fr,fr-en,de-fr",
        average_subset="en-de,de-en",
        bootstrap_samples=20,
        **DECODING,
    )
    baseline = run_evaluation(EvaluationArguments(output_dir=str(tmp_path / "baseline"), **common))
    results = run_evaluation(
        EvaluationArguments(
            output_dir=str(tmp_path / "system"),
            pivot="en",
            baseline_results=str(tmp_path / "baseline" / "results.json"),
            **common,
        )
    )
    groups = results["win_ratio"]["groups"]
    assert set(groups) == {"out_of_english", "into_english", "zero_shot", "subset"}
    # the same model
    assert groups["out_of_english"] == {"directions": 2, "wins": 0, "ties": 2, "win_ratio": 0.0}
    assert all(
        scores["paired_bootstrap"]["p_value"] == 1.0 for scores in results["directions"].values()
    )
    table = results_table(results, baseline)
    assert table[0] == (
        "| direction | sacreBLEU | chrF | off-target | pivot sacreBLEU | pivot off-target | "
        "baseline sacreBLEU | p (bootstrap) |"
    )
    de_fr = results["directions"]["de-fr"]
    assert (
        f"| de-fr | {de_fr['sacrebleu']:.2f} | {de_fr['chrf']:.2f} | "
        f"{100 * de_fr['off_target_rate']:.1f}% | {de_fr['pivot']['sacrebleu']:.2f} | "
        f"{100 * de_fr['pivot']['off_target_rate']:.1f}% | {de_fr['sacrebleu']:.2f} | 1.00 |"
    ) in table
    assert any(
        line.startswith(
            "Win ratio over the baseline (sacrebleu): 0 of 5 directions (0.00), 5 ties; out of "
            "english 0 of 2 (0.00); into english 0 of 2 (0.00)"
        )
        for line in table
    )
    assert any(line.startswith("Zero-shot: direct") and "through en" in line for line in table)
    en_de, de_en = (results["directions"][name]["sacrebleu"] for name in ("en-de", "de-en"))
    assert (
        f"Subset averages (sacreBLEU): out of english {en_de:.2f} (1); into english {de_en:.2f} "
        "(1)." in table
    )

    numbers = {  # two systems: a baseline, and one better out of English, with pivot scores
        "baseline": {
            "averages": {
                "out_of_english": {"sacrebleu": 20.0},
                "into_english": {"sacrebleu": 30.0},
                "zero_shot": {"sacrebleu": 4.0, "off_target_rate": 0.5},
            },
            "directions": {"en-de": {"sacrebleu": 20.0}, "de-en": {"sacrebleu": 30.0}},
            "subset": ["en-de"],
        },
        "system": {
            "averages": {
                "out_of_english": {"sacrebleu": 22.5},
                "into_english": {"sacrebleu": 29.0},
                "zero_shot": {
                    "sacrebleu": 8.0,
                    "off_target_rate": 0.1,
                    "pivot_sacrebleu": 10.0,
                    "direct_share_of_pivot": 0.8,
                },
            },
            "directions": {"en-de": {"sacrebleu": 22.5}, "de-en": {"sacrebleu": 29.0}},
            "subset": ["en-de"],
            "win_ratio": {
                "groups": {"out_of_english": {"win_ratio": 1.0}, "into_english": {"win_ratio": 0.0}}
            },
        },
    }
    assert systems_table(numbers) == [
        "| system | out of en | subset | WR | into en | subset | WR | zero-shot | off-target | "
        "pivot | direct / pivot |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        "| baseline | 20.00 | 20.00 | - | 30.00 | - | - | 4.00 | 50.0% | - | - |",
        "| system | 22.50 | 22.50 | 100.0% | 29.00 | - | 0.0% | 8.00 | 10.0% | 10.00 | 80.0% |",
    ]
