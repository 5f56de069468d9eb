"""Low precision and standard tools: every projection of every member is an nn.Linear that a
quantiser and a LoRA adapter reach; bfloat16 and int8 models decode like float32 ones; the script
options."""

import copy
import json
import os
import platform
import subprocess
import sys
from collections import namedtuple

import pytest
import torch
from conftest import CASES, random_ids, run_script, tiny_model, train_on_pairs
from peft import LoraConfig, get_peft_model
from torch import nn
from torch.overrides import TorchFunctionMode
from torchao.quantization import Int8WeightOnlyConfig, quantize_
from transformers import AutoModelForSeq2SeqLM, pipeline
from transformers.testing_utils import CaptureLogger

from modeling_dwlstm import MEMBERS, DwLstmConfig, ResidualTransformerConfig, precision
from modeling_dwlstm.building_blocks import FusedLinear
from modeling_dwlstm.lora import ATTENTION_PROJECTIONS, attention_inputs_reached, projection_names
from modeling_dwlstm.lora import logger as lora_logger
from modeling_dwlstm.modeling_dwlstm import DepthWiseLstm, DepthWiseLstmGates
from modeling_dwlstm.precision import (
    INT8_ROUTES,
    PRECISIONS,
    CpuFeatures,
    cpu_class,
    cpu_features,
    fastest_precision,
    int8_route,
    is_quantized,
    linear_modules,
    prepare_for_inference,
    quantize_int8,
)
from modeling_dwlstm.tokenization_dwlstm import tokenizer_model_kwargs, train_joint_bpe_tokenizer
from nmt_toolkit import allocator
from nmt_toolkit.evaluation import translate_sentences
from nmt_toolkit.quickstart_corpus import generate_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

# One tiny model per member, plus the depth-wise LSTM's ways of sharing and wiring its gates.
MEMBER_CASES = [
    next(case for case, (config_class, _) in CASES.items() if config_class is member.config_class)
    for member in MEMBERS
]
DWLSTM_CASES = [
    "dwlstm-glu-global-gates-shared-hidden-concat",
    "dwlstm-ffn-none-gates-own-hidden-add",
    "dwlstm-two-lstm",
]
# the two routes' int8 products
INT8_KERNELS = (torch._int_mm, torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32)
INT8_MIXINS = {"int_mm": precision.Int8Projection, "fbgemm": precision.FbgemmInt8Projection}


@pytest.fixture(params=INT8_ROUTES)
def route(request, monkeypatch):
    """Each int8 route in turn as the one this CPU takes (both compute on any x86 CPU; only the
    speed differs)."""
    monkeypatch.setattr(precision, "int8_route", lambda features=None: request.param)
    return request.param


class LinearCalls(TorchFunctionMode):
    """Records the weight type of every F.linear call (nn.Linear and subclasses call it) and counts
    int8 GEMMs."""

    def __init__(self):
        super().__init__()
        self.weight_types, self.int8_products = [], 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is nn.functional.linear:
            self.weight_types.append(type(args[1] if len(args) > 1 else kwargs["weight"]))
        self.int8_products += func in INT8_KERNELS
        return func(*args, **kwargs)


def linear_calls(model) -> LinearCalls:
    with torch.no_grad(), LinearCalls() as calls:
        model(input_ids=random_ids(2, 5), decoder_input_ids=random_ids(2, 4, seed=2))
    return calls


@pytest.mark.parametrize("case", MEMBER_CASES + DWLSTM_CASES)
def test_int8_reaches_every_projection_of_every_member(case, route):
    model = tiny_model(case)
    projections = linear_modules(model)
    assert any(isinstance(module, FusedLinear) for module in projections)  # subclasses are counted
    assert not any(is_quantized(module) for module in projections)
    before = linear_calls(model)
    assert before.weight_types and all(weight is nn.Parameter for weight in before.weight_types)
    prepare_for_inference(model, quantize="int8")
    assert [is_quantized(module) for module in projections] == [True] * len(projections)
    # Every linear map the forward pass computes, shared gates in each layer using them included, is
    # an int8 product now, and the modules kept their classes (the gates their `activations`).
    after = linear_calls(model)
    assert (after.weight_types, after.int8_products) == ([], len(before.weight_types))
    assert all(module.weight.dtype == torch.int8 for module in projections)
    assert any(isinstance(module, FusedLinear) for module in projections)
    assert model.int8_route == route and all(
        isinstance(module, INT8_MIXINS[route]) for module in projections
    )
    assert (
        model.lm_head.weight is not model.model.shared.weight
        and model.model.shared.weight.dtype == torch.float32
    )


@pytest.mark.parametrize("case", MEMBER_CASES + DWLSTM_CASES)
def test_torchaos_standard_quantiser_reaches_every_projection_of_every_member(case):
    model = tiny_model(case)
    calls = len(linear_calls(model).weight_types)
    # selects by isinstance(module, nn.Linear), as tools do
    quantize_(model, Int8WeightOnlyConfig())
    weight_types = linear_calls(model).weight_types
    assert len(weight_types) == calls and not any(
        weight is nn.Parameter for weight in weight_types
    ), weight_types


