"""The decoding loop of generation_translation against transformers' own, and the vocabulary
shortlist."""

import copy
import json
import math
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import CASES, WITHOUT_PACKAGE, GraphCounter, random_ids, tiny_model
from torch._inductor import cpp_builder
from transformers import (
    AutoModelForSeq2SeqLM,
    CompileConfig,
    LogitsProcessor,
    LogitsProcessorList,
    TextStreamer,
)

from modeling_dwlstm import building_blocks, generation_translation, precision
from modeling_dwlstm.building_blocks import decoding_step_attention
from modeling_dwlstm.generation_translation import (
    OUTPUT_CACHE_FIELD,
    SHORTLIST_FILE,
    Shortlist,
    ShortlistLogitsMask,
)
from modeling_dwlstm.modeling_translation import TranslationTransformerForConditionalGeneration
from modeling_dwlstm.precision import output_rows, prepare_for_inference, quantize_int8

pytestmark = pytest.mark.usefixtures("one_thread")

# One case per member (and both kinds of connection across a stack).
MEMBER_CASES = [
    "dwlstm",
    "dwlstm-two-lstm",
    "residual-pre",
    "residual-post",
    "highway-sdu-sigmoid-all-layers",
    "rnn-glu-own-hidden-add",
    "dlcl-pre-learned",
    "ta-post",
    "rezero",
]
SOURCES = random_ids(3, 7)
MASK = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
EOS = 2
LANGUAGE_TAGS = {"de": 4, "fr": 5, "en": 6}  # one source in each target language


@pytest.fixture
def lean_calls(monkeypatch):
    """How often each of this module's loops ran."""
    calls = {"greedy": 0, "beam": 0}
    for name, key in (("lean_greedy_search", "greedy"), ("lean_beam_search", "beam")):
        original = getattr(generation_translation, name)

        def counted(*args, original=original, key=key, **kwargs):
            calls[key] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(generation_translation, name, counted)
    return calls


def eos_prone(model):
    """Make the end of sentence likely, so that hypotheses end at different steps (finished beams,
    padding)."""
    with torch.no_grad():
        model.get_output_embeddings().weight[EOS] *= 4
    return model


def both_loops(model, **settings):
    """(this loop's output, transformers' loop's output) of the same call."""
    lean = model.generate(SOURCES, attention_mask=MASK, **settings)
    stock = model.generate(SOURCES, attention_mask=MASK, lean_decoding=False, **settings)
    return lean, stock


def assert_same_output(lean, stock):
    if isinstance(lean, torch.Tensor):
        assert torch.equal(lean, stock)
        return
    assert torch.equal(lean.sequences, stock.sequences)
    assert (lean.scores is None) == (stock.scores is None)
    for ours, theirs in zip(lean.scores or (), stock.scores or (), strict=True):
        assert torch.equal(ours, theirs)
    for name in ("sequences_scores", "beam_indices"):
        if stock.get(name) is not None:
            assert torch.equal(lean[name], stock[name]), name


def int8_model(case: str, route: str | None):
    """The tiny model in float32 (`route` None), in bfloat16 ("bfloat16"), or int8 by the route
    named ("fbgemm", "int_mm"), whatever this CPU's own route is."""
    model = eos_prone(tiny_model(case)).eval()
    if route == "bfloat16":
        return prepare_for_inference(model, dtype="bfloat16", allow_slow=True)
    return model if route is None else quantize_int8(model, route=route)


# --- The same output as transformers' loop --------------------------------------------------------


@pytest.mark.parametrize("case", MEMBER_CASES)
@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("cache_implementation", [None, "static"])
@pytest.mark.parametrize("route", [None, "fbgemm", "int_mm"])
def test_the_loop_decodes_what_transformers_loop_decodes(
    case, num_beams, cache_implementation, route, lean_calls
):
    """Token for token, and score for score where scores are returned, for every member, greedy and
    beam, dynamic and static cache, float32 and int8 (both routes; int_mm is slow but correct on a
    CPU without VNNI)."""
    model = int8_model(case, route)
    settings = dict(
        num_beams=num_beams, max_new_tokens=7, cache_implementation=cache_implementation
    )
    assert_same_output(*both_loops(model, **settings))
    assert_same_output(
        *both_loops(model, **settings, return_dict_in_generate=True, output_scores=True)
    )
    assert lean_calls["greedy" if num_beams == 1 else "beam"] == 2


@pytest.fixture
def small_topk_blocks(monkeypatch):
    """`row_topk` over blocks of 3 columns, so that the tiny vocabulary (40: 13 blocks and a last
    one of 1) takes its block path, as a real vocabulary does with the default blocks."""
    monkeypatch.setattr(generation_translation, "TOPK_BLOCK", 3)


@pytest.mark.parametrize("case", ["dwlstm", "residual-pre"])
@pytest.mark.parametrize("cache_implementation", [None, "static"])
@pytest.mark.parametrize(
    "settings", [dict(), dict(forced_eos_token_id=EOS), dict(suppress_tokens=[7, 8, 39])]
)
def test_beam_search_over_blocks_of_columns_decodes_what_transformers_loop_decodes(
    case, cache_implementation, settings, small_topk_blocks, lean_calls
):
    """The top-k of each beam's row over blocks of columns, the forced end of sentence (rows of
    -inf) and suppressed columns (in the last, shorter block) included: the same output as
    transformers' top-k over beams x vocabulary."""
    model = eos_prone(tiny_model(case))
    settings = dict(
        num_beams=3, max_new_tokens=7, cache_implementation=cache_implementation, **settings
    )
    assert_same_output(
        *both_loops(model, **settings, return_dict_in_generate=True, output_scores=True)
    )
    assert lean_calls["beam"] == 1


@pytest.mark.parametrize("width, k", [(1000, 4), (35603, 8), (640, 10), (100, 8)])
def test_row_topk_is_torch_topk(width, k):
    """The values and columns of torch.topk (no ties among random scores), whatever block holds the
    largest ones: the last, shorter block, one block holding all k, a row too short for blocks."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(6, width, generator=generator).log_softmax(-1)
    scores[1, -(width % 64 or 64) :] += 30  # the k largest in the last block
    scores[2, 128 : 128 + k] += 30  # all k in one block
    values, columns = generation_translation.row_topk(scores, k)
    expected = torch.topk(scores, k)
    assert torch.equal(values, expected.values) and torch.equal(columns, expected.indices)


def test_row_topk_with_minus_infinity_among_the_best_is_torch_topk():
    """A row forced to one token (-inf elsewhere) has -inf among its k largest: the values are
    torch.topk's, and the columns are in range (the blocks past the end are never returned)."""
    scores = torch.randn(3, 1000).log_softmax(-1)
    scores[0] = -math.inf
    scores[0, 999] = 0.0
    scores[1, :990] = -math.inf
    values, columns = generation_translation.row_topk(scores, 16)
    expected = torch.topk(scores, 16)
    assert torch.equal(values, expected.values) and bool((columns < 1000).all())
    assert torch.equal(scores.gather(1, columns), values)


