"""Compiled decoding steps that stay compiled: batches padded to buckets, a few graphs per model
whatever the batch shapes, and the tokens of eager decoding."""

import gc
import warnings
import weakref

import torch
from conftest import GraphCounter, random_ids, tiny_model
from transformers import CompileConfig

from modeling_dwlstm.generation_translation import (
    COMPILED_CALLS,
    SOURCE_BUCKET,
    bucket_sentences,
    bucketed_inputs,
)

# (sentences, source length, beams): sizes on both sides of the attention routes' threshold, lengths
# across several source buckets, greedy and beam search in turn
SHAPES = [(3, 7, 1), (5, 20, 4), (1, 33, 1), (40, 9, 4), (9, 17, 1), (17, 30, 4)]


def varied_batch(sentences: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sources with padding of every length (the first one unpadded, so the batch is
    `length` long)."""
    sources = random_ids(sentences, length, seed=seed)
    lengths = torch.randint(
        1, length + 1, (sentences,), generator=torch.Generator().manual_seed(seed)
    )
    lengths[0] = length
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    return sources, mask


def test_batches_are_padded_to_a_few_buckets():
    model = tiny_model("dwlstm")
    sizes = (1, 2, 3, 16, 17, 63, 64, 65, 200)
    assert [bucket_sentences(n) for n in sizes] == [2, 2, 4, 16, 32, 64, 64, 128, 256]
    sources, mask = varied_batch(3, 20, seed=0)
    padded = bucketed_inputs(model, sources, {"input_ids": sources, "attention_mask": mask})
    assert padded["input_ids"].shape == padded["attention_mask"].shape == (4, 2 * SOURCE_BUCKET)
    assert torch.equal(padded["input_ids"][:3, :20], sources) and torch.equal(
        padded["attention_mask"][:3, :20], mask
    )
    assert not padded["attention_mask"][:, 20:].any()  # the added positions are masked
    # the added sentences: copies of the first
    assert (padded["input_ids"][3:] == padded["input_ids"][0]).all()
    # other inputs that follow the rows: left as they are
    assert (
        bucketed_inputs(
            model, sources, {"attention_mask": mask, "encoder_outputs": torch.zeros(3, 20, 8)}
        )
        is None
    )


def test_compiled_decoding_compiles_a_few_graphs_whatever_the_batch_shapes(fresh_compiler):
    """Greedy and beam search over batches of many shapes: the tokens of eager decoding of the batch
    as given, no model falling back to eager steps, and one graph compiled per search (the backend
    counts each one it is given): no size of the batch is a guard of a graph."""
    model = tiny_model("dwlstm")
    counter = GraphCounter()
    options = dict(
        compile_decoding=True,
        compile_config=CompileConfig(backend=counter, fullgraph=True, mode="default"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recompile limit reached
        for seed, (sentences, length, beams) in enumerate(SHAPES):
            sources, mask = varied_batch(sentences, length, seed)
            settings = dict(attention_mask=mask, num_beams=beams, max_new_tokens=5)
            eager = model.generate(sources, **settings)
            compiled = model.generate(sources, **settings, **options)
            assert torch.equal(compiled, eager), (sentences, length, beams)
    assert counter.graphs == 2


class SizeRecorder(GraphCounter):
    """`GraphCounter` that also keeps every dynamic size of the captured graphs' values, as
    torch.compile's symbolic expressions."""

    def __init__(self):
        super().__init__()
        self.sizes = set()

    def __call__(self, graph_module, example_inputs):
        for node in graph_module.graph.nodes:
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor):
                dynamic = [size for size in value.shape if isinstance(size, torch.SymInt)]
                self.sizes.update(str(size) for size in dynamic)
        return super().__call__(graph_module, example_inputs)


def test_a_compiled_beam_search_step_knows_its_beams_per_sentence(fresh_compiler):
    """In a compiled beam-search step the beams of a sentence are a number: the decoder rows are a
    multiple of the sentences, never a quotient of two dynamic sizes (a floor division that
    torch.compile then reasoned over for minutes at base size)."""
    model = tiny_model("dwlstm")
    recorder = SizeRecorder()
    options = dict(
        compile_decoding=True,
        compile_config=CompileConfig(backend=recorder, fullgraph=True, mode="default"),
    )
    sources, mask = varied_batch(5, 20, seed=0)
    model.generate(sources, attention_mask=mask, num_beams=3, max_new_tokens=5, **options)
    assert recorder.graphs == 1 and recorder.sizes  # the rows and lengths are dynamic
    assert not [size for size in recorder.sizes if "//" in size], recorder.sizes


def test_a_model_decoded_with_compiled_steps_is_freed_when_dropped(fresh_compiler):
    """A process that evaluates checkpoints in a loop drops each model: its compiled step (kept
    beside it) must not keep it, or its weights, alive."""
    model = tiny_model("dwlstm")
    options = dict(
        compile_decoding=True,
        compile_config=CompileConfig(backend=GraphCounter(), fullgraph=True, mode="default"),
    )
    sources, mask = varied_batch(3, 7, seed=0)
    for beams in (1, 3):
        model.generate(sources, attention_mask=mask, num_beams=beams, max_new_tokens=4, **options)
    assert model in COMPILED_CALLS
    dropped, weights = weakref.ref(model), weakref.ref(next(model.parameters()))
    del model
    gc.collect()
    assert dropped() is None and weights() is None