def test_int8_product_equals_the_dequantised_float_product():
    """`Int8Projection` computes exactly (x_q W_q^T) s_W s_x + b: checked against the same
    arithmetic in float64."""
    torch.manual_seed(0)
    linear = nn.Linear(24, 40)
    inputs = torch.randn(3, 5, 24)
    inputs[0, 0] = 0  # an all-zero row (padding) stays zero, no division by zero
    weight = linear.weight.detach().double()
    quantize_int8(linear.eval(), route="int_mm")
    weight_scale = weight.abs().amax(1) / 127
    weight_q = (weight / weight_scale[:, None]).round()
    assert torch.equal(linear.weight, weight_q.to(torch.int8))
    rows = inputs.reshape(-1, 24).double()
    scale = rows.abs().amax(1, keepdim=True).clamp(min=1e-12) / linear.activation_range
    expected = ((rows / scale).round() @ weight_q.t()) * weight_scale * scale + linear.bias.double()
    output = linear(inputs)
    assert output.shape == (3, 5, 40) and output.dtype == torch.float32
    torch.testing.assert_close(output.reshape(-1, 40).double(), expected, rtol=1e-5, atol=1e-5)
    assert output[0, 0].equal(linear.bias.detach())
    assert linear(inputs[:0]).shape == (0, 5, 40)  # an empty batch
    assert linear(inputs.bfloat16()).dtype == torch.bfloat16  # the output in the model's dtype


def test_fbgemm_int8_product_is_the_float_product_within_int8_error():
    """The fbgemm route: per-row int8 weights, 7-bit activations with a scale per token; within 2%
    of the float product, the bias included, padding rows giving the bias, any batch shape, the
    output in the input's dtype, and each row's result independent of the other rows of its
    batch."""
    torch.manual_seed(0)
    linear = nn.Linear(64, 40)
    inputs = torch.randn(3, 5, 64)
    inputs[0, 0] = 0
    expected = linear(inputs).detach()
    quantize_int8(linear.eval(), route="fbgemm")
    output = linear(inputs)
    assert type(linear).__name__ == "FbgemmInt8Linear" and linear.weight.dtype == torch.int8
    assert output.shape == (3, 5, 40) and output.dtype == torch.float32
    assert (output - expected).norm() < 0.02 * expected.norm()
    torch.testing.assert_close(output[0, 0], linear.bias.detach(), atol=1e-6, rtol=0)
    assert linear(inputs[:0]).shape == (0, 5, 40)
    assert linear(inputs.bfloat16()).dtype == torch.bfloat16
    alone, loud = linear(inputs[1:2]), torch.cat([inputs[1:2], 100 * torch.randn(1, 5, 64)])
    assert torch.equal(linear(loud)[:1], alone)  # a large neighbour changes nothing


def test_fbgemm_int8_product_is_the_7_bit_arithmetic_and_fbgemms_own_dynamic_quantisation():
    """The fbgemm route computes exactly ((q_t - 64) @ W_q^T) (2/127) s_W s_t + b with q_t = round(x_t / s_t / (2/127))
    + 64 in 0..128 (per token; +1 rounds to 128); and its fixed quantisation is the one fbgemm's
      dynamic linear
    chooses for rows pinned to [-1, 1], so both give the same floats."""  # noqa: E501
    torch.manual_seed(0)
    linear = nn.Linear(64, 40)
    inputs = torch.randn(6, 64)
    inputs[0] = 0
    quantize_int8(linear.eval(), route="fbgemm")
    output = linear(inputs)
    rows = inputs.double()
    scale = rows.abs().amax(1, keepdim=True).clamp(min=1e-12)
    step, zero_point = precision.UNIT_RANGE_QUANTIZATION
    quantized = ((rows / scale / step).round() + zero_point).clamp(0, 255) - zero_point
    weight_scale = linear.weight_scale.double()
    expected = (
        quantized @ linear.weight.double().t()
    ) * step * weight_scale * scale + linear.bias.double()
    torch.testing.assert_close(output.double(), expected, rtol=1e-5, atol=1e-5)
    pinned = torch.cat([(inputs / scale.float()), torch.tensor([[1.0], [-1.0]]).expand(2, 64)])
    dynamic = torch.ops.quantized.linear_dynamic(pinned, linear.packed_weight, True)[:-2]
    assert torch.equal(output, torch.addcmul(linear.bias.detach(), dynamic, scale.float()))