def test_best_continuations_are_the_top_k_over_beams_times_columns():
    """(beam score + log-probability) over each sentence's beams x columns: the values and flat
    indices of torch.topk over the sums, the first step's -1e9 beams included."""
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.randn(4 * 3, 2000, generator=generator).log_softmax(-1)
    beam_scores = torch.randn(4, 3, generator=generator)
    beam_scores[0, 1:] = -1e9
    values, indices = generation_translation.best_continuations(log_probs, beam_scores, 6)
    expected = torch.topk((log_probs.view(4, 3, -1) + beam_scores[:, :, None]).view(4, -1), 6)
    assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
    # bfloat16 logits: equal scores among the best, ordered by torch.topk itself
    tied = log_probs.bfloat16().float()
    expected = torch.topk((tied.view(4, 3, -1) + beam_scores[:, :, None]).view(4, -1), 6)
    values, indices = generation_translation.best_continuations(tied, beam_scores, 6)
    assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
    few_columns = log_probs[:, :4]  # fewer columns than k: the sums themselves
    expected = torch.topk((few_columns.view(4, 3, -1) + beam_scores[:, :, None]).view(4, -1), 6)
    assert torch.equal(
        generation_translation.best_continuations(few_columns.contiguous(), beam_scores, 6)[0],
        expected.values,
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_best_continuations_with_one_tied_sentence_are_torch_topk_over_the_batch(threads):
    """One sentence of sixteen has equal scores among its best (many equal columns in each beam, one
    score for all its beams): its k best are torch.topk's over its own row, in torch.topk's order
    among the equal ones, and the other sentences' are the fast route's; the whole is torch.topk
    over the batch."""
    generator = torch.Generator().manual_seed(1)
    log_probs = torch.randn(16 * 3, 2000, generator=generator).log_softmax(-1)
    beam_scores = torch.randn(16, 3, generator=generator)
    log_probs[15:18, 100:140] = 0.5  # sentence 5, three beams, 40 equal columns each
    beam_scores[5] = -1.0
    sums = (log_probs.view(16, 3, -1) + beam_scores[:, :, None]).view(16, -1)
    expected = torch.topk(sums, 8)
    torch.set_num_threads(threads)  # the module's `one_thread` fixture sets it back
    values, indices = generation_translation.best_continuations(log_probs, beam_scores, 8)
    assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
    # torch.topk's order among the equal columns is not theirs: the check above is not vacuous
    assert not torch.equal(indices[5], torch.arange(100, 108))


# --- Attention at a decoding step -----------------------------------------------------------------


@pytest.mark.parametrize("queries", [1, 4])
def test_decoding_step_attention_is_sdpa(queries):
    """softmax(QK^T / sqrt(d)) V by two matrix products equals SDPA, with and without a padding
    mask, a row with every key masked giving 0 as SDPA gives."""
    generator = torch.Generator().manual_seed(0)
    query, keys, values = (
        torch.randn(3, 2, length, 8, generator=generator) for length in (queries, 5, 5)
    )
    mask = torch.ones(3, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    mask[2] = False
    for attention_mask in (None, mask):
        expected = F.scaled_dot_product_attention(query, keys, values, attn_mask=attention_mask)
        torch.testing.assert_close(
            decoding_step_attention(query, keys, values, attention_mask), expected
        )


def test_a_one_position_decoder_input_trains_through_the_decoding_step_attention(monkeypatch):
    """Training without dropout on a one-position decoder input (a batch of empty targets) takes the
    decoding-step attention too: the gradients are SDPA's (an in-place pass over the softmax's
    output would break the backward)."""
    labels = torch.full((3, 1), 2)
    gradients = {}
    for threshold in (10**9, 0):
        monkeypatch.setattr(building_blocks, "DECODING_STEP_MIN_QUERIES", threshold)
        model = tiny_model("dwlstm").train()  # dropout 0 in the tiny configurations
        model(input_ids=SOURCES, attention_mask=MASK, labels=labels).loss.backward()
        gradients[threshold] = torch.cat(
            [parameter.grad.flatten() for parameter in model.parameters()]
        )
    torch.testing.assert_close(gradients[0], gradients[10**9], atol=1e-6, rtol=1e-5)


def test_steps_inside_torch_compile_attend_through_sdpa(monkeypatch):
    """A step traced by torch.compile keeps SDPA (one kernel in the graph) however many rows it
    has: the two matrix products are never taken while compiling, and are taken when not."""
    monkeypatch.setattr(building_blocks, "DECODING_STEP_MIN_QUERIES", 0)
    calls = []
    original = building_blocks.decoding_step_attention
    monkeypatch.setattr(
        building_blocks, "decoding_step_attention", lambda *args: calls.append(1) or original(*args)
    )
    model = tiny_model("dwlstm")
    eager = model.generate(SOURCES, attention_mask=MASK, num_beams=2, max_new_tokens=3)
    assert calls
    calls.clear()
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    tracing = model.generate(SOURCES, attention_mask=MASK, num_beams=2, max_new_tokens=3)
    assert not calls
    assert torch.equal(tracing, eager)


@pytest.mark.parametrize("case", MEMBER_CASES)
def test_decoding_steps_over_many_rows_use_the_matrix_products_and_decode_the_same(
    case, monkeypatch
):
    """With the threshold at 0 every decoding step takes `decoding_step_attention` (counted), and
    the output is SDPA's to rounding: the same tokens, the same scores within 1e-5."""
    model = eos_prone(tiny_model(case))
    settings = dict(
        input_ids=SOURCES,
        attention_mask=MASK,
        num_beams=3,
        max_new_tokens=7,
        return_dict_in_generate=True,
        output_scores=True,
    )
    monkeypatch.setattr(building_blocks, "DECODING_STEP_MIN_QUERIES", 10**9)
    with_sdpa = model.generate(**settings)
    calls = []
    original = building_blocks.decoding_step_attention
    monkeypatch.setattr(
        building_blocks, "decoding_step_attention", lambda *args: calls.append(1) or original(*args)
    )
    monkeypatch.setattr(building_blocks, "DECODING_STEP_MIN_QUERIES", 0)
    with_products = model.generate(**settings)
    assert len(calls) >= 6 * model.config.decoder_layers  # self- and cross-attention at every step
    assert torch.equal(with_products.sequences, with_sdpa.sequences)
    torch.testing.assert_close(
        with_products.sequences_scores, with_sdpa.sequences_scores, atol=1e-5, rtol=1e-5
    )


@pytest.fixture
def beams_with_copies(monkeypatch):
    """generate() as transformers expands inputs: a copy of each sentence's encoder output for
    every beam."""

    def expand_all(model, expand_size=1, is_encoder_decoder=False, input_ids=None, **model_kwargs):
        # transformers' own, through super() as the model calls it (a static method up to 5.12, a
        # method in 5.24)
        parent = super(TranslationTransformerForConditionalGeneration, model)
        return parent._expand_inputs_for_generation(
            expand_size, is_encoder_decoder, input_ids, **model_kwargs
        )

    return lambda: monkeypatch.setattr(
        TranslationTransformerForConditionalGeneration, "_expand_inputs_for_generation", expand_all
    )


@pytest.mark.parametrize("case", MEMBER_CASES + ["language-aware-dwlstm"])
@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_beams_share_one_copy_of_their_sentences_encoder_output(
    case, cache_implementation, beams_with_copies
):
    """With beams, the decoder's cross-attention reads one copy of each sentence's encoder output
    and keys (not one per beam) and decodes what it decoded from copies: the same tokens, the same
    scores to rounding."""
    if case == "language-aware-dwlstm":  # each sentence its own target language (LaLN and LaLT)
        model = eos_prone(
            tiny_model(
                "dwlstm",
                language_pairs=["en-de", "en-fr", "de-en"],
                language_tag_ids=LANGUAGE_TAGS,
                language_aware_norm=True,
                language_aware_transform=True,
            )
        )
        sources = SOURCES.clone()
        sources[:, 0] = torch.tensor(list(LANGUAGE_TAGS.values()))
    else:
        model, sources = eos_prone(tiny_model(case)), SOURCES
    settings = dict(
        input_ids=sources,
        attention_mask=MASK,
        num_beams=3,
        max_new_tokens=7,
        return_dict_in_generate=True,
        output_scores=True,
        cache_implementation=cache_implementation,
    )

    # read at once: transformers 5.4 to 5.12 reuse a static cache in the next call
    def cross_rows(output):
        return [
            layer.keys.shape[0]
            for layer in getattr(output, OUTPUT_CACHE_FIELD).cross_attention_cache.layers
        ]

    shared = model.generate(**settings)
    assert cross_rows(shared) == [3] * model.config.decoder_layers  # 3 sentences, not 9 beams
    beams_with_copies()
    copies = model.generate(**settings)
    assert cross_rows(copies) == [9] * model.config.decoder_layers
    assert torch.equal(shared.sequences, copies.sequences)
    torch.testing.assert_close(shared.sequences_scores, copies.sequences_scores)
    for ours, theirs in zip(shared.scores, copies.scores, strict=True):
        torch.testing.assert_close(ours, theirs)


def test_a_static_cache_kept_between_calls_serves_shared_and_copied_encoder_outputs():
    """transformers 5.4 to 5.12 reuse a static cache in the next generate() call: its
    cross-attention rows (one per sentence with shared beams, one per beam with copies) follow
    the call."""
    model = tiny_model("dwlstm")
    settings = dict(
        input_ids=SOURCES,
        attention_mask=MASK,
        num_beams=3,
        max_new_tokens=5,
        cache_implementation="static",
    )
    fresh = tiny_model("dwlstm").generate(**settings)
    # shared, copies, shared
    for extra in ({}, {"output_attentions": True, "return_dict_in_generate": True}, {}):
        output = model.generate(**settings, **extra)
        assert torch.equal(output if not extra else output.sequences, fresh)


def test_a_decoder_batch_that_is_not_the_sentences_beams_is_refused():
    model = tiny_model("dwlstm")
    encoder_outputs = model.get_encoder()(input_ids=SOURCES, attention_mask=MASK)
    with pytest.raises(ValueError, match=r"Decoder batch \(6\) and encoder batch \(3\) differ"):
        model(
            encoder_outputs=encoder_outputs,
            attention_mask=MASK,
            decoder_input_ids=torch.ones(6, 1, dtype=torch.long),
        )
    encoder_outputs.rows_per_sentence = 3
    with pytest.raises(
        ValueError, match=r"and encoder batch \(3 x 3 decoder rows per sentence\) differ"
    ):
        model(
            encoder_outputs=encoder_outputs,
            attention_mask=MASK,
            decoder_input_ids=torch.ones(6, 1, dtype=torch.long),
        )
    logits = model(
        encoder_outputs=encoder_outputs,
        attention_mask=MASK,
        decoder_input_ids=torch.ones(9, 1, dtype=torch.long),
    ).logits
    # a sentence's rows read its encoder output
    torch.testing.assert_close(logits[:3], logits[0:1].expand(3, -1, -1))
    torch.testing.assert_close(
        logits[3],
        model(
            input_ids=SOURCES[1:2],
            attention_mask=MASK[1:2],
            decoder_input_ids=torch.ones(1, 1, dtype=torch.long),
        ).logits[0],
    )


@pytest.mark.parametrize("case", ["dwlstm", "residual-pre", "ta-post"])
def test_bfloat16_weights_decode_the_same(case, lean_calls):
    """bfloat16 logits: transformers' loop scores a float32 copy, this loop a float32 conversion,
    the same numbers."""
    model = int8_model(case, "bfloat16")
    for num_beams in (1, 3):
        assert_same_output(
            *both_loops(
                model,
                num_beams=num_beams,
                max_new_tokens=6,
                return_dict_in_generate=True,
                output_scores=True,
            )
        )
    assert lean_calls == {"greedy": 1, "beam": 1}


def assert_one_tensor_over_the_steps(monkeypatch, model, owner, method: str) -> None:
    """`owner.method` (a step's tensor maker) returns the same tensor at every step of greedy and
    beam search, and none where greedy search returns its scores (each step's own tensor); the
    output is transformers' loop's either way."""
    holders = []
    original = getattr(owner, method)

    def recorded(self, *args):
        tensor = original(self, *args)
        holders.append(tensor.data_ptr())
        return tensor

    monkeypatch.setattr(owner, method, recorded)
    for num_beams in (1, 3):
        holders.clear()
        assert_same_output(*both_loops(model, num_beams=num_beams, max_new_tokens=6))
        assert len(holders) > 1 and len(set(holders)) == 1  # one per step
    holders.clear()
    returned = dict(return_dict_in_generate=True, output_scores=True)
    assert_same_output(*both_loops(model, num_beams=1, max_new_tokens=6, **returned))
    assert holders == []


def test_bfloat16_scores_are_written_into_one_tensor_over_the_steps(monkeypatch, lean_calls):
    """Each step's float32 scores go into the same tensor (a new one per step faults fresh pages in
    at large batches)."""
    model = int8_model("dwlstm", "bfloat16")
    assert_one_tensor_over_the_steps(
        monkeypatch, model, generation_translation.ScoresBuffer, "float32"
    )
    assert lean_calls == {"greedy": 2, "beam": 1}


@pytest.mark.parametrize("route", [None, "bfloat16", "bfloat16, packed", "int_mm"])
def test_the_output_projection_is_written_into_one_tensor_over_the_steps(
    route, monkeypatch, lean_calls
):
    """Eager steps project the decoder's output themselves, into the same tensor at every step;
    with a packed bfloat16 weight, where a step has more rows than the packed product takes (here:
    any); with an int8 weight on the int_mm route, its int32 sums into one tensor as well."""
    model = eos_prone(tiny_model("dwlstm")).eval()
    if route == "int_mm":
        quantize_int8(model, route=route)
        sums, rows_product = [], precision.Int8Projection.rows_product

        def recorded(self, rows, **out):
            sums.append(out.get("sums"))
            return rows_product(self, rows, **out)

        monkeypatch.setattr(precision.Int8Projection, "rows_product", recorded)
    elif route is not None:  # bfloat16, its weights packed only where the case asks
        prepare_for_inference(model, "bfloat16", allow_slow=True, pack_weights=False)
    if route == "bfloat16, packed":
        precision.pack_bfloat16_weights(model)
        monkeypatch.setattr(precision, "PACKED_PRODUCT_MAX_ROWS", 0)
    assert model.decoding_step_projection() is model.lm_head
    assert_one_tensor_over_the_steps(
        monkeypatch, model, generation_translation.ReusedLogits, "__call__"
    )
    assert lean_calls == {"greedy": 2, "beam": 1}
    if route == "int_mm":  # the output projection's sums at each step of a beam search
        sums.clear()
        model.generate(SOURCES, attention_mask=MASK, num_beams=3, max_new_tokens=6)
        given = [each for each in sums if each is not None]
        assert len(given) > 1 and len({each.data_ptr() for each in given}) == 1


@pytest.mark.parametrize("route", ["int_mm", "fbgemm"])
def test_a_bfloat16_model_with_an_int8_output_projection_decodes_as_transformers_loop(route):
    """bfloat16 with int8 projections: on the int_mm route the loop projects itself, into its
    float32 tensors, and rounds the logits to bfloat16 as the model's forward does (the same
    scores as transformers' loop); fbgemm's product, a new tensor per call, stays the forward's."""
    model = eos_prone(tiny_model("dwlstm"))
    prepare_for_inference(model, "bfloat16", allow_slow=True, pack_weights=False)
    quantize_int8(model, route=route)  # as precision="bfloat16+int8", by either route
    expected = model.lm_head if route == "int_mm" else None
    assert model.decoding_step_projection() is expected
    for num_beams in (1, 3):
        settings = dict(num_beams=num_beams, max_new_tokens=7)
        assert_same_output(*both_loops(model, **settings))
        assert_same_output(
            *both_loops(model, **settings, return_dict_in_generate=True, output_scores=True)
        )


@pytest.mark.usefixtures("native_bfloat16")
def test_a_packed_output_projection_computes_a_steps_few_rows_itself(monkeypatch):
    """At a decoding step's few rows the loop takes the logits of the output projection's packed
    product, and the tokens stay transformers' loop's; where oneDNN has no bfloat16 product to pack
    for (AVX2), the model is not packed and the loop projects into its reused tensor."""
    model = prepare_for_inference(eos_prone(tiny_model("dwlstm")), "bfloat16")
    assert model.decoding_step_projection() is model.lm_head
    if not precision.onednn_packing_works():
        assert not precision.has_packed_weights(model)
        return
    products = []
    original = precision.onednn_linear
    monkeypatch.setattr(
        precision,
        "onednn_linear",
        lambda input, packed, bias: products.append(packed) or original(input, packed, bias),
    )
    assert_same_output(*both_loops(model, num_beams=3, max_new_tokens=6))
    head = precision.PACKED_BFLOAT16_WEIGHTS[model.lm_head][1]
    assert sum(packed is head for packed in products) >= 2 * 6  # every step, both loops


class OwnForward(TranslationTransformerForConditionalGeneration):
    """A subclass with a forward of its own, which the decoding loop must call."""

    def forward(self, *args, **kwargs):
        output = super().forward(*args, **kwargs)
        output.logits = favour_token(output.logits)
        return output


def favour_token(logits: torch.Tensor) -> torch.Tensor:
    """`logits` with token 5 far ahead (a new tensor)."""
    bonus = torch.zeros(logits.shape[-1], dtype=logits.dtype)
    bonus[5] = 10.0
    return logits + bonus


def hooked_models():
    """Models whose logits come from more than the plain projection: a forward hook on the
    projection, a pre-hook on the model, a forward set on the projection's instance, a subclass's
    forward."""
    hook = eos_prone(tiny_model("dwlstm"))
    hook.lm_head.register_forward_hook(lambda module, args, output: favour_token(output))
    pre_hook = eos_prone(tiny_model("dwlstm"))
    calls = []
    pre_hook.register_forward_pre_hook(lambda module, args: calls.append(1))
    replaced = eos_prone(tiny_model("dwlstm"))
    plain_forward = replaced.lm_head.forward
    replaced.lm_head.forward = lambda hidden: plain_forward(hidden).flip(-1)
    subclass = eos_prone(tiny_model("dwlstm"))
    subclass.__class__ = OwnForward
    return {"hook": hook, "pre_hook": pre_hook, "replaced": replaced, "subclass": subclass}, calls


def test_a_hooked_or_replaced_projection_runs_as_the_model_runs_it(lean_calls):
    """Where projecting the decoder's output itself would skip something, the loop calls the model:
    the hook or forward shapes the logits in both loops alike (and changes the translations, but
    for the pre-hook, which counts the model's calls)."""
    plain = eos_prone(tiny_model("dwlstm"))
    settings = [dict(num_beams=num_beams, max_new_tokens=6) for num_beams in (1, 3)]
    unhooked = [plain.generate(SOURCES, attention_mask=MASK, **each) for each in settings]
    models, pre_hook_calls = hooked_models()
    for name, model in models.items():
        assert model.decoding_step_projection() is None, name
        for each, translations in zip(settings, unhooked):
            pre_hook_calls.clear()
            lean = model.generate(SOURCES, attention_mask=MASK, **each)
            if name == "pre_hook":  # each step called the model, with its hook
                assert len(pre_hook_calls) == lean.shape[1] - 1
            assert_same_output(
                lean, model.generate(SOURCES, attention_mask=MASK, lean_decoding=False, **each)
            )
            assert torch.equal(lean, translations) == (name == "pre_hook"), name
    assert lean_calls == {"greedy": 5, "beam": 5}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_option_of_every_member_decodes_the_same(case, lean_calls):
    model = eos_prone(tiny_model(case))
    for num_beams in (1, 2):
        assert_same_output(*both_loops(model, num_beams=num_beams, max_new_tokens=6))
    assert lean_calls == {"greedy": 1, "beam": 1}


@pytest.mark.parametrize(
    "settings",
    [
        dict(num_beams=4, num_return_sequences=3),
        dict(num_beams=3, early_stopping=True, length_penalty=0.6),
        dict(num_beams=3, early_stopping="never", length_penalty=1.4),
        dict(num_beams=2, min_new_tokens=4),
        dict(num_beams=1, min_new_tokens=4),
        dict(num_beams=3, min_length=5, suppress_tokens=[5, 6], begin_suppress_tokens=[7]),
        dict(num_beams=1, suppress_tokens=[5, 6], begin_suppress_tokens=[7]),
        dict(num_beams=3, forced_bos_token_id=9, forced_eos_token_id=EOS),
        dict(num_beams=1, forced_bos_token_id=9, forced_eos_token_id=EOS),
        dict(num_beams=3, eos_token_id=[EOS, 11]),
        dict(num_beams=3, no_repeat_ngram_size=2, repetition_penalty=1.3),
        dict(num_beams=1, no_repeat_ngram_size=2),
    ],
)
def test_generation_options_decode_the_same(settings, lean_calls):
    model = eos_prone(tiny_model("dwlstm"))
    assert_same_output(*both_loops(model, max_new_tokens=8, **settings))
    assert_same_output(
        *both_loops(
            model, max_new_tokens=8, return_dict_in_generate=True, output_scores=True, **settings
        )
    )
    assert sum(lean_calls.values()) == 2


class BanToken(LogitsProcessor):
    """A processor this module does not know: called as transformers' loop calls it."""

    def __init__(self, token: int):
        self.token = token

    def __call__(self, input_ids, scores):
        return scores.index_fill(1, torch.tensor([self.token]), -float("inf"))


@pytest.mark.parametrize("num_beams", [1, 3])
def test_a_processor_of_the_caller_is_applied_as_transformers_applies_it(num_beams, lean_calls):
    model = tiny_model("dwlstm")
    plain = model.generate(
        SOURCES, attention_mask=MASK, num_beams=num_beams, max_new_tokens=8, lean_decoding=False
    )
    banned = int(plain[0, 1])
    processors = LogitsProcessorList([BanToken(banned)])
    lean, stock = both_loops(
        model, num_beams=num_beams, max_new_tokens=8, logits_processor=processors
    )
    assert torch.equal(lean, stock) and sum(lean_calls.values()) == 1
    assert not (lean == banned).any()


def test_a_decoder_prompt_and_the_translation_pipeline_use_the_loop(lean_calls):
    model = tiny_model("dwlstm")
    prompt = torch.tensor([[model.config.decoder_start_token_id, 9, 10]] * 3)
    assert_same_output(*both_loops(model, decoder_input_ids=prompt, num_beams=2, max_new_tokens=5))
    assert lean_calls["beam"] == 1


# --- Whatever the loop does not implement runs in transformers' loop ------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        dict(do_sample=True, top_k=5, num_beams=1),
        dict(do_sample=True, num_beams=2),
        dict(num_beams=2, return_dict_in_generate=True, output_attentions=True),
        dict(num_beams=1, return_dict_in_generate=True, output_hidden_states=True),
        dict(num_beams=2, return_dict_in_generate=True, output_logits=True),
        dict(num_beams=2, use_cache=False),
        dict(num_beams=1, lean_decoding=False),
    ],
)
def test_options_the_loop_does_not_implement_run_in_transformers_loop(settings, lean_calls):
    model = tiny_model("dwlstm")
    torch.manual_seed(0)
    ours = model.generate(SOURCES, attention_mask=MASK, max_new_tokens=5, **settings)
    torch.manual_seed(0)
    theirs = model.generate(
        SOURCES,
        attention_mask=MASK,
        max_new_tokens=5,
        lean_decoding=False,
        **{k: v for k, v in settings.items() if k != "lean_decoding"},
    )
    assert lean_calls == {"greedy": 0, "beam": 0}
    assert_same_output(ours, theirs)


