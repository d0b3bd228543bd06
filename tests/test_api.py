"""The public namespaces (issue #20 item 5): fastnn.functional.__all__ is the torch-shaped
API of API.md, helpers are not public names, and fastnn.nn / fastnn.optim export what
they define for users only."""
import importlib
import inspect
import types

import pytest

import fastnn.functional as F
from fastnn import nn, optim

# API.md, "fastnn.functional (import as F)"
API_MD_FUNCTIONAL = [
    "linear", "embedding", "sinusoidal_positional_encoding", "layer_norm", "batch_norm",
    "dropout", "relu", "leaky_relu", "prelu", "rrelu", "elu", "selu", "celu", "gelu", "silu",
    "softplus", "sigmoid", "tanh", "softmax", "softmin", "log_softmax",
    "scaled_dot_product_attention", "conv2d", "max_pool2d", "avg_pool2d", "cross_entropy",
]
# the functional forms of API.md's "New torch-named modules" (issue #19)
ADDED_FUNCTIONAL = [
    "conv1d", "conv_transpose2d", "max_pool1d", "avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_max_pool2d", "group_norm", "rms_norm", "nll_loss", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "kl_div",
    # torch's hard activations and Mish (MobileNet / YOLO habits)
    "hardtanh", "relu6", "hardsigmoid", "hardswish", "mish",
]
# fastnn's own ops (reachable as F.name, documented in F's docstring, not star-exported)
EXTENSIONS = [
    "std_layer_norm", "add_layer_norm", "rnn", "gru", "lstm", "rnn_cell", "gru_cell",
    "lstm_cell", "multi_head_attention_fwd", "multi_head_attention_bwd", "attention_mask",
    "varlen_attention", "linear_act_fwd", "linear_act_bwd",
]
# helpers that used to be public names of fastnn.functional
FORMER_HELPERS = [
    "check_dropout_p", "check_loss_args", "check_reduction", "check_padding_idx", "index_array",
    "pair", "single", "conv_padding", "normalized_shape_tuple", "padding_lengths",
    "pool_output_size", "adaptive_output_size",
]
# family modules that used to be names of the namespace (F.conv, F.loss, ...)
FAMILY_MODULES = ["activation", "attention", "batchnorm", "conv", "dense", "groupnorm", "loss",
                  "norm", "pool", "rmsnorm", "stdnorm", "_core"]
# API.md's fastnn.nn module list (and the 2026-11-23 additions)
API_MD_NN = [
    "Linear", "Conv1D", "Embedding", "PositionalEmbedding", "SinusoidalPositionalEncoding",
    "LayerNorm", "StdLayerNorm", "BatchNorm1d", "BatchNorm2d", "Dropout", "Residual",
    "MultiheadAttention", "CausalSelfAttention", "FeedForward", "TransformerBlock",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "Conv2d", "DepthwiseSeparableConv2d",
    "MaxPool2d", "AvgPool2d", "RNN", "GRU", "LSTM", "ReLU", "LeakyReLU", "PReLU", "RReLU",
    "ELU", "SELU", "CELU", "GELU", "SiLU", "Softplus", "Sigmoid", "Tanh", "Softmax", "Softmin",
    "LogSoftmax", "CrossEntropyLoss", "Sequential", "ModuleList", "Parameter", "Module",
    "Flatten", "Unflatten", "ModuleDict", "Conv1d", "ConvTranspose2d", "AdaptiveAvgPool2d",
    "AdaptiveMaxPool2d", "MaxPool1d", "AvgPool1d", "GroupNorm", "RMSNorm", "TransformerEncoder",
    "TransformerDecoder", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss",
    "BCEWithLogitsLoss", "NLLLoss", "KLDivLoss", "init", "utils",
    "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "Mish",
]


def _public(mod):
    return {n for n in dir(mod) if not n.startswith("_")}


def test_functional_all_is_the_api():
    assert len(F.__all__) == len(set(F.__all__))
    assert set(F.__all__) == set(API_MD_FUNCTIONAL) | set(ADDED_FUNCTIONAL)
    for name in F.__all__:
        assert callable(getattr(F, name)), name


def test_functional_star_import_gives_only_the_api():
    ns = {}
    exec("from fastnn.functional import *", ns)
    assert {n for n in ns if n != "__builtins__"} == set(F.__all__)


def test_functional_public_names_are_api_pairs_or_extensions():
    ops = set(F.__all__) | set(EXTENSIONS)
    pairs = {op + s for op in ops for s in ("_fwd", "_bwd")}
    extra = _public(F) - ops - pairs
    assert not extra, f"fastnn.functional leaks non-API names: {sorted(extra)}"
    for name in EXTENSIONS:
        assert callable(getattr(F, name)), name
    assert not [n for n in _public(F) if isinstance(getattr(F, n), types.ModuleType)]


@pytest.mark.parametrize("name", FORMER_HELPERS)
def test_functional_helpers_are_not_public(name):
    assert not hasattr(F, name)
    with pytest.raises(ImportError):
        exec(f"from fastnn.functional import {name}", {})


@pytest.mark.parametrize("name", FAMILY_MODULES)
def test_functional_family_modules_are_not_names(name):
    # (``from fastnn.functional import conv`` still imports the module by its path, as Python does)
    assert not hasattr(F, name) and name not in dir(F)


def test_functional_families_stay_importable():
    """fastnn.functional.conv etc. are still modules one can import by their full name."""
    for fam in ("activation", "attention", "conv", "loss", "norm", "pool", "rnn", "dropout"):
        mod = importlib.import_module(f"fastnn.functional.{fam}")
        assert isinstance(mod, types.ModuleType)
        assert set(mod.__all__) <= _public(F)


def test_functional_api_matches_torch():
    tf = pytest.importorskip("torch.nn.functional")
    missing = [n for n in F.__all__ if n != "sinusoidal_positional_encoding" and not hasattr(tf, n)]
    assert not missing
    assert not [n for n in EXTENSIONS if hasattr(tf, n)], "a torch name belongs in __all__"


def test_nn_exports_modules_only():
    assert set(API_MD_NN) <= set(nn.__all__)
    assert _public(nn) == set(nn.__all__)
    for name in nn.__all__:
        obj = getattr(nn, name)
        if name in ("init", "utils"):
            assert isinstance(obj, types.ModuleType)
        else:
            assert inspect.isclass(obj), f"fastnn.nn.{name} is not a class"
    for gone in ("module", "conv", "activation", "loss", "rnn", "blocks", "flatten"):
        assert not hasattr(nn, gone)
    ns = {}
    exec("from fastnn.nn import *", ns)
    assert {n for n in ns if n != "__builtins__"} == set(nn.__all__)


def test_optim_exports_no_helpers():
    # the defining modules (optim.adam, optim.sgd, ...) are attributes as in torch.optim
    helpers = {n for n in _public(optim) if not isinstance(getattr(optim, n), types.ModuleType)}
    assert helpers <= set(optim.__all__)
    assert {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"} <= set(optim.__all__)
    assert not hasattr(optim, "check_nonneg")