@pytest.mark.parametrize("route", ["int_mm", "fbgemm"])
def test_an_int8_projection_without_a_bias_or_with_a_bfloat16_one_is_rescaled_the_same(route):
    """The rescaling (`precision.rescaled`) with no bias equals the one with a zero bias, and a
    bfloat16 bias (a model cast to bfloat16, then quantised) is added in float32, as a float32
    one is."""
    torch.manual_seed(0)
    with_bias, inputs = nn.Linear(32, 24), torch.randn(4, 32)
    without = nn.Linear(32, 24, bias=False)
    with torch.no_grad():
        without.weight.copy_(with_bias.weight)
        with_bias.bias.zero_()
    bfloat16_bias = copy.deepcopy(with_bias)
    bfloat16_bias.bias.data = bfloat16_bias.bias.data.bfloat16()
    outputs = [
        quantize_int8(module.eval(), route=route)(inputs)
        for module in (with_bias, without, bfloat16_bias)
    ]
    assert torch.equal(outputs[0], outputs[1]) and torch.equal(outputs[0], outputs[2])
    assert outputs[2].dtype == torch.float32


AVX512_FLAGS = "flags : fpu avx2 avx512f avx512_vnni avx512_bf16 amx_int8 amx_bf16"


@pytest.mark.parametrize(
    "capability, onednn_isa, vnni, bfloat16, amx, expected_route",
    [
        ("AVX512", None, True, True, True, "int_mm"),  # an AMX server CPU
        ("AVX512", "AVX512_CORE_BF16", True, True, False, "int_mm"),  # oneDNN capped below AMX
        ("AVX512", "AVX512_CORE_AMX", True, True, True, "int_mm"),
        # imitating AVX2 (ATEN_CPU_CAPABILITY=avx2): flags capped
        ("AVX2", None, False, False, False, "fbgemm"),
        # oneDNN capped to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2)
        ("AVX512", "AVX2", False, False, False, "fbgemm"),
    ],
)
def test_cpu_features_follow_the_flags_capped_by_the_imitated_level(
    monkeypatch, tmp_path, capability, onednn_isa, vnni, bfloat16, amx, expected_route
):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(AVX512_FLAGS)
    real_path = precision.Path
    monkeypatch.setattr(
        precision, "Path", lambda name: cpuinfo if name == "/proc/cpuinfo" else real_path(name)
    )
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    if onednn_isa:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", onednn_isa)
    else:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    precision.cpu_features.cache_clear()
    try:
        features = cpu_features()
        assert (
            features.capability,
            features.int8_dot_products,
            features.native_bfloat16,
            features.matrix_tiles,
        ) == (capability, vnni, bfloat16, amx)
        assert int8_route(features) == expected_route
    finally:
        precision.cpu_features.cache_clear()


# Three 12 MB blocks allocated, written and freed, ten times: the pattern of a decoding step's
# largest tensors. With glibc's defaults the first free raises its mmap threshold to 12 MB and its
# trim threshold to 24 MB, so what is freed at the top of the heap beyond that is returned to the
# system at every step and faulted back in at the next.
ALLOCATION_STEPS = """
import ctypes, resource, sys
if sys.argv[1] == "kept":
    from nmt_toolkit.allocator import keep_freed_memory
    assert keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
size, faults = 12 << 20, []
for step in range(10):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(size) for _ in range(3)]
    for block in blocks:
        ctypes.memset(block, 1, size)
    for block in reversed(blocks):
        libc.free(block)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[2:]) // 8)
"""


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="glibc's allocator (every Linux CI machine has it)"
)
def test_kept_freed_memory_is_reused_without_faulting_pages_in_again():
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("MALLOC_")
    }
    faults = {}
    for setting in ("default", "kept"):
        result = subprocess.run(
            [sys.executable, "-c", ALLOCATION_STEPS, setting],
            capture_output=True,
            text=True,
            env=environment,
            check=True,
        )
        faults[setting] = int(result.stdout.split()[-1])
    # 6,112 here: 24 MB of 4 kB pages faulted in again at every step
    assert faults["default"] > 1000, faults
    assert faults["kept"] < faults["default"] / 20, faults  # 0 here


def test_keep_freed_memory_leaves_a_users_allocator_settings_and_other_c_libraries_alone(
    monkeypatch,
):
    calls = []

    class Libc:
        def mallopt(self, parameter, value):
            calls.append((parameter, value))
            return 1

    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda name: Libc())
    monkeypatch.setattr(allocator, "_freed_memory_kept", False)
    for name in allocator.ALLOCATOR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert not allocator.keep_freed_memory() and not calls
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", ""))  # e.g. musl
    assert not allocator.keep_freed_memory() and not calls
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("glibc", "2.36"))
    monkeypatch.setattr(allocator.platform, "system", lambda: "Linux")
    assert allocator.keep_freed_memory()
    assert calls == [
        (allocator.M_MMAP_THRESHOLD, 32 << 20),
        (allocator.M_TRIM_THRESHOLD, 2**31 - 1),
    ]
    assert allocator.keep_freed_memory() and len(calls) == 2  # once per process