class NumberTokens:
    """A tokenizer for a streamer: token ids written as numbers."""

    def decode(self, ids, **kwargs):
        return " ".join(map(str, ids))


def test_a_streamer_and_an_assistant_run_in_transformers_loop(lean_calls):
    model = tiny_model("dwlstm")
    streamer = TextStreamer(NumberTokens())
    model.generate(SOURCES[:1], max_new_tokens=4, num_beams=1, streamer=streamer)
    model.generate(
        SOURCES[:1], max_new_tokens=4, num_beams=1, assistant_model=tiny_model("dwlstm", seed=1)
    )
    assert lean_calls == {"greedy": 0, "beam": 0}


def test_the_reason_for_transformers_loop_is_logged(monkeypatch):
    messages = []
    monkeypatch.setattr(generation_translation.logger, "info", messages.append)
    tiny_model("dwlstm").generate(SOURCES, max_new_tokens=3, num_beams=2, use_cache=False)
    assert messages == ["Decoding with transformers' loop: use_cache=False."]


# --- The shortlist --------------------------------------------------------------------------------


def random_shortlist(
    vocab_size: int, top_k: int = 3, always=(0, 1, 2, 3), seed: int = 0
) -> Shortlist:
    generator = torch.Generator().manual_seed(seed)
    return Shortlist(
        torch.randint(4, vocab_size, (vocab_size, top_k), generator=generator), torch.tensor(always)
    )