def test_the_evaluation_script_refuses_bfloat16_where_it_is_slow_before_any_work(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(precision, "cpu_features", lambda: CpuFeatures("AVX2", False, False))
    with pytest.raises(ValueError, match="bfloat16 would decode several times slower than float32"):
        run_script(
            "evaluate_translation",
            "--model",
            tmp_path / "never-loaded",
            "--output_dir",
            tmp_path / "out",
            "--source_file",
            tmp_path / "s",
            "--reference_file",
            tmp_path / "r",
            "--dtype",
            "bfloat16",
        )
    assert not (tmp_path / "out").exists()


def test_slow_routes_are_refused_with_what_to_use(monkeypatch):
    avx2 = CpuFeatures(capability="AVX2", int8_dot_products=False, native_bfloat16=False)
    monkeypatch.setattr(precision, "cpu_features", lambda: avx2)
    with pytest.raises(
        ValueError,
        match=r"bfloat16 would decode several times slower than float32 on this CPU \(AVX2",
    ):
        prepare_for_inference(tiny_model("dwlstm"), "bfloat16")
    assert (
        next(
            prepare_for_inference(tiny_model("dwlstm"), "bfloat16", allow_slow=True).parameters()
        ).dtype
        == torch.bfloat16
    )
    assert prepare_for_inference(tiny_model("dwlstm"), quantize="int8").int8_route == "fbgemm"
    monkeypatch.setattr(precision, "fbgemm_available", lambda: False)
    with pytest.raises(ValueError, match="int8 would be slower than float32 on this CPU"):
        prepare_for_inference(tiny_model("dwlstm"), quantize="int8")
    vnni = CpuFeatures(capability="AVX512", int8_dot_products=True, native_bfloat16=True)
    monkeypatch.setattr(precision, "cpu_features", lambda: vnni)
    assert prepare_for_inference(tiny_model("dwlstm"), "bfloat16", "int8").int8_route == "int_mm"


AMX = CpuFeatures("AVX512", int8_dot_products=True, native_bfloat16=True, matrix_tiles=True)
AVX512_VNNI_BF16 = CpuFeatures("AVX512", int8_dot_products=True, native_bfloat16=True)
AVX512_VNNI = CpuFeatures("AVX512", int8_dot_products=True, native_bfloat16=False)
AVX2 = CpuFeatures("AVX2", int8_dot_products=False, native_bfloat16=False)
NO_AVX = CpuFeatures("DEFAULT", int8_dot_products=False, native_bfloat16=False)
LOGITS_DTYPES = {
    "float32": torch.float32,
    "int8": torch.float32,
    "bfloat16": torch.bfloat16,
    "bfloat16+int8": torch.bfloat16,
}


@pytest.mark.parametrize(
    "features, fbgemm, expected_class, expected",
    [
        (AMX, True, "AMX", "bfloat16"),
        (AVX512_VNNI_BF16, True, "AVX-512 VNNI", "int8"),
        (AVX512_VNNI, True, "AVX-512 VNNI", "int8"),
        (AVX2, True, "AVX2", "int8"),
        (AVX2, False, "other", "float32"),  # a build without fbgemm
        (NO_AVX, True, "other", "float32"),
    ],
)
def test_auto_takes_the_cpu_classs_fastest_precision_and_equals_that_choice_made_explicitly(
    monkeypatch, features, fbgemm, expected_class, expected
):
    monkeypatch.setattr(precision, "cpu_features", lambda: features)
    monkeypatch.setattr(precision, "fbgemm_available", lambda: fbgemm)
    assert cpu_class().name == expected_class and fastest_precision("cpu") == expected
    auto = prepare_for_inference(tiny_model("dwlstm"), precision="auto")
    explicit = prepare_for_inference(tiny_model("dwlstm"), *PRECISIONS[expected])
    named = prepare_for_inference(tiny_model("dwlstm"), precision=expected)
    assert (
        auto.inference_precision
        == explicit.inference_precision
        == named.inference_precision
        == expected
    )
    assert getattr(auto, "int8_route", None) == getattr(explicit, "int8_route", None)
    inputs = {"input_ids": random_ids(2, 5), "decoder_input_ids": random_ids(2, 4, seed=2)}
    with torch.inference_mode():
        logits = auto(**inputs).logits
        assert logits.dtype == LOGITS_DTYPES[expected]
        assert torch.equal(logits, explicit(**inputs).logits) and torch.equal(
            logits, named(**inputs).logits
        )


def test_auto_takes_bfloat16_on_a_gpu_that_has_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert fastest_precision("cuda") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert fastest_precision("cuda") == "float32"


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"precision": "int4"},
            r"precision must be auto or one of float32, bfloat16, int8, bfloat16\+int8, got 'int4'",
        ),
        (
            {"precision": "auto", "dtype": "bfloat16"},
            "precision='auto' sets the dtype and the quantisation itself",
        ),
        (
            {"precision": "int8", "quantize": "int8"},
            "precision='int8' sets the dtype and the quantisation itself",
        ),
    ],
)
def test_a_precision_beside_dtype_or_quantize_or_an_unknown_one_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        prepare_for_inference(tiny_model("dwlstm"), **options)