def test_the_union_is_the_rows_of_the_sources_and_the_tokens_always_allowed():
    shortlist = Shortlist(
        torch.tensor([[-1, -1], [-1, -1], [7, -1], [8, 9], [5, -1]]), torch.tensor([1, 2])
    )
    sources, mask = torch.tensor([[3, 2], [4, 0]]), torch.tensor([[1, 1], [1, 0]])
    assert shortlist.candidates(sources, mask).tolist() == [1, 2, 5, 7, 8, 9]
    # id 0's row is empty anyway
    assert shortlist.candidates(sources).tolist() == [1, 2, 5, 7, 8, 9]
    assert shortlist.candidates(sources, mask, extra=torch.tensor([30])).tolist() == [
        1,
        2,
        5,
        7,
        8,
        9,
        30,
    ]


@pytest.mark.parametrize("route", [None, "fbgemm", "int_mm"])
def test_the_output_projection_restricted_to_rows_gives_those_columns(route):
    model = int8_model("dwlstm", route)
    hidden, rows = torch.randn(5, model.config.d_model), torch.tensor([0, 3, 7, 39])
    full, restricted = model.lm_head(hidden), output_rows(model.lm_head, rows)(hidden)
    if route is None:
        torch.testing.assert_close(restricted, full[:, rows])
    else:  # int32 sums are exact: the same numbers
        assert torch.equal(restricted, full[:, rows])
    with pytest.raises(ValueError, match="Only an nn.Linear"):
        output_rows(model.model.decoder.layers[0].self_attn.qkv_proj, rows)


@pytest.mark.parametrize("case", MEMBER_CASES)
@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("route", [None, "fbgemm", "int_mm", "bfloat16"])
def test_decoding_restricts_every_step_to_the_union(case, num_beams, route, lean_calls):
    model = int8_model(case, route)
    model.shortlist = random_shortlist(model.config.vocab_size)
    union = model.shortlist.candidates(SOURCES, MASK)
    settings = dict(
        num_beams=num_beams, max_new_tokens=7, return_dict_in_generate=True, output_scores=True
    )
    lean = model.generate(SOURCES, attention_mask=MASK, use_shortlist=True, **settings)
    assert torch.isin(lean.sequences, union).all()
    for scores in lean.scores:  # over the whole vocabulary, -inf outside the union
        assert torch.isinf(
            scores[:, ~torch.isin(torch.arange(model.config.vocab_size), union)]
        ).all()
    # transformers' loop with the same restriction (mask, and renormalisation in beam search): the
    # same translations
    stock = model.generate(
        SOURCES, attention_mask=MASK, use_shortlist=True, lean_decoding=False, **settings
    )
    assert torch.equal(lean.sequences, stock.sequences)
    for ours, theirs in zip(lean.scores, stock.scores):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert sum(lean_calls.values()) == 1


@pytest.mark.parametrize("case", MEMBER_CASES)
@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_a_shortlist_holding_the_winners_decodes_what_the_full_vocabulary_does(
    case, cache_implementation
):
    model = eos_prone(tiny_model(case))
    settings = dict(max_new_tokens=7, cache_implementation=cache_implementation)
    greedy = model.generate(SOURCES, attention_mask=MASK, num_beams=1, **settings)
    beam = model.generate(SOURCES, attention_mask=MASK, num_beams=3, **settings)
    vocab_size = model.config.vocab_size
    # Greedy: the tokens it chose, and nothing else from a random table.
    model.shortlist = Shortlist(torch.full((vocab_size, 1), -1), greedy.unique())
    assert len(model.shortlist.candidates(SOURCES, MASK)) < vocab_size
    assert torch.equal(
        model.generate(SOURCES, attention_mask=MASK, num_beams=1, use_shortlist=True, **settings),
        greedy,
    )
    # Beam search renormalises over the shortlist: with every token allowed, it is the full
    # vocabulary's search.
    model.shortlist = Shortlist(
        torch.arange(vocab_size).flip(0)[None].repeat(vocab_size, 1), torch.tensor([EOS])
    )
    assert torch.equal(
        model.generate(SOURCES, attention_mask=MASK, num_beams=3, use_shortlist=True, **settings),
        beam,
    )