@pytest.mark.parametrize("case", ["dwlstm", *DWLSTM_CASES])
def test_lora_all_linear_wraps_every_projection_of_the_depthwise_lstm_gates_included(case):
    model = tiny_model(case)
    inputs = {"input_ids": random_ids(2, 5), "decoder_input_ids": random_ids(2, 4, seed=2)}
    with torch.no_grad():
        expected = model(**inputs).logits
    projections = [module for module in linear_modules(model) if module is not model.lm_head]
    assert sum(isinstance(module, DepthWiseLstmGates) for module in projections) >= 2
    # all but the output projection
    calls_without_adapter = len(linear_calls(model).weight_types) - 1
    # "all-linear" leaves out lm_head
    adapted = get_peft_model(model, LoraConfig(target_modules="all-linear", r=2))
    wrapped = [module.base_layer for module in adapted.modules() if hasattr(module, "lora_A")]
    assert {id(module) for module in wrapped} == {id(module) for module in projections}
    # Each step calls its gates through the owner, so layers sharing the gates all go through the
    # adapter.
    steps = [module for module in adapted.modules() if isinstance(module, DepthWiseLstm)]
    assert all(hasattr(step.gates, "lora_A") for step in steps)
    calls = []
    for module in adapted.modules():
        if hasattr(module, "lora_A"):
            module.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        # LoRA starts as the identity (B = 0)
        torch.testing.assert_close(adapted(**inputs).logits, expected)
    assert len(calls) == calls_without_adapter


def member_of(case: str):
    return next(member for member in MEMBERS if member.config_class is CASES[case][0])


# Every hidden computation of the depth-wise members: their projections' names depend on it.
NAMING_CASES = (
    MEMBER_CASES
    + DWLSTM_CASES
    + ["dwlstm-linear-none-gates-own-hidden-add", "rnn-linear-own-hidden-add"]
)


@pytest.mark.parametrize("case", NAMING_CASES)
def test_the_documented_lora_target_modules_reach_what_all_linear_reaches(case):
    """The attention's names and the member's own (`FamilyMember.projections`) name every projection
    but the output one; given as `target_modules`, they wrap what "all-linear" wraps, and nothing is
    reported."""
    model = tiny_model(case)
    names = projection_names(model) - {"lm_head"}
    assert names <= {*ATTENTION_PROJECTIONS, *member_of(case).projections}
    projections = [module for module in linear_modules(model) if module is not model.lm_head]
    with CaptureLogger(lora_logger) as captured:
        adapted = get_peft_model(model, LoraConfig(target_modules=sorted(names), r=2))
    assert captured.out == ""
    wrapped = [module.base_layer for module in adapted.modules() if hasattr(module, "lora_A")]
    assert {id(module) for module in wrapped} == {id(module) for module in projections}
    reached, total = attention_inputs_reached(adapted)
    # 2 + 3 self-attentions (q, k, v) and 3 cross-attentions (q, k, v)
    assert reached == total == 24


@pytest.mark.parametrize("case", MEMBER_CASES)
@pytest.mark.parametrize(
    "targets, unmatched", [(["q_proj", "v_proj"], "['v_proj']"), (["q_proj"], None)]
)
def test_lora_with_the_unfused_attention_names_is_reported(case, targets, unmatched):
    """The usual recipe's q_proj is only cross-attention's query here (self-attention's are fused
    into qkv_proj)."""
    with CaptureLogger(lora_logger) as captured:
        adapted = get_peft_model(tiny_model(case), LoraConfig(target_modules=targets, r=2))
    assert attention_inputs_reached(adapted) == (3, 24)
    assert "it reaches 3 of the 24 query/key/value projections" in captured.out
    assert ("match no module of this model" in captured.out) == (unmatched is not None)
    if unmatched:
        assert f"target_modules {unmatched} match no module" in captured.out
    assert "target_modules=['qkv_proj', 'q_proj', 'kv_proj', 'out_proj']" in captured.out
    assert 'target_modules="all-linear"' in captured.out


def test_lora_on_the_feed_forward_layers_only_is_taken_as_meant():
    with CaptureLogger(lora_logger) as captured:
        get_peft_model(tiny_model("residual-pre"), LoraConfig(target_modules=["fc1", "fc2"], r=2))
    assert captured.out == ""
    with CaptureLogger(lora_logger) as captured:  # but a name the model lacks is reported
        get_peft_model(
            tiny_model("residual-pre"), LoraConfig(target_modules=["fc1", "fc2", "v_proj"], r=2)
        )
    assert "target_modules ['v_proj'] match no module" in captured.out