@pytest.mark.parametrize("num_beams", [1, 3])
def test_a_processor_of_the_whole_vocabulary_is_applied_over_the_shortlist_in_the_loop(
    num_beams, lean_calls
):
    """A processor this loop does not know is called on the whole vocabulary's scores (-inf outside
    the shortlist), and the shortlist's columns of its result are kept: the banned token never
    appears."""
    model = tiny_model("dwlstm")
    model.shortlist = random_shortlist(model.config.vocab_size)
    union = model.shortlist.candidates(SOURCES, MASK)
    settings = dict(attention_mask=MASK, num_beams=num_beams, max_new_tokens=6, use_shortlist=True)
    unbanned = model.generate(SOURCES, **settings)
    banned = int(unbanned[0, 1])  # the first sentence's first token
    output = model.generate(
        SOURCES, **settings, logits_processor=LogitsProcessorList([BanToken(banned)])
    )
    assert lean_calls == {"greedy": 2 * int(num_beams == 1), "beam": 2 * int(num_beams > 1)}
    assert torch.isin(output, union).all() and not torch.isin(banned, output)


def test_a_shortlist_in_transformers_loop_is_said_with_the_reason():
    """Asking for a shortlist or compiled steps where only transformers' loop can decode (here:
    sampling) warns with the reason, and the shortlist still restricts transformers' loop."""
    model = tiny_model("dwlstm")
    model.shortlist = random_shortlist(model.config.vocab_size)
    union = model.shortlist.candidates(SOURCES, MASK)
    torch.manual_seed(0)
    with pytest.warns(
        UserWarning, match="use_shortlist decode in transformers' loop here, because of sample"
    ):
        output = model.generate(
            SOURCES,
            attention_mask=MASK,
            do_sample=True,
            num_beams=1,
            max_new_tokens=6,
            use_shortlist=True,
        )
    assert torch.isin(output[:, 1:], union).all()
    with pytest.warns(
        UserWarning,
        match="compile_decoding decode in transformers' loop here, because of a streamer",
    ):
        model.generate(
            SOURCES[:1],
            num_beams=1,
            max_new_tokens=3,
            compile_decoding=True,
            streamer=TextStreamer(NumberTokens()),
        )


def test_the_shortlist_is_off_by_default_and_refused_when_missing():
    model = tiny_model("dwlstm")
    with pytest.raises(
        ValueError, match="this model has no shortlist: build one with scripts/build_shortlist.py"
    ):
        model.generate(SOURCES, max_new_tokens=3, use_shortlist=True)
    model.shortlist = random_shortlist(model.config.vocab_size, top_k=1, always=(EOS,))
    plain = model.generate(SOURCES, max_new_tokens=6)
    assert torch.equal(plain, model.generate(SOURCES, max_new_tokens=6, use_shortlist=False))
    # the model's default, as generation_config.json can say
    model.generation_config.use_shortlist = True
    restricted = model.generate(SOURCES, max_new_tokens=6)
    # after the decoder start
    assert torch.isin(restricted[:, 1:], model.shortlist.candidates(SOURCES)).all()
    assert not torch.equal(restricted, plain)
    encoder_outputs = model.get_encoder()(input_ids=SOURCES)
    with pytest.raises(ValueError, match="needs the source token ids"):
        model.generate(encoder_outputs=encoder_outputs, max_new_tokens=3)


def test_saving_and_loading_carry_the_shortlist(tmp_path):
    model = tiny_model("dwlstm")
    model.save_pretrained(tmp_path / "plain")
    assert not (tmp_path / "plain" / SHORTLIST_FILE).exists()
    assert AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "plain").shortlist is None
    model.shortlist = random_shortlist(model.config.vocab_size)
    model.shortlist.metadata["corpus"] = "test"
    model.save_pretrained(tmp_path / "with")
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "with")
    assert torch.equal(loaded.shortlist.table, model.shortlist.table)
    assert torch.equal(loaded.shortlist.always, model.shortlist.always)
    assert loaded.shortlist.metadata == {"corpus": "test"}
    settings = dict(max_new_tokens=6, num_beams=2, use_shortlist=True)
    assert torch.equal(loaded.generate(SOURCES, **settings), model.generate(SOURCES, **settings))
    (tmp_path / "other.safetensors").write_bytes(
        (tmp_path / "with" / "model.safetensors").read_bytes()
    )
    with pytest.raises(ValueError, match="not a shortlist of this package"):
        Shortlist.load(tmp_path / "other.safetensors")


def test_a_model_loaded_by_its_remote_code_decodes_with_its_shortlist(tmp_path):
    model = tiny_model("dwlstm")
    model.shortlist = random_shortlist(model.config.vocab_size)
    model.save_pretrained(tmp_path / "model")
    settings = dict(max_new_tokens=6, num_beams=2, use_shortlist=True)
    expected = {
        "restricted": model.generate(SOURCES, **settings).tolist(),
        "stock": model.generate(
            SOURCES, max_new_tokens=6, num_beams=2, lean_decoding=False
        ).tolist(),
    }
    script = WITHOUT_PACKAGE + textwrap.dedent(
        f"""
        import json, sys, torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained("model", trust_remote_code=True).eval()
        assert model.__class__.__module__.startswith("transformers_modules"), model.__class__.__module__
        sources = torch.tensor({SOURCES.tolist()})
        print(json.dumps({{"restricted": model.generate(sources, **{settings!r}).tolist(),
                          "stock": model.generate(sources, max_new_tokens=6, num_beams=2).tolist()}}))
        """  # noqa: E501
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


def test_transformers_loop_masks_what_is_outside_the_shortlist():
    scores = torch.zeros(2, 6)
    masked = ShortlistLogitsMask(torch.tensor([1, 4, 9]))(None, scores)
    assert torch.isinf(masked[:, [0, 2, 3, 5]]).all() and (masked[:, [1, 4]] == 0).all()
    assert (scores == 0).all()  # not in place: transformers' loop may hold the scores


def test_int8_models_keep_their_projection_for_other_copies():
    """Restricting an int8 projection builds a new module: the model's own is untouched."""
    model = prepare_for_inference(tiny_model("dwlstm"), quantize="int8")
    before = copy.deepcopy(model.lm_head.state_dict())
    output_rows(model.lm_head, torch.tensor([1, 2]))
    assert all(
        torch.equal(before[name], value) for name, value in model.lm_head.state_dict().items()
    )


# --- Compiled decoding ----------------------------------------------------------------------------


def compile_options(backend, **options) -> dict:
    """generate() options for compiled decoding steps: `fullgraph`, so that a graph break fails
    the test."""
    return dict(
        compile_decoding=True,
        compile_config=CompileConfig(backend=backend, fullgraph=True, mode="default", **options),
    )


@pytest.mark.parametrize("case", MEMBER_CASES)
def test_compiled_decoding_steps_decode_what_eager_steps_decode(case, lean_calls, fresh_compiler):
    """Every member, greedy and beam: the steps after the first two are captured whole (no graph
    break) and decode the same tokens and scores; one graph a search, whatever the cache's
    length."""
    model = tiny_model(case)
    for num_beams in (1, 3):
        counter = GraphCounter()
        settings = dict(
            num_beams=num_beams, max_new_tokens=7, return_dict_in_generate=True, output_scores=True
        )
        eager = model.generate(SOURCES, attention_mask=MASK, **settings)
        compiled = model.generate(
            SOURCES, attention_mask=MASK, **settings, **compile_options(counter)
        )
        assert_same_output(compiled, eager)
        assert counter.graphs == 1
    assert lean_calls == {"greedy": 2, "beam": 2}


def test_compiled_decoding_of_language_aware_models_decodes_the_same(fresh_compiler):
    model = eos_prone(
        tiny_model(
            "dwlstm",
            language_pairs=["en-de", "en-fr", "de-en"],
            language_tag_ids=LANGUAGE_TAGS,
            language_aware_norm=True,
            language_aware_transform=True,
        )
    )
    sources = SOURCES.clone()
    sources[:, 0] = torch.tensor(list(LANGUAGE_TAGS.values()))
    counter = GraphCounter()
    for num_beams in (1, 3):
        eager = model.generate(sources, attention_mask=MASK, num_beams=num_beams, max_new_tokens=6)
        assert torch.equal(
            model.generate(
                sources,
                attention_mask=MASK,
                num_beams=num_beams,
                max_new_tokens=6,
                **compile_options(counter),
            ),
            eager,
        )
    assert counter.graphs == 2


def test_one_compiled_graph_serves_batches_of_any_size(fresh_compiler):
    """The batch's size is a dynamic size from the first graph: other sizes compile nothing new."""
    model = tiny_model("dwlstm")
    counter = GraphCounter()
    options = compile_options(counter)
    for rows in (3, 2, 5):
        sources, mask = torch.cat([SOURCES, SOURCES])[:rows], torch.cat([MASK, MASK])[:rows]
        eager = model.generate(sources, attention_mask=mask, num_beams=1, max_new_tokens=6)
        assert torch.equal(
            model.generate(sources, attention_mask=mask, num_beams=1, max_new_tokens=6, **options),
            eager,
        )
    assert counter.graphs == 1


@pytest.fixture
def recompile_limit_of_one():
    with torch._dynamo.config.patch(recompile_limit=1):
        yield


def test_each_model_keeps_its_own_compiled_graphs(fresh_compiler, recompile_limit_of_one):
    """Graphs and the recompile limit are per model: a float32 and a bfloat16 model (different
    dtypes, as in a process serving two precisions) decoding in turn compile one graph each and stay
    compiled, with a limit of 1 graph."""
    models = [
        tiny_model("dwlstm"),
        prepare_for_inference(tiny_model("dwlstm", seed=1), dtype="bfloat16", allow_slow=True),
    ]
    counter = GraphCounter()
    options = compile_options(counter)
    eager = [
        model.generate(SOURCES, attention_mask=MASK, num_beams=1, max_new_tokens=6)
        for model in models
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no model falls back to eager steps
        for _ in range(2):
            for model, expected in zip(models, eager):
                output = model.generate(
                    SOURCES, attention_mask=MASK, num_beams=1, max_new_tokens=6, **options
                )
                assert torch.equal(output, expected)
    assert counter.graphs == 2


def test_a_model_past_the_recompile_limit_says_so_once_and_decodes_eagerly(
    fresh_compiler, recompile_limit_of_one
):
    model = tiny_model("dwlstm")
    counter = GraphCounter()
    options = compile_options(counter)
    model.generate(SOURCES, attention_mask=MASK, num_beams=1, max_new_tokens=6, **options)
    with pytest.warns(
        UserWarning, match="reached torch.compile's recompile limit \\(1 graphs\\) and runs eagerly"
    ):
        output = model.generate(
            SOURCES[:2], attention_mask=MASK[:2], num_beams=2, max_new_tokens=6, **options
        )
    assert torch.equal(
        output, model.generate(SOURCES[:2], attention_mask=MASK[:2], num_beams=2, max_new_tokens=6)
    )
    with warnings.catch_warnings():
        # said once: later calls run eagerly without compiling or warning again
        warnings.simplefilter("error")
        model.generate(
            SOURCES[:1], attention_mask=MASK[:1], num_beams=1, max_new_tokens=6, **options
        )
    assert counter.graphs == 1


@pytest.mark.parametrize("route", ["fbgemm", "int_mm"])
def test_compiled_int8_steps_keep_their_int8_products(route, fresh_compiler):
    """torch.compile cannot trace fbgemm's packed weight: the product runs as this package's custom
    operator, and torch._int_mm stays in the graph. Both decode what eager int8 decodes, after a
    copy of the model too (new packed weights, registered at the next compiled decode)."""
    captured = []

    def capture(graph_module, example_inputs):
        captured.append(str(graph_module.graph))
        return graph_module.forward

    model = copy.deepcopy(int8_model("dwlstm", route))
    eager = model.generate(SOURCES, attention_mask=MASK, num_beams=3, max_new_tokens=6)
    assert torch.equal(
        model.generate(
            SOURCES, attention_mask=MASK, num_beams=3, max_new_tokens=6, **compile_options(capture)
        ),
        eager,
    )
    product = "fbgemm_unit_range_linear" if route == "fbgemm" else "_int_mm"
    # each decoder layer's projections
    assert len(captured) == 1 and captured[0].count(product) >= 3 * 2 * 3


def test_compiled_decoding_with_inductor_decodes_what_eager_decoding_decodes(fresh_compiler):
    """The real compiler (inductor, the default) on an int8 model by fbgemm's route, beam search:
    the same tokens; on a machine without a C++ compiler, the refusal that says so."""
    model = int8_model("dwlstm", "fbgemm")
    eager = model.generate(SOURCES, attention_mask=MASK, num_beams=2, max_new_tokens=6)
    try:
        cpp_builder.get_cpp_compiler()
    except Exception:
        with pytest.raises(RuntimeError, match="needs a C.. compiler"):
            model.generate(
                SOURCES, attention_mask=MASK, num_beams=2, max_new_tokens=6, compile_decoding=True
            )
        return
    assert torch.equal(
        model.generate(
            SOURCES, attention_mask=MASK, num_beams=2, max_new_tokens=6, compile_decoding=True
        ),
        eager,
    )


def test_compiled_decoding_without_a_cpp_compiler_is_refused_before_decoding(
    monkeypatch, fresh_compiler
):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(generation_translation.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="Install g\\+\\+ or clang\\+\\+"):
        tiny_model("dwlstm").generate(
            SOURCES, attention_mask=MASK, max_new_tokens=4, compile_decoding=True
        )
    monkeypatch.setenv("CXX", "/no/such/compiler")
    with pytest.raises(RuntimeError, match="looked for /no/such/compiler"):
        tiny_model("dwlstm").generate(
            SOURCES, attention_mask=MASK, max_new_tokens=4, compile_decoding=True
        )


def test_a_static_cache_with_a_compile_config_is_compiled_in_this_loop(lean_calls, fresh_compiler):
    """Where transformers' own loop would compile its forward (a static cache and a compile_config
    that allows the CPU), this loop does the same."""
    model = tiny_model("dwlstm")
    counter = GraphCounter()
    config = CompileConfig(backend=counter, fullgraph=True, mode="default")
    config._compile_all_devices = True
    for num_beams in (1, 3):
        eager = model.generate(
            SOURCES,
            attention_mask=MASK,
            num_beams=num_beams,
            max_new_tokens=6,
            cache_implementation="static",
        )
        assert torch.equal(
            model.generate(
                SOURCES,
                attention_mask=MASK,
                num_beams=num_beams,
                max_new_tokens=6,
                cache_implementation="static",
                compile_config=config,
            ),
            eager,
        )
    assert counter.graphs == 2 and lean_calls == {"greedy": 2, "beam": 2}


def test_a_copy_of_a_compiled_model_decodes_with_its_own_weights(fresh_compiler):
    """`copy.deepcopy` keeps functions as they are: a compiled step kept on the model would run the
    original's weights in the copy. The copy decodes what it decodes eagerly."""
    model = tiny_model("dwlstm")
    options = compile_options(GraphCounter())
    model.generate(SOURCES, attention_mask=MASK, num_beams=1, max_new_tokens=6, **options)
    copied = copy.deepcopy(model)
    with torch.no_grad():
        copied.lm_head.weight.mul_(-1)
    eager = copied.generate(SOURCES, attention_mask=MASK, num_beams=1, max_new_tokens=6)
    assert not torch.equal(
        eager, model.generate(SOURCES, attention_mask=MASK, num_beams=1, max_new_tokens=6)
    )
    assert torch.equal(
        copied.generate(SOURCES, attention_mask=MASK, num_beams=1, max_new_tokens=6, **options),
        eager,
    )


@pytest.mark.parametrize("route", [None, "fbgemm"])
def test_compiled_decoding_with_a_shortlist_decodes_the_same(route, fresh_compiler):
    """With a shortlist the compiled graph is the encoder-decoder without its output projection,
    which the loop restricts to the batch's columns itself: the same tokens and scores as eager
    decoding over the shortlist."""
    model = tiny_model("dwlstm")  # not `eos_prone`: the sentences must outlive the eager steps
    if route is not None:
        quantize_int8(model, route=route)
    model.shortlist = random_shortlist(model.config.vocab_size)
    counter = GraphCounter()
    for num_beams in (1, 3):
        settings = dict(
            num_beams=num_beams,
            max_new_tokens=7,
            use_shortlist=True,
            return_dict_in_generate=True,
            output_scores=True,
        )
        assert_same_output(
            model.generate(SOURCES, attention_mask=MASK, **settings, **compile_options(counter)),
            model.generate(SOURCES, attention_mask=MASK, **settings),
        )
    assert counter.graphs == 2


def test_max_new_tokens_wins_over_the_saved_max_length_without_a_warning(caplog):
    """The saved generation config's max_length (the papers' 256) is a default: a call's
    max_new_tokens decides, as in transformers' own generate(), and nothing warns that both
    were set."""
    model = tiny_model("dwlstm")
    model.generation_config.max_length = 64
    with caplog.at_level("WARNING"):
        for num_beams in (1, 3):
            output = model.generate(
                SOURCES,
                attention_mask=MASK,
                num_beams=num_beams,
                max_new_tokens=5,
                min_new_tokens=5,
            )
            assert output.shape[1] == 1 + 5
    assert not [record for record in caplog.records if "max_length" in record.getMessage()]


def test_compiled_steps_are_refused_where_torch_cannot_trace_them(monkeypatch):
    """torch 2.6's torch.compile stops at transformers 5.24's model outputs: one line before
    decoding, not a dynamo traceback at the first step."""
    monkeypatch.setattr(generation_translation, "torch_compile_traces_steps", lambda: False)
    model = tiny_model("dwlstm")
    with pytest.raises(RuntimeError, match="Compiled decoding steps need a newer torch"):
        model.generate(random_ids(2, 5), max_new_tokens=3, compile_decoding=True)