Trained = namedtuple("Trained", "tokenizer models directories test")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tokenizer and tiny depth-wise LSTM and pre-norm models trained for 500 steps on the
    quickstart corpus (loss about 1.1): confident enough that low precision changes few decisions,
    and saved for the script."""
    pairs = generate_pairs(2000, seed=1)
    tokenizer = train_joint_bpe_tokenizer([text for pair in pairs for text in pair], vocab_size=300)
    models, directories = {}, {}
    for name, config_class, options in (
        ("dwlstm", DwLstmConfig, {}),
        ("residual-pre", ResidualTransformerConfig, {"norm_position": "pre"}),
    ):
        torch.manual_seed(0)
        config = config_class(
            **tokenizer_model_kwargs(tokenizer),
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            ffn_dim=64,
            max_position_embeddings=128,
            dropout=0.0,
            **options,
        )
        model = train_on_pairs(
            AutoModelForSeq2SeqLM.from_config(config), tokenizer, pairs, steps=500, wrap=1888
        )
        models[name], directories[name] = model, tmp_path_factory.mktemp(name)
        model.save_pretrained(directories[name])
        tokenizer.save_pretrained(directories[name])
    return Trained(tokenizer, models, directories, pairs[1900:])


# Logit error teacher-forced on 32 test pairs, as RMS(change) / RMS(logits): measured 0.011-0.012
# (bfloat16), 0.032-0.039 (int8), 0.034-0.042 (both), with 99.7-100% the same argmax; the largest
# single change, relative to the largest logit, reaches 0.15 on the fbgemm route (7-bit activations,
# pre-norm's outlier rows) and is only bounded loosely. The bounds leave room for other CPUs'
# kernels (7-bit int8 ranges without VNNI, AMX).
LOGIT_BOUND = {("bfloat16", "none"): 0.025, ("float32", "int8"): 0.07, ("bfloat16", "int8"): 0.08}
LARGEST_LOGIT_CHANGE = 0.3


@pytest.mark.parametrize("name", ["dwlstm", "residual-pre"])
@pytest.mark.parametrize("dtype, quantize", list(LOGIT_BOUND))
@pytest.mark.usefixtures("native_bfloat16", "route")
def test_low_precision_decodes_like_float32(trained, name, dtype, quantize):
    """What is asserted: the logits' RMS change within LOGIT_BOUND, the same teacher-forced argmax
    at >= 98% of target positions (measured >= 99.2%), and >= 26 of 32 greedy translations identical
    (measured 28-32): a tiny model's margins are narrow, so a few near-ties flip; BLEU on trained
    Multi30k models is in docs/inference.md."""
    tokenizer, models, _, test = trained
    model = models[name]
    sources, references = [english for english, _ in test[:32]], [german for _, german in test[:32]]
    low = prepare_for_inference(copy.deepcopy(model), dtype, quantize)
    batch = tokenizer(sources, text_target=references, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected, logits = model(**batch).logits, low(**batch).logits.float()
    keep = batch["labels"] != tokenizer.pad_token_id
    change, kept = (logits - expected)[keep], expected[keep]
    assert change.pow(2).mean().sqrt() < LOGIT_BOUND[dtype, quantize] * kept.pow(2).mean().sqrt()
    assert change.abs().max() < LARGEST_LOGIT_CHANGE * kept.abs().max()
    assert (logits.argmax(-1) == expected.argmax(-1))[keep].float().mean() >= 0.98
    greedy = {"num_beams": 1, "max_new_tokens": 40}
    same = sum(
        a == b
        for a, b in zip(
            translate_sentences(low, tokenizer, sources, **greedy).hypotheses,
            translate_sentences(model, tokenizer, sources, **greedy).hypotheses,
        )
    )
    assert same >= 26


@pytest.mark.usefixtures("native_bfloat16")
def test_the_pipeline_takes_a_prepared_model(trained):
    tokenizer, models, _, test = trained
    model = prepare_for_inference(copy.deepcopy(models["dwlstm"]), "bfloat16", "int8")
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    sources = [english for english, _ in test[:4]]
    output = translator(sources, num_beams=2, max_new_tokens=40)
    assert [item["translation_text"] for item in output] == translate_sentences(
        model, tokenizer, sources, num_beams=2, max_new_tokens=40
    ).hypotheses


@pytest.mark.usefixtures("native_bfloat16")
def test_evaluate_script_decodes_in_bfloat16_and_int8(trained, tmp_path):
    tokenizer, models, directories, test = trained
    (tmp_path / "test.en").write_text(
        "".join(english + "\n" for english, _ in test[:8]), encoding="utf-8"
    )
    (tmp_path / "test.de").write_text(
        "".join(german + "\n" for _, german in test[:8]), encoding="utf-8"
    )
    run_script(
        "evaluate_translation",
        "--model",
        str(directories["dwlstm"]),
        "--output_dir",
        str(tmp_path / "eval"),
        "--source_file",
        str(tmp_path / "test.en"),
        "--reference_file",
        str(tmp_path / "test.de"),
        "--num_beams",
        "2",
        "--dtype",
        "bfloat16",
        "--quantize",
        "int8",
    )
    results = json.loads((tmp_path / "eval" / "results.json").read_text(encoding="utf-8"))
    assert (results["dtype"], results["quantize"], results["sentences"]) == ("bfloat16", "int8", 8)
    hypotheses = (tmp_path / "eval" / "hypotheses.txt").read_text(encoding="utf-8").splitlines()
    model = prepare_for_inference(copy.deepcopy(models["dwlstm"]), "bfloat16", "int8")
    sources = [english for english, _ in test[:8]]
    assert hypotheses == translate_sentences(model, tokenizer, sources, num_beams=2).hypotheses
    assert results["sacrebleu"] > 20  # a trained model, still translating
    with pytest.raises(SystemExit):  # argparse: invalid choice
        run_script(
            "evaluate_translation", "--model", "m", "--output_dir", "o", "--dtype", "float16"
        )


def test_evaluate_script_with_precision_auto_decodes_as_the_cpu_class_precision_and_records_it(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(precision, "cpu_features", lambda: AMX)
    pairs = generate_pairs(60, seed=3)
    tokenizer = train_joint_bpe_tokenizer([text for pair in pairs for text in pair], vocab_size=120)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(
        DwLstmConfig(
            **tokenizer_model_kwargs(tokenizer),
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            ffn_dim=32,
            max_position_embeddings=64,
        )
    ).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "test.en").write_text(
        "".join(english + "\n" for english, _ in pairs[:3]), encoding="utf-8"
    )
    (tmp_path / "test.de").write_text(
        "".join(german + "\n" for _, german in pairs[:3]), encoding="utf-8"
    )
    files = [
        "--model",
        str(tmp_path / "model"),
        "--source_file",
        str(tmp_path / "test.en"),
        "--reference_file",
        str(tmp_path / "test.de"),
        "--num_beams",
        "2",
        "--max_new_tokens",
        "6",
    ]
    run_script(
        "evaluate_translation",
        *files,
        "--output_dir",
        str(tmp_path / "auto"),
        "--precision",
        "auto",
    )
    results = json.loads((tmp_path / "auto" / "results.json").read_text(encoding="utf-8"))
    assert (
        results["dtype"],
        results["quantize"],
        results["precision"],
        results["precision_requested"],
    ) == ("bfloat16", "none", "bfloat16", "auto")
    hypotheses = (tmp_path / "auto" / "hypotheses.txt").read_text(encoding="utf-8").splitlines()
    assert (
        hypotheses
        == translate_sentences(
            prepare_for_inference(model, "bfloat16"),
            tokenizer,
            [english for english, _ in pairs[:3]],
            num_beams=2,
            max_new_tokens=6,
        ).hypotheses
    )
    with pytest.raises(
        ValueError, match="--precision int8 sets the dtype and the quantisation itself"
    ):
        run_script(
            "evaluate_translation",
            *files,
            "--output_dir",
            str(tmp_path / "both"),
            "--precision",
            "int8",
            "--dtype",
            "bfloat16",
        )
    assert not (tmp_path / "both").exists()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, "bfloat16"])
@pytest.mark.usefixtures("native_bfloat16")
def test_prepare_for_inference_takes_torch_dtypes_as_well_as_names(dtype):
    model = prepare_for_inference(tiny_model("residual-pre"), dtype)
    expected = dtype if isinstance(dtype, torch.dtype) else getattr(torch, dtype)
    assert {parameter.dtype for parameter in model.parameters()} == {expected}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"dtype": "float16"}, "dtype must be one of float32, bfloat16"),
        (
            {"dtype": torch.float16},
            r"dtype must be one of float32, bfloat16 \(as a name or as "
            r"torch.float32/torch.bfloat16\), "
            "got torch.float16",
        ),
        ({"quantize": "int4"}, "quantize must be one of none, int8"),
    ],
)
def test_bad_precision_settings_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        prepare_for_inference(tiny_model("dwlstm"), **change)


@pytest.mark.usefixtures("native_bfloat16")
def test_an_int8_model_is_not_saved(tmp_path):
    """Its int8 weights would load back into a float model as large floats: refused before any file
    is written."""
    model = prepare_for_inference(tiny_model("dwlstm"), quantize="int8")
    with pytest.raises(ValueError, match="cannot be saved: save the float32 model"):
        model.save_pretrained(tmp_path / "int8")
    assert not (tmp_path / "int8").exists()
    # bfloat16 is saved
    prepare_for_inference(tiny_model("dwlstm"), "bfloat16").save_pretrained(tmp_path / "bf16")
    assert (tmp_path / "bf16" / "model.safetensors").exists()


@pytest.mark.usefixtures("native_bfloat16")
def test_a_prepared_model_is_not_prepared_again():
    model = prepare_for_inference(tiny_model("residual-pre"), quantize="int8")
    with pytest.raises(ValueError, match="already quantised"):
        prepare_for_inference(model, "bfloat16")


@pytest.mark.parametrize("case", MEMBER_CASES + DWLSTM_CASES)
@pytest.mark.usefixtures("native_bfloat16")
def test_bfloat16_projections_packed_for_onednn_compute_what_nn_linear_computes(case):
    """Where oneDNN packs bfloat16 weights (AVX-512 or AMX; not AVX2), every projection of a
    bfloat16-prepared model is a `PackedBfloat16Projection` whose logits and beam-search tokens are
    those of the same model unpacked, a deep copy packs its own weights and decodes the same, and
    weights loaded into it afterwards are packed again, with gradients the product is nn.Linear's
    (the weight gets its gradient); where oneDNN cannot, nothing is packed."""
    model = tiny_model(case)
    packed = prepare_for_inference(copy.deepcopy(model), "bfloat16")
    plain = prepare_for_inference(copy.deepcopy(model), "bfloat16", pack_weights=False)
    assert not precision.has_packed_weights(plain)
    if not precision.onednn_packing_works():
        assert not precision.has_packed_weights(packed)
        return
    assert all(
        isinstance(module, precision.PackedBfloat16Projection)
        for module in linear_modules(packed)
    )
    inputs = dict(input_ids=random_ids(3, 7), decoder_input_ids=random_ids(3, 5, seed=2))
    with torch.no_grad():
        torch.testing.assert_close(packed(**inputs).logits, plain(**inputs).logits)
    search = dict(input_ids=random_ids(3, 7), num_beams=3, max_new_tokens=6, do_sample=False)
    expected = plain.generate(**search)
    assert torch.equal(packed.generate(**search), expected)
    assert torch.equal(copy.deepcopy(packed).generate(**search), expected)
    other = tiny_model(case, seed=1).to(torch.bfloat16).state_dict()
    packed.load_state_dict(other)  # new weights written in place: packed again
    plain.load_state_dict(other)
    with torch.no_grad():
        torch.testing.assert_close(packed(**inputs).logits, plain(**inputs).logits)
    projection = linear_modules(packed)[0]
    projection(torch.randn(2, projection.in_features, dtype=torch.bfloat16)).sum().backward()
    assert projection.weight.grad is not None


def test_bfloat16_projections_stay_unpacked_with_a_warning_where_onednn_cannot_pack(monkeypatch):
    """A PyTorch whose private oneDNN operators fail (or are gone) leaves the projections unpacked
    and says so once, instead of failing at the first decode."""

    def fails(*args):
        raise RuntimeError("bf16 path needs the cpu support avx512bw")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", fails)
    with pytest.warns(UserWarning, match="bfloat16 projections stay unpacked .* avx512bw"):
        assert not precision.onednn_packing_works.__wrapped__()


@pytest.mark.usefixtures("native_bfloat16")
def test_a_packed_output_projection_is_restricted_to_a_shortlist_like_an_unpacked_one():
    """`output_rows` takes a packed output projection: the restricted module computes the chosen
    columns of the full one's output."""
    model = prepare_for_inference(tiny_model("dwlstm"), "bfloat16")
    rows = torch.tensor([5, 1, 30])
    restricted = precision.output_rows(model.lm_head, rows)
    hidden = torch.randn(4, model.config.d_model, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(restricted(hidden), model.lm_head(hidden)[:, rows])


def test_fbgemms_product_as_a_custom_operator_is_the_eager_product():
    """What a compiled fbgemm projection calls (`fbgemm_unit_range_linear`, which torch.compile can
    trace): the same floats as the eager call, a fake implementation of the right shape
    (`torch.library.opcheck`), and a clear error for a packed weight nobody registered."""
    torch.manual_seed(0)
    linear = quantize_int8(nn.Sequential(nn.Linear(64, 40)).eval(), route="fbgemm")[0]
    rows = torch.rand(5, 64) * 2 - 1
    eager = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        rows, *precision.UNIT_RANGE_QUANTIZATION, linear.packed_weight
    )
    assert torch.equal(
        precision.fbgemm_unit_range_linear(rows, linear.packed_weight_key, 40), eager
    )
    torch.library.opcheck(
        precision.fbgemm_unit_range_linear,
        (rows, linear.packed_weight_key, 40),
        test_utils=("test_schema", "test_faketensor"),
    )
    with pytest.raises(RuntimeError, match="register_packed_weights"):
        precision.fbgemm_unit_range_linear(rows, -1, 40)


def test_a_copied_int8_model_registers_its_own_packed_weights():
    """`copy.deepcopy` packs new weights: `register_packed_weights` files them under their own keys,
    and the original's stay valid."""
    model = quantize_int8(nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 4)).eval(), route="fbgemm")
    copied = copy.deepcopy(model)
    precision.register_packed_weights(copied)
    for original, copy_ in zip(model, copied, strict=True):
        assert original.packed_weight_key != copy_.packed_weight_key
        assert precision.PACKED_WEIGHTS[original.packed_weight_key] is original.packed_weight
        assert precision.PACKED_WEIGHTS[copy_.packed_weight_key] is copy_.packed_weight
