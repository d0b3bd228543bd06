"""Conv family: conv2d / Conv2d / DepthwiseSeparableConv2d against torch, thread
determinism of the compiled paths (im2col, 1x1, depthwise), init, bad input."""
import contextlib

import numpy as np
import pytest

import fastnn
import fastnn.functional as F
from fastnn import nn

torch = pytest.importorskip("torch")

# torch warns that padding='same' with an even kernel pads a copy of the input
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")


def _torch_conv(m):
    t = torch.nn.Conv2d(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding,
                        m.dilation, m.groups, bias=m.bias is not None).double()
    t.load_state_dict({k: torch.tensor(np.asarray(v, np.float64)) for k, v in m.state_dict().items()})
    return t


CONFIGS = [
    dict(in_channels=6, out_channels=8, kernel_size=3, padding=1),
    dict(in_channels=6, out_channels=4, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), bias=False),
    dict(in_channels=4, out_channels=6, kernel_size=3, dilation=2, padding="same"),
    dict(in_channels=6, out_channels=9, kernel_size=3, groups=3, stride=2, padding=1),
    dict(in_channels=6, out_channels=6, kernel_size=3, groups=6, padding=1),
    dict(in_channels=4, out_channels=8, kernel_size=5, groups=4, stride=2, padding=2, dilation=1),
    dict(in_channels=6, out_channels=5, kernel_size=1),
    dict(in_channels=6, out_channels=4, kernel_size=1, groups=2, stride=2),
    dict(in_channels=3, out_channels=4, kernel_size=4, padding="same"),
    dict(in_channels=3, out_channels=4, kernel_size=3, padding="valid"),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_conv2d_module_matches_torch(cfg, dtype, threads):
    old = fastnn.get_num_threads()
    fastnn.set_num_threads(threads)
    try:
        fastnn.manual_seed(0)
        m = nn.Conv2d(**cfg).to(dtype)
        t = _torch_conv(m)
        rng = np.random.default_rng(1)
        x = rng.standard_normal((5, cfg["in_channels"], 13, 11)).astype(dtype)
        y = m(x)
        tx = torch.tensor(x.astype(np.float64), requires_grad=True)
        ty = t(tx)
        tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(y, ty.detach().numpy(), **tol)
        dy = rng.standard_normal(y.shape).astype(dtype)
        dx = m.backward(dy)
        ty.backward(torch.tensor(dy.astype(np.float64)))
        np.testing.assert_allclose(dx, tx.grad.numpy(), **tol)
        np.testing.assert_allclose(m.weight.grad, t.weight.grad.numpy(), **tol)
        if m.bias is not None:
            np.testing.assert_allclose(m.bias.grad, t.bias.grad.numpy(), **tol)
        assert y.dtype == dx.dtype == m.weight.grad.dtype == dtype
    finally:
        fastnn.set_num_threads(old)


def _fwd_bwd_across_threads(fwd, bwd, args, kw=None, counts=(1, 2, 3)):
    """-> (results, dy): (y, *grads) of fwd(*args, **kw) and bwd(ctx, dy) at each thread
    count, asserted the same bits; dy = cos(0, 1, 2, ...) in y's shape."""
    old = fastnn.get_num_threads()
    res = []
    try:
        for n in counts:
            fastnn.set_num_threads(n)
            y, ctx = fwd(*args, **(kw or {}))
            dy = np.cos(np.arange(y.size, dtype=np.float32)).reshape(y.shape)
            res.append((y,) + tuple(bwd(ctx, dy)))
    finally:
        fastnn.set_num_threads(old)
    for r in res[1:]:
        for a, e in zip(r, res[0]):
            np.testing.assert_array_equal(a, e)
    return res, dy


@pytest.mark.parametrize("shape,wshape,kw", [
    ((6, 16, 20, 20), (24, 16, 3, 3), dict(padding=1)),          # im2col, several tiles
    ((5, 32, 18, 18), (16, 32, 1, 1), {}),                         # 1x1 plain GEMM
    ((6, 24, 21, 20), (24, 1, 3, 3), dict(padding=1, groups=24)),  # depthwise
    ((3, 64, 30, 20), (8, 64, 3, 3), dict(padding=1)),             # direct 3x3, row tiles
    ((5, 12, 17, 19), (12, 6, 3, 3), dict(padding=2, dilation=2, groups=2, stride=2)),
])
def test_conv2d_bit_identical_across_threads(shape, wshape, kw):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[0]).astype(np.float32)
    res, dy = _fwd_bwd_across_threads(F.conv2d_fwd, F.conv2d_bwd, (x, w, b), kw, (1, 2, 3, 4))
    with fastnn.use_backend("reference"):
        y, ctx = F.conv2d_fwd(x, w, b, **kw)
        ref = (y,) + tuple(F.conv2d_bwd(ctx, dy))
    for a, e in zip(res[0], ref):
        np.testing.assert_allclose(a, e, rtol=2e-4, atol=2e-3)


def test_conv2d_scipy_blas_fallback_agrees():
    from fastnn._backend import backend
    mod = backend("cpu").conv2d.__module__
    import importlib
    cmod = importlib.import_module(mod)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 8, 9, 9))
    w = rng.standard_normal((5, 8, 3, 3))
    y1, ctx1 = F.conv2d_fwd(x, w, None, padding=1)
    g1 = F.conv2d_bwd(ctx1, y1)
    cmod._use_scipy_blas()
    try:
        y2, ctx2 = F.conv2d_fwd(x, w, None, padding=1)
        g2 = F.conv2d_bwd(ctx2, y2)
    finally:
        cmod._load_numpy_blas()
    np.testing.assert_allclose(y1, y2, rtol=1e-12, atol=1e-12)
    for a, e in zip(g1[:2], g2[:2]):
        np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-11)


def test_conv2d_zero_batch():
    x = np.zeros((0, 3, 5, 5), np.float32)
    w = np.ones((2, 3, 3, 3), np.float32)
    b = np.ones(2, np.float32)
    y, ctx = F.conv2d_fwd(x, w, b, padding=1)
    assert y.shape == (0, 2, 5, 5)
    dx, dw, db = F.conv2d_bwd(ctx, y)
    assert dx.shape == x.shape and not dw.any() and not db.any()


def test_depthwise_separable_matches_torch():
    fastnn.manual_seed(3)
    m = nn.DepthwiseSeparableConv2d(4, 6, 3, stride=2, padding=1).double()
    sd = m.state_dict()
    assert list(sd) == ["depthwise.weight", "depthwise.bias", "pointwise.weight", "pointwise.bias"]
    assert sd["depthwise.weight"].shape == (4, 1, 3, 3) and sd["pointwise.weight"].shape == (6, 4, 1, 1)
    dw = torch.nn.Conv2d(4, 4, 3, 2, 1, groups=4).double()
    pw = torch.nn.Conv2d(4, 6, 1).double()
    dw.weight.data = torch.tensor(sd["depthwise.weight"])
    dw.bias.data = torch.tensor(sd["depthwise.bias"])
    pw.weight.data = torch.tensor(sd["pointwise.weight"])
    pw.bias.data = torch.tensor(sd["pointwise.bias"])
    x = np.random.default_rng(0).standard_normal((2, 4, 9, 8))
    tx = torch.tensor(x, requires_grad=True)
    ty = pw(dw(tx))
    y = m(x)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    dy = np.ones_like(y)
    dx = m.backward(dy)
    ty.backward(torch.ones_like(ty))
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m.depthwise.weight.grad, dw.weight.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m.pointwise.bias.grad, pw.bias.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_conv2d_init_and_names_like_torch():
    fastnn.manual_seed(0)
    m = nn.Conv2d(8, 16, (3, 5), groups=2)
    t = torch.nn.Conv2d(8, 16, (3, 5), groups=2)
    assert list(m.state_dict()) == list(t.state_dict())
    assert m.weight.shape == tuple(t.weight.shape) and m.weight.dtype == np.float32
    bound = 1 / np.sqrt(4 * 3 * 5)           # kaiming_uniform(a=sqrt(5)) on fan_in = 4*3*5
    assert np.abs(m.weight.data).max() <= bound and np.abs(m.weight.data).max() > 0.9 * bound
    assert np.abs(m.bias.data).max() <= bound
    # uniform on [-b, b]: std b / sqrt(3)
    assert abs(m.weight.data.std() - bound / np.sqrt(3)) < 0.1 * bound
    assert nn.Conv2d(3, 4, 3, bias=False).bias is None
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    np.testing.assert_array_equal(m.weight.data, t.weight.detach().numpy())


@pytest.mark.parametrize("call,match", [
    (lambda: F.conv2d(np.ones((1, 3, 5, 5)), np.ones((2, 4, 3, 3))), r"3 channels.*\(1, 3, 5, 5\)"),
    (lambda: F.conv2d(np.ones((1, 4, 5, 5)), np.ones((3, 2, 3, 3)), groups=2), "out_channels"),
    (lambda: F.conv2d(np.ones((1, 3, 5, 5)), np.ones((3, 1, 3, 3)), groups=2), "groups=2 must divide"),
    (lambda: F.conv2d(np.ones((1, 1, 2, 2)), np.ones((1, 1, 3, 3))), "larger than the padded input"),
    (lambda: F.conv2d(np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3)), dilation=2), "larger than the padded"),
    (lambda: F.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), stride=0), "stride"),
    (lambda: F.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), dilation=(1, -1)), "dilation"),
    (lambda: F.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), padding=-1), "padding"),
    (lambda: F.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), padding="full"), "padding"),
    (lambda: F.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), stride=2, padding="same"),
     "strided"),
    (lambda: F.conv2d(np.ones((3, 5, 5)), np.ones((1, 3, 3, 3))), r"4-D.*\(3, 5, 5\)"),
    (lambda: F.conv2d(np.ones((1, 3, 5, 5)), np.ones((1, 3, 3))), r"weight must be 4-D"),
    (lambda: F.conv2d(np.ones((1, 3, 5, 5)), np.ones((2, 3, 3, 3)), np.ones(3)), r"bias.*\(2,\)"),
    (lambda: F.conv2d(np.ones((1, 3, 5, 5)), np.ones((2, 3, 3, 3)), groups=0), "groups"),
    (lambda: nn.Conv2d(3, 4, 3, stride=2, padding="same"), "strided"),
    (lambda: nn.Conv2d(3, 4, 3, groups=2), "divisible by groups"),
    (lambda: nn.Conv2d(4, 6, 0), "kernel_size"),
])
def test_conv2d_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_conv2d_type_errors():
    with pytest.raises(TypeError, match="weight has dtype float64"):
        F.conv2d(np.ones((1, 1, 5, 5), np.float32), np.ones((1, 1, 3, 3)))
    with pytest.raises(TypeError, match="stride"):
        F.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), stride=1.5)
    with pytest.raises(TypeError, match="groups"):
        F.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), groups=1.0)
    with pytest.raises(TypeError):
        F.conv2d(np.ones((1, 1, 5, 5), np.int64), np.ones((1, 1, 3, 3)))


def test_conv2d_backward_needs_forward():
    m = nn.Conv2d(1, 1, 3)
    with pytest.raises(RuntimeError, match="forward"):
        m.backward(np.ones((1, 1, 3, 3), np.float32))


@pytest.mark.parametrize("geo", [
    # (N, Cin, H, W, Cout, k, stride, padding, output_padding, dilation)
    (2, 8, 5, 6, 4, 4, 2, 1, 0, 1),      # the benchmark's shape class: 2x2 taps per phase
    (3, 4, 7, 5, 8, 3, 2, 1, 1, 1),      # phases with 2 and 1 taps, output_padding
    (2, 8, 5, 5, 4, 5, 3, 2, 0, 1),      # stride 3
    (1, 4, 4, 4, 4, 4, 2, 1, 0, 2),      # dilation 2: one phase has no tap (bias only)
    (1, 4, 3, 3, 4, 1, 3, 0, 0, 1),      # 1x1 kernel, stride 3: 8 of 9 phases empty
    (2, 64, 12, 12, 32, 4, 2, 1, 0, 1),  # several 16-channel blocks, 6- and 4-row tiles
    (2, 8, 5, 5, 8, 3, 2, 1, 0, 1),      # odd output width: column phases of 5 and 4 merged
    (2, 16, 5, 5, 12, 3, 2, 1, 0, 2),    # dilation 2: a phase no tap reaches
    (1, 16, 9, 9, 24, 3, 2, 1, 1, 1),    # one image: output-channel groups
])
def test_conv_transpose_direct_forward_equals_the_gemm_path(geo):
    """conv_transpose2d's forward by output phase on the direct kernel (float32, AVX2
    builds) against the col2im path it replaced: same values (float32 rounding), with a
    bias, on every phase (including phases no tap reaches)."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    N, C, H, W, O, k, s, p, op, d = geo
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((C, O, k, k)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    got = F.conv_transpose2d(x, w, b, s, p, op, 1, d)
    conv._DIRECT = False
    try:
        want = F.conv_transpose2d(x, w, b, s, p, op, 1, d)
    finally:
        conv._DIRECT = True
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("geo", [
    # (N, Cin, H, W, Cout, k, stride, padding, output_padding, dilation, groups)
    (2, 8, 5, 6, 4, 4, (2, 2), 1, 0, 1, 1),      # the benchmark's shape class
    (3, 4, 7, 5, 6, (3, 2), (2, 3), (1, 0), 1, 1, 2),  # mixed strides, groups, output_padding
    (2, 4, 5, 5, 4, 5, (3, 3), 2, 0, 1, 1),      # stride 3: phases with 1 and 2 taps
    (1, 4, 4, 4, 4, 3, (2, 2), 1, 0, 2, 1),      # dilation 2: one row phase has no tap
    (2, 3, 6, 4, 2, (1, 3), (1, 2), 0, 0, 1, 1),  # kH 1, stride 1 rows: no row phases
    (1, 4, 3, 3, 4, 1, (3, 3), 0, 0, 1, 1),      # 1x1 kernel, stride 3
])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_conv_transpose_backward_phase_planes_match_the_reference(geo, dt):
    """conv_transpose2d's fused backward builds each column tile from dy's phase planes
    (_phase_planes / _phase_col): against the reference backend, with whole-image tiles,
    one-row tiles (several tiles per image, d_weight accumulated across them) and, past
    the planes' size limit, tiles gathered straight from dy (_im2col)."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    ref = fastnn._backend.backend("reference")
    N, C, H, W, O, k, s, p, op, d, G = geo
    k, s, p, op, d = (tuple(v) if isinstance(v, tuple) else (v, v) for v in (k, s, p, op, d))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, C, H, W)).astype(dt)
    w = rng.standard_normal((C, O // G) + k).astype(dt)
    b = rng.standard_normal(O).astype(dt)
    y, ctx = F.conv_transpose2d_fwd(x, w, b, s, p, op, G, d)
    dy = rng.standard_normal(y.shape).astype(dt)
    OH, OW = y.shape[2:]
    pad = (p[0], p[0], p[1], p[1])
    _, sv = ref.conv_transpose2d(x, w, b, s, pad, (OH, OW), d, G)
    want = ref.conv_transpose2d_backward(dy, sv)
    tol = 2e-4 if dt == np.float32 else 1e-10
    # whole-image tiles, one-row tiles, and no phase planes (tiles straight from dy)
    for elems, planes in ((1 << 19, 1 << 24), (1, 1 << 24), (1 << 19, 0)):
        conv._set_tbwd_limits(elems, planes)
        try:
            got = F.conv_transpose2d_bwd(ctx, dy)
        finally:
            conv._set_tbwd_limits(1 << 19, 1 << 24)
        for a, e in zip(got, want):
            np.testing.assert_allclose(a, e, rtol=tol, atol=tol * max(1.0, np.abs(e).max()))


def _direct_and_gemm(conv, fwd, bwd, x, w, b, p, d, plane_limit, switch="_DIRECT",
                     set_limit="_set_row_plane_max", cig=True):
    """-> (res, other, dy): (y, d_input, d_weight, d_bias) of the fast kernels at 1, 2 and
    3 threads (asserted the same bits) and of the route conv.<switch> = False gives (the
    GEMM paths for _DIRECT, the direct 3x3 kernel for _WINOGRAD), with rows / planes over
    plane_limit elements (conv.<set_limit>) on that route (None: the default limit).
    cig False: the fast kernels without the implicit GEMM (the tap-list kernels)."""
    limit = getattr(conv, set_limit)
    old_limit = limit(plane_limit) if plane_limit else None
    try:
        conv._CIG = cig
        try:
            res, dy = _fwd_bwd_across_threads(fwd, bwd, (x, w, b, 1, p, d))
        finally:
            conv._CIG = True
        setattr(conv, switch, False)
        try:
            y, ctx = fwd(x, w, b, 1, p, d)
            gemm = (y,) + tuple(bwd(ctx, dy))
        finally:
            setattr(conv, switch, True)
    finally:
        if old_limit is not None:
            limit(old_limit)
    return res, gemm, dy


def _scaled_case(geo, seed):
    """(x, w, b, padding) of a conv2d geometry (N, C, H, W, O, kernel, padding): normal
    input and bias, the weight scaled by 1/sqrt(fan-in) (wide layers keep unit outputs)."""
    N, C, H, W, O, k, p = geo
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((O, C, k, k)) / np.sqrt(C * k * k)).astype(np.float32)
    return x, w, rng.standard_normal(O).astype(np.float32), p


@contextlib.contextmanager
def _switched(mod, **flags):
    """mod's module-level switches set for the with-block, restored after."""
    old = {k: getattr(mod, k) for k in flags}
    for k, v in flags.items():
        setattr(mod, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(mod, k, v)


def _conv2d_fwd_bwd(x, w, b, p, dy):
    """(y, d_input, d_weight, d_bias) of F.conv2d (stride 1, padding p) for gradient dy."""
    y, ctx = F.conv2d_fwd(x, w, b, 1, p)
    return (y,) + tuple(F.conv2d_bwd(ctx, dy))


def _torch_grads(fn, x, w, b, p, d, dy):
    """torch's (y, d_input, d_weight, d_bias) in float64 for gradient dy."""
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    ty = fn(tx, tw, tb, 1, p, d)
    ty.backward(torch.tensor(dy, dtype=torch.float64))
    return ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()


@pytest.mark.parametrize("cig", [True, False])
@pytest.mark.parametrize("row_limit", [None, 64])
@pytest.mark.parametrize("geo", [
    # (N, C, L, O, k, padding, dilation)
    (3, 32, 64, 12, 3, 1, 1),        # whole 16-position rows: sums straight into y
    (2, 16, 37, 20, 3, 1, 1),        # ragged row (37 positions), blocks of 6 and 4
    (2, 48, 100, 8, 5, 2, 2),        # dilation, 64 + 16 channel blocks in d_weight
    (3, 16, 80, 16, 4, "same", 1),   # even kernel: asymmetric padding
    (2, 20, 33, 4, 2, 0, 3),         # C % 16 != 0: d_weight stays on the GEMM path
    (2, 16, 200, 24, 3, 1, 1),       # several position chunks in the forward and d_weight
])
def test_conv1d_direct_equals_the_gemm_path_and_torch(geo, row_limit, cig):
    """Conv1d's forward, its d_input (the forward of the flipped weights) and (AVX-512
    builds) its d_weight run on the direct kernels where they apply (float32, groups 1,
    stride 1, O % 4 == 0); conv._DIRECT = False forces the row-im2col GEMM paths.  Both
    agree with each other and with torch, and the direct results do not depend on the
    thread count."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    N, C, L, O, k, p, d = geo
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, L)).astype(np.float32)
    w = rng.standard_normal((O, C, k)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    # row_limit: rows longer than it (elements of C x We) take the GEMM path (the
    # direct kernel keeps a whole padded row per thread); d_weight stays direct.  Where
    # GEMMs run on the own float32 kernel conv1d takes the GEMM paths unless forced
    old_forced = conv._set_rows_direct(True)
    try:
        res, gemm, dy = _direct_and_gemm(conv, F.conv1d_fwd, F.conv1d_bwd, x, w, b, p, d,
                                         row_limit, cig=cig)
    finally:
        conv._set_rows_direct(old_forced)
    # the default route (the GEMM paths where the own float32 GEMM runs): thread-count
    # independent too, and equal to torch below
    res_default, _ = _fwd_bwd_across_threads(F.conv1d_fwd, F.conv1d_bwd, (x, w, b, 1, p, d))
    want = _torch_grads(torch.nn.functional.conv1d, x, w, b, p, d, dy)
    for got in (res[0], gemm, res_default[0]):
        for a, e in zip(got, want):
            assert a.shape == e.shape and a.dtype == np.float32
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


@pytest.mark.parametrize("geo", [
    # (N, C, H, W, O, k, stride, padding, dilation)
    (1, 32, 14, 14, 48, 3, 2, 1, 1),        # batch 1: output-channel groups, shared planes
    (3, 16, 15, 13, 32, 3, 2, 1, 1),        # odd sizes; phases with 1, 2 and 4 taps
    (2, 8, 17, 17, 16, 7, 2, 3, 1),         # a 7x7 stem's stride 2
    (2, 12, 16, 15, 20, 5, 3, 2, 1),        # stride 3; C % 4 == 0, O % 16 != 0
    (1, 16, 12, 12, 32, 4, 2, 1, 1),        # even kernel: the same taps in every phase
    (2, 8, 11, 11, 16, 3, 2, 0, 2),         # dilation 2
    (2, 3, 20, 20, 16, 7, (2, 1), 3, 1),    # mixed strides; 3 channels: d_input on im2col
    (2, 16, 9, 9, 6, 3, 2, 1, 1),           # O % 4 != 0: the GEMM paths
    (1, 8, 40, 40, 12, 3, 2, 1, 1),         # implicit GEMM: one 12-row tile, column ranges
    (2, 4, 9, 7, 24, 3, 2, 1, 1),           # rows of 4 and 5 positions: gathered panels
    (3, 64, 6, 6, 1024, 3, 2, 1, 1),        # d_weight of 2.4 MiB: one chunk of all images
    (1, 16, 64, 64, 16, 3, 2, 1, 1),        # several column tiles per image
])
@pytest.mark.parametrize("cig", [True, False])
def test_conv2d_strided_direct_equals_the_gemm_path_and_torch(geo, cig, monkeypatch):
    """A strided conv2d on the direct kernels (AVX-512 builds, float32, groups 1).  cig:
    where GEMMs run on the own float32 kernel, the forward as an implicit GEMM whose
    panels are packed from the input's phase planes (O >= 12), d_input as whole-image
    column tiles of W^T dy scattered back (channel groups at batch 1), d_weight as GEMMs
    of dy and im2col tiles (output-channel groups; partials of 2 MiB or more in one chunk
    of all images).  Without: the forward on the tap-list kernel over the phase planes
    (each tap offset carrying its phase; O % 4 == 0), the weight read in place; d_input
    as the transposed convolution of dy (C % 4 == 0); d_weight on the direct d_weight
    kernel over the phase planes (C % 4 == 0, O % 16 == 0).  conv._DIRECT = False forces
    the im2col GEMM paths.  All agree with each other and with torch, and the direct
    results do not depend on the thread count."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    N, C, H, W, O, k, s, p, d = geo
    rng = np.random.default_rng(5)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((O, C, k, k)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    args = (x, w, b, s, p, d)
    for switch in ("_CIG", "_SDX", "_SWG_GEMM"):
        monkeypatch.setattr(conv, switch, cig)
    res, dy = _fwd_bwd_across_threads(F.conv2d_fwd, F.conv2d_bwd, args)
    for switch in ("_CIG", "_SDX", "_SWG_GEMM"):
        monkeypatch.setattr(conv, switch, True)
    conv._DIRECT = False
    try:
        y, ctx = F.conv2d_fwd(*args)
        gemm = (y,) + tuple(F.conv2d_bwd(ctx, dy))
    finally:
        conv._DIRECT = True
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, tb, s, p, d)
    ty.backward(torch.tensor(dy, dtype=torch.float64))
    want = (ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy())
    for got in (res[0], gemm):
        for a, e in zip(got, want):
            assert a.shape == e.shape and a.dtype == np.float32
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


@pytest.mark.parametrize("kind,geo", [
    # (N, C, H, W, O, k, stride, padding): conv2d weight (O, C, k, k); conv_transpose2d
    # weight (C, O, k, k), whose d_weight is a strided conv2d's with dy as its input
    ("conv2d", (1, 16, 33, 31, 32, 3, 2, 1)),         # batch 1: two channel groups
    ("conv2d", (1, 20, 21, 15, 48, 3, 2, 1)),         # batch 1: groups of 10 channels
    ("conv2d", (3, 24, 17, 15, 64, 3, 2, 1)),         # three chunks
    ("conv2d", (2, 4, 40, 40, 64, 7, 2, 3)),          # 7x7: 196 im2col rows, O = 64
    ("conv_transpose2d", (5, 64, 9, 11, 32, 4, 2, 1)),
    ("conv_transpose2d", (1, 40, 12, 12, 12, 4, 2, 1)),
])
def test_strided_weight_grad_the_same_bits_either_gemm_orientation(kind, geo, monkeypatch):
    """A strided d_weight on the own GEMM (AVX-512 builds) with few output channels (32 to
    64) runs as im2col x dy^T (input-channel groups at batch 1) rather than dy x im2col^T.  Both
    sum every weight over the same positions in the same k blocks: the same bits, at 1, 2
    and 3 threads, and torch's values."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    N, C, H, W, O, k, s, p = geo
    rng = np.random.default_rng(9)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    tconv = kind == "conv_transpose2d"
    w = rng.standard_normal((C, O, k, k) if tconv else (O, C, k, k)).astype(np.float32)
    fwd, bwd = ((F.conv_transpose2d_fwd, F.conv_transpose2d_bwd) if tconv
                else (F.conv2d_fwd, F.conv2d_bwd))
    got = {}
    for tr in (True, False):
        monkeypatch.setattr(conv, "_SWG_TR", tr)
        got[tr], dy = _fwd_bwd_across_threads(fwd, bwd, (x, w, None, s, p))
    for a, e in zip(got[True][0], got[False][0]):
        np.testing.assert_array_equal(a, e)
    tx = torch.tensor(x, dtype=torch.float64)
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tf = torch.nn.functional.conv_transpose2d if tconv else torch.nn.functional.conv2d
    tf(tx, tw, None, s, p).backward(torch.tensor(dy, dtype=torch.float64))
    want = tw.grad.numpy()
    np.testing.assert_allclose(got[True][0][2], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("geo", [
    # (N, Cin, H, W, Cout, k, stride, padding, output_padding)
    (2, 16, 5, 7, 8, 4, 2, 1, 0),                 # the benchmark's shape class: all direct
    (3, 32, 4, 5, 12, (4, 2), 2, (1, 0), 1),      # output_padding, 2 taps per phase
    (2, 8, 6, 6, 4, 4, 2, 1, 0),                  # Cin % 16 != 0: d_weight on the fused pass
    (2, 16, 3, 4, 4, 6, 3, 2, 0),                 # stride 3, 4 taps per phase
    (2, 16, 5, 5, 4, 3, 2, 1, 0),                 # phases with 1, 2 and 4 taps: one channel group
    (2, 16, 6, 6, 12, 4, 2, 1, 0),                # Cout >= 12: d_input as an implicit GEMM
])
@pytest.mark.parametrize("cig", [True, False])
def test_conv_transpose_backward_direct_equals_the_fused_pass(geo, cig):
    """conv_transpose2d's backward on the direct kernels (float32, groups 1, Cout % 4 == 0):
    d_input over dy's phase planes (cig, Cout >= 12, Cin % 16 == 0: as an implicit GEMM
    packed from them), and (AVX-512
    builds, Cin % 16 == 0) d_weight; conv._DIRECT = False forces the fused im2col pass.
    Both agree with each other and with torch, and do not depend on the thread count."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    N, C, H, W, O, k, s, p, op = geo
    rng = np.random.default_rng(2)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((C, O) + ((k, k) if isinstance(k, int) else k)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    old = fastnn.get_num_threads()
    res = []
    try:
        conv._CIG = cig
        for n in (1, 2, 3):
            fastnn.set_num_threads(n)
            y, ctx = F.conv_transpose2d_fwd(x, w, b, s, p, op)
            dy = np.sin(np.arange(y.size, dtype=np.float32)).reshape(y.shape)
            res.append(tuple(F.conv_transpose2d_bwd(ctx, dy)))
        conv._CIG = True
        conv._DIRECT = False
        try:
            y, ctx = F.conv_transpose2d_fwd(x, w, b, s, p, op)
            fused = tuple(F.conv_transpose2d_bwd(ctx, dy))
        finally:
            conv._DIRECT = True
    finally:
        conv._CIG = True
        fastnn.set_num_threads(old)
    for r in res[1:]:
        for a, e in zip(r, res[0]):
            np.testing.assert_array_equal(a, e)
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    ty = torch.nn.functional.conv_transpose2d(tx, tw, tb, s, p, op)
    ty.backward(torch.tensor(dy, dtype=torch.float64))
    want = (tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy())
    for got in (res[0], fused):
        for a, e in zip(got, want):
            assert a.shape == e.shape and a.dtype == np.float32
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


@pytest.mark.parametrize("case", ["conv1d", "conv_transpose2d", "conv2d_3x3", "conv2d_5x5"])
def test_direct_paths_fail_allocations_cleanly(case):
    """Fault injection (fnn_alloc.h's countdown) on the direct paths of this module --
    conv1d's forward / d_input / d_weight, conv_transpose2d's one-pass direct
    backward (_tboth), conv2d 3x3's Winograd forward / d_input / d_weight and other
    stride-1 conv2d's tap-list forward / d_input and direct d_weight, 2 threads: every scratch allocation failing in turn raises
    MemoryError, and with no failure injected the result is the undisturbed one."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    rng = np.random.default_rng(3)
    if case == "conv1d":
        x = rng.standard_normal((4, 32, 48)).astype(np.float32)
        w = rng.standard_normal((8, 32, 3)).astype(np.float32)

        def run():
            y, ctx = F.conv1d_fwd(x, w, None, 1, 1)
            return (y,) + tuple(F.conv1d_bwd(ctx, np.cos(y)))
    elif case == "conv2d_3x3":   # Winograd forward, d_input and d_weight (AVX-512 builds)
        x = rng.standard_normal((4, 8, 9, 7)).astype(np.float32)
        w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)

        def run():
            y, ctx = F.conv2d_fwd(x, w, None, 1, 1)
            return (y,) + tuple(F.conv2d_bwd(ctx, np.cos(y)))
    elif case == "conv2d_5x5":   # tap-list forward / d_input, direct d_weight (AVX-512)
        x = rng.standard_normal((4, 16, 9, 7)).astype(np.float32)
        w = rng.standard_normal((16, 16, 5, 5)).astype(np.float32)

        def run():
            y, ctx = F.conv2d_fwd(x, w, None, 1, 2)
            return (y,) + tuple(F.conv2d_bwd(ctx, np.cos(y)))
    else:
        x = rng.standard_normal((4, 16, 6, 6)).astype(np.float32)
        w = rng.standard_normal((16, 8, 4, 4)).astype(np.float32)

        def run():
            y, ctx = F.conv_transpose2d_fwd(x, w, None, 2, 1)
            return (y,) + tuple(F.conv_transpose2d_bwd(ctx, np.cos(y)))
    old = fastnn.get_num_threads()
    fastnn.set_num_threads(2)
    try:
        want = run()
        sites = 0
        for k in range(40):
            conv._fail_allocation(k)
            raised = False
            try:
                run()
            except MemoryError:
                raised = True
            fired = conv._fail_allocation(-1) < 0
            if not fired:
                break
            assert raised, f"allocation {k} failed and no MemoryError"
            sites += 1
        assert sites > 0
        for a, e in zip(run(), want):
            np.testing.assert_array_equal(a, e)
    finally:
        conv._fail_allocation(-1)
        fastnn.set_num_threads(old)


@pytest.mark.parametrize("plane_limit", [None, 64])
@pytest.mark.parametrize("geo", [
    # (N, C, H, W, O, padding)
    (2, 16, 14, 14, 32, 1),     # the benchmark's shape class: forward, d_input, d_weight
    (3, 8, 13, 11, 16, 1),      # odd output rows and columns: partial 2 x 2 tiles
    (2, 4, 9, 70, 16, 1),       # 35 tiles a row: 16-tile vectors, chunks across tile rows
    (2, 8, 12, 10, 16, 0),      # no padding
    (10, 8, 8, 8, 16, 1),       # 8 image chunks of the d_weight partials
    (2, 12, 10, 10, 12, 1),     # O % 16 != 0: d_weight on the direct kernel, d_input too
    (2, 6, 8, 9, 8, 1),         # C % 4 != 0: d_input and d_weight on the GEMM paths
    (1, 16, 14, 14, 96, 1),     # one image, 2-3 threads: output-channel groups of 48 / 24-36
    (1, 8, 10, 10, 100, 1),     # groups ending in a block of 4 output channels
    # one image, >= 48 channels each way: forward and d_input both in groups, each work
    # item packing its group's weights (d_input's flipped ones straight from the weight)
    (1, 48, 12, 12, 100, 1),
    # d_weight partials of 2 MiB or more (16 * C * O floats): one chunk of all images in
    # output-channel groups sized for the L2
    (3, 128, 8, 8, 256, 1),
])
def test_conv2d_3x3_winograd_equals_the_direct_path_and_torch(geo, plane_limit, monkeypatch):
    """conv2d 3x3 stride 1 (float32, groups 1, O % 4 == 0) runs its forward and d_input
    (the forward of the flipped weights) on Winograd F(2x2, 3x3) in AVX2 and AVX-512
    builds, and in AVX-512 builds its d_weight too where C % 4 == 0 and O % 16 == 0; conv._WINOGRAD = False forces the direct
    3x3 kernel (and a padded image over plane_limit elements falls back to it).  Both agree
    with each other and with torch, the results do not depend on the thread count, and in
    AVX-512 builds the two paths differ (the switch reaches a different kernel).  conv._WGEMM
    = False keeps the wide layers' d_weight on Winograd too (else GEMMs take it)."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    monkeypatch.setattr(conv, "_WGEMM", False)
    N, C, H, W, O, p = geo
    rng = np.random.default_rng(4)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((O, C, 3, 3)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    res, direct, dy = _direct_and_gemm(conv, F.conv2d_fwd, F.conv2d_bwd, x, w, b, p, 1,
                                       plane_limit, "_WINOGRAD", "_set_wg_plane_max")
    if conv._winograd_built() and plane_limit is None:
        assert not np.array_equal(res[0][0], direct[0])       # forward
        if C % 4 == 0:   # d_input: a conv2d with C output channels
            assert not np.array_equal(res[0][1], direct[1])
        if C % 4 == 0 and O % 16 == 0 and conv._avx512_direct_built():
            assert not np.array_equal(res[0][2], direct[2])   # d_weight
    want = _torch_grads(torch.nn.functional.conv2d, x, w, b, p, 1, dy)
    for got in (res[0], direct):
        for a, e in zip(got, want):
            assert a.shape == e.shape and a.dtype == np.float32
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


@pytest.mark.parametrize("case", [
    # one image and >= 48 output channels, sizes past the two-thread work threshold (2 x
    # 2^18 multiply-adds): the tap-list kernels (C < 4, conv_transpose2d; 5x5 where GEMMs
    # do not run on the avx512 build's own float32 kernel) split the image's output
    # channels across threads (groups of multiples of 12, the last ending in 4s); the
    # implicit GEMMs (conv1d, 5x5 and strided conv2d on the own kernel) split each image's
    # positions in ranges of 32
    ("conv1d", (1, 16, 512), (52, 16, 3), dict(padding=1)),
    ("conv1d ragged", (1, 20, 301), (48, 20, 5), dict(padding=2)),
    ("conv2d 5x5", (1, 8, 12, 11), (60, 8, 5, 5), dict(padding=2)),
    # the direct d_weight kernel (C % 16 == 0) in output-channel groups of multiples of 4
    ("conv2d 5x5 C16", (1, 16, 9, 9), (52, 16, 5, 5), dict(padding=2)),
    ("conv2d 3x3 C<4", (1, 3, 20, 20), (64, 3, 3, 3), dict(padding=1)),
    # fewer than 16 output channels, not a multiple of 4 (an RGB output layer; the C<4
    # case's d_input too): the direct 3x3 kernel on zero-padded filters
    ("conv2d 3x3 O=3", (1, 16, 20, 20), (3, 16, 3, 3), dict(padding=1)),
    ("conv2d 3x3 stride 2", (1, 16, 25, 25), (48, 16, 3, 3), dict(stride=2, padding=1)),
    ("conv_transpose2d", (1, 16, 10, 10), (16, 52, 4, 4), dict(stride=2, padding=1)),
    # GEMM paths with one image's product split in fixed column blocks (own float32 GEMM)
    ("conv1d wide", (1, 64, 1024), (64, 64, 3), dict(padding=1)),
    ("conv2d 1x1", (1, 64, 32, 32), (64, 64, 1, 1), {}),
    ("conv2d 3x3 stride 2 wide", (1, 32, 66, 66), (64, 32, 3, 3), dict(stride=2, padding=1)),
    # the im2col path's row tiles over the threads (a ResNet stem)
    ("conv2d 7x7 stride 2", (1, 3, 64, 64), (64, 3, 7, 7), dict(stride=2, padding=3)),
])
def test_one_image_uses_every_thread_with_the_same_bits(case):
    """A batch of one: output-channel groups give every thread work on the direct kernels,
    and the forward and gradients keep their bits at 1, 2 and 3 threads and agree with the
    reference."""
    name, xs, ws, kw = case
    rng = np.random.default_rng(8)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) * 0.2).astype(np.float32)
    b = rng.standard_normal(ws[1] if name == "conv_transpose2d" else ws[0]).astype(np.float32)
    if name.startswith("conv1d"):
        fwd, bwd = F.conv1d_fwd, F.conv1d_bwd
    elif name == "conv_transpose2d":
        fwd, bwd = F.conv_transpose2d_fwd, F.conv_transpose2d_bwd
    else:
        fwd, bwd = F.conv2d_fwd, F.conv2d_bwd
    res, dy = _fwd_bwd_across_threads(fwd, bwd, (x, w, b), kw)
    with fastnn.use_backend("reference"):
        y, ctx = fwd(x, w, b, **kw)
        want = (y,) + tuple(bwd(ctx, dy))
    for a, e in zip(res[0], want):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


@pytest.mark.parametrize("geo", [
    # (N, C, H, W, O, kernel, padding)
    (1, 128, 8, 8, 256, 3, 1),     # Winograd's shapes, 2 MiB partials, 16 tiles
    (3, 128, 8, 8, 256, 3, 1),     # the same, 48 tiles in one chunk of three images
    (2, 256, 5, 5, 256, 3, 1),     # a small plane (the direct 3x3 kernel's), 2.25 MiB weight
    (1, 176, 6, 6, 128, 5, 2),     # 5x5, a 2.1 MiB weight
    (1, 1024, 5, 5, 64, 3, 1),     # 64 output channels: im2col x dy^T, input-channel groups
    (2, 1024, 5, 5, 64, 3, 1),     # the same, both images side by side in one GEMM
])
def test_conv2d_wide_stride1_weight_grad_on_gemms(geo):
    """A stride-1 d_weight of a wide layer (AVX-512 builds, float32, groups 1) runs as GEMMs
    of dy and whole-image im2col tiles (conv._wgrad_route says "gemm"): Winograd's with 2
    MiB partials or more over few 2 x 2 tiles, the other kernels' with a weight of 2 MiB
    or more.  Small planes put several images side by side in one GEMM.  The same bits at
    1, 2 and 3 threads (channel groups at batch 1), torch's values, and those of the
    kernels conv._WGEMM = False leaves it to."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    x, w, b, p = _scaled_case(geo, 8)
    with _switched(conv, _WGS=False):   # (several images of 5 x 5: small-plane Winograd)
        route = conv._wgrad_route(x.shape, w.shape, (1, 1), (p,) * 4)
        assert route == ("gemm" if conv._avx512_direct_built() else "other")
        # (the other builds' forward of one image runs on BLAS's threads: not asserted here)
        res, dy = _fwd_bwd_across_threads(F.conv2d_fwd, F.conv2d_bwd, (x, w, b, 1, p),
                                          counts=(1, 2, 3) if route == "gemm" else (1,))
        with _switched(conv, _WGEMM=False):
            other = _conv2d_fwd_bwd(x, w, b, p, dy)[2]
    want = _torch_grads(torch.nn.functional.conv2d, x, w, b, p, 1, dy)[2]
    for got in (res[0][2], other):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("geo,dx_too", [
    # (N, C, H, W, O, kernel, padding); whether d_input takes the route too
    ((3, 128, 5, 5, 128, 3, 1), False),    # 75 positions: one GEMM, output-channel groups
    ((4, 128, 5, 5, 128, 3, 1), True),     # d_input too (4 images, 128 x 9 deep)
    ((40, 128, 4, 4, 128, 3, 1), False),   # 640 positions: image groups of 10
    ((3, 64, 6, 6, 96, 5, 2), False),      # 5x5
    # 1x1: the input is the planes.  Its d_input (W^T dy, W transposed once) sums the same
    # products in the same k blocks as the image-by-image GEMM: the same bits
    ((2, 512, 4, 4, 512, 1, 0), False),
    ((2, 1024, 3, 3, 512, 1, 0), False),   # a 2 MiB weight: d_weight as GEMMs too
])
def test_conv2d_small_planes_run_images_side_by_side(geo, dx_too):
    """A small output plane (< 64 positions, >= 2 images, >= 64 output channels, depth >=
    512, weight >= 128 Ki floats; AVX-512 builds) runs its forward (and its d_input: a
    3x3's from 4 images, a 1x1's on W transposed once) as an implicit GEMM over several
    images' positions side by side, packed by gathers from their padded planes (a 1x1's:
    the images).  The same bits at 1, 2 and 3 threads (other image and channel groups),
    torch's values, and the other kernels' (conv._IMGS = False), which give other bits."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    x, w, b, p = _scaled_case(geo, 10)
    with _switched(conv, _WGS=False):   # (40 images of 4 x 4: small-plane Winograd)
        res, dy = _fwd_bwd_across_threads(F.conv2d_fwd, F.conv2d_bwd, (x, w, b, 1, p))
        with _switched(conv, _IMGS=False):
            other = _conv2d_fwd_bwd(x, w, b, p, dy)
    if conv._avx512_direct_built():
        assert not np.array_equal(res[0][0], other[0])
        if dx_too:
            assert not np.array_equal(res[0][1], other[1])
    want = _torch_grads(torch.nn.functional.conv2d, x, w, b, p, 1, dy)
    for got in (res[0], other):
        for a, e in zip(got, want):
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


@pytest.mark.parametrize("geo,fwd,dx", [
    # (N, C, H, W, O, padding); whether the forward and the d_input take the route too
    ((8, 128, 7, 7, 128, 1), True, True),      # ResNet's last stage (fewer channels)
    ((20, 130, 7, 7, 140, 1), True, True),     # 320 tiles: two image groups; C, O % 16 != 0
    ((8, 144, 6, 5, 128, 1), True, True),      # 6 x 5 outputs: 9 tiles an image, 30/36 used
    ((8, 128, 3, 20, 128, 1), True, True),     # 3 x 20: 20 tiles an image (two vectors)
    ((8, 128, 9, 9, 136, 0), True, False),     # no padding: 7 x 7 outputs (9 x 9 d_input)
    ((8, 128, 5, 5, 128, 2), True, False),     # padding 2: 7 x 7 outputs (5 x 5 d_input)
    ((8, 128, 5, 5, 128, 1), False, False),    # 5 x 5: tiles 25/36 used -- d_weight only
    ((16, 64, 7, 7, 64, 1), True, True),       # 64 channels
    ((16, 64, 4, 4, 64, 1), True, True),       # 4 x 4: every tile used
    ((4, 64, 7, 7, 64, 1), False, False),      # 64 tiles of 64 channels: d_weight only
    ((16, 48, 7, 7, 40, 1), False, False),     # under 64 channels: d_weight only
    ((30, 16, 3, 3, 24, 1), False, False),     # 3 x 3 outputs
    ((1, 40, 7, 7, 24, 1), False, False),      # one image (16 tiles)
])
def test_conv2d_small_planes_on_winograd(geo, fwd, dx):
    """A 3x3 stride-1 conv2d with a small output plane (< 64 positions, >= 3 x 3; AVX-512
    builds, the own GEMM) runs its d_weight -- and with >= 64 channels each way and
    enough tiles, >= 3/4 used, its forward (and a d_input whose plane is such) -- on
    Winograd F(2x2, 3x3) as 16
    GEMMs over the images' 2 x 2 output tiles side by side.  The same bits at 1, 2 and 3
    threads, torch's values, and other bits than the other kernels' (conv._WGS = False),
    so the route ran."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    N, C, H, W, O, p = geo
    built = conv._avx512_direct_built() and conv._own_sgemm_on()
    assert conv._fwd_on_winograd((N, C, H, W), (O, C, 3, 3), (p,) * 4) == (built and fwd)
    assert (conv._wgrad_route((N, C, H, W), (O, C, 3, 3), (1, 1), (p,) * 4) == "winograd"
            ) == built
    x, w, b, _ = _scaled_case((N, C, H, W, O, 3, p), 12)
    res, dy = _fwd_bwd_across_threads(F.conv2d_fwd, F.conv2d_bwd, (x, w, b, 1, p))
    with _switched(conv, _WGS=False):
        other = _conv2d_fwd_bwd(x, w, b, p, dy)
    if built:
        assert not np.array_equal(res[0][2], other[2])
        assert np.array_equal(res[0][0], other[0]) != fwd
        assert np.array_equal(res[0][1], other[1]) != dx
    want = _torch_grads(torch.nn.functional.conv2d, x, w, b, p, 1, dy)
    for got in (res[0], other):
        for a, e in zip(got, want):
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


def test_conv2d_small_plane_winograd_limits():
    """Where the small-plane Winograd does not pay or would hold too much: a big weight
    over few tiles keeps its d_weight on the other kernels (2 x 512 x 7 x 7: 32 tiles), a
    transformed weight over 64 MiB every pass, and so does every pass with the route's
    limits raised (conv._set_wgs_limits)."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    built = conv._avx512_direct_built() and conv._own_sgemm_on()
    assert conv._wgrad_route((2, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1,) * 4) != "winograd"
    assert (conv._wgrad_route((4, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1,) * 4)
            == "winograd") == built
    assert conv._fwd_on_winograd((4, 512, 7, 7), (512, 512, 3, 3), (1,) * 4) == built
    # a transformed weight over 64 MiB (16 x 1040 x 1024 floats): the other kernels
    assert conv._wgrad_route((64, 1024, 7, 7), (1040, 1024, 3, 3), (1, 1), (1,) * 4) != "winograd"
    assert not conv._fwd_on_winograd((64, 1024, 7, 7), (1040, 1024, 3, 3), (1,) * 4)
    assert conv._fwd_on_winograd((64, 1024, 7, 7), (1024, 1024, 3, 3), (1,) * 4) == built
    old = conv._set_wgs_limits(10 ** 9, 10 ** 9, 10 ** 9)
    try:
        assert not conv._fwd_on_winograd((4, 512, 7, 7), (512, 512, 3, 3), (1,) * 4)
        assert conv._wgrad_route((4, 64, 7, 7), (64, 64, 3, 3), (1, 1), (1,) * 4) != "winograd"
    finally:
        conv._set_wgs_limits(*old)


@pytest.mark.parametrize("geo,dw_too", [
    # (N, C, H, W, O, stride); whether d_weight leaves the image-by-image GEMMs too
    ((3, 512, 13, 11, 256, 2), False),     # odd sizes: 7 x 6 outputs
    ((2, 1024, 8, 8, 512, 2), True),       # a 2 MiB weight: d_weight on grouped GEMMs
    ((4, 512, 9, 9, 256, 3), False),       # stride 3
])
def test_conv2d_downsampling_1x1_small_planes(geo, dw_too):
    """A strided 1x1 with a small output plane (ResNet-50's downsampling shortcut; AVX-512
    builds) reads its input in place, strided, as the images-side-by-side GEMM's planes;
    d_input is W^T dy scattered onto the positions read (zeros elsewhere).  The same bits
    at 1, 2 and 3 threads, torch's values and the other kernels' (conv._IMGS = False),
    whose forward bits differ."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    N, C, H, W, O, s = geo
    x, w, b, _ = _scaled_case((N, C, H, W, O, 1, 0), 11)
    res, dy = _fwd_bwd_across_threads(F.conv2d_fwd, F.conv2d_bwd, (x, w, b, s, 0))
    conv._IMGS = False
    try:
        y, ctx = F.conv2d_fwd(x, w, b, s, 0)
        other = (y,) + tuple(F.conv2d_bwd(ctx, dy))
    finally:
        conv._IMGS = True
    if conv._avx512_direct_built():
        assert not np.array_equal(res[0][0], other[0])
        if dw_too:
            assert not np.array_equal(res[0][2], other[2])
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, tb, s)
    ty.backward(torch.tensor(dy, dtype=torch.float64))
    want = (ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy())
    for got in (res[0], other):
        for a, e in zip(got, want):
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


@pytest.mark.parametrize("C, O", [(32, 96), (48, 100)])
def test_conv2d_3x3_small_planes_take_the_direct_kernel(C, O):
    """A 7 x 7 output (ResNet's last stage) runs its 3x3 forward on the direct kernel, not
    Winograd (2 x 2 tiles cover 8 x 8 there and the weight transform weighs more): with
    Winograd switched off the bits are the same; one image on several threads splits its
    output channels (the same bits at 1, 2 and 3 threads) and agrees with torch.  AVX-512
    builds read the weight in place (d_input: its flipped transpose); 48 -> 100 channels
    split d_input's channels too, in groups that end in blocks of 4."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, C, 7, 7)).astype(np.float32)
    w = rng.standard_normal((O, C, 3, 3)).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    res, direct, dy = _direct_and_gemm(conv, F.conv2d_fwd, F.conv2d_bwd, x, w, b, 1, 1, None,
                                       "_WINOGRAD", "_set_wg_plane_max")
    np.testing.assert_array_equal(res[0][0], direct[0])
    want = _torch_grads(torch.nn.functional.conv2d, x, w, b, 1, 1, dy)
    for a, e in zip(res[0], want):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


@pytest.mark.parametrize("plane_limit", [None, 64])
@pytest.mark.parametrize("geo", [
    # (N, C, H, W, O, kernel, padding, dilation)
    (2, 16, 9, 11, 8, 5, 2, 1),               # 5x5: forward, d_input, d_weight direct
    (3, 32, 13, 11, 12, 3, 2, 2),             # dilated 3x3, blocks of 6 and 4
    (2, 16, 7, 30, 4, (1, 3), (0, 1), 1),     # 1x3
    (2, 16, 30, 7, 20, (3, 1), (1, 0), 1),    # 3x1
    (3, 16, 6, 6, 8, 4, "same", 1),           # even kernel: asymmetric padding
    (2, 48, 20, 20, 16, (5, 3), (2, 1), (1, 2)),  # 64 + 16 channel blocks in d_weight
    (2, 5, 8, 8, 8, 2, 0, 1),                 # C % 16 != 0: d_weight on the GEMM path
    (1, 16, 21, 23, 24, 5, 2, 1),             # implicit GEMM: two 12-row tiles, one image
])
@pytest.mark.parametrize("cig", [True, False])
def test_conv2d_stride1_taps_direct_equals_the_gemm_path_and_torch(geo, plane_limit, cig):
    """Other stride-1 conv2d (not 1x1, not the 3x3 kernel's shapes; float32, groups 1,
    O % 4 == 0) run their forward and d_input on the tap-list kernel in AVX-512 builds
    (cig: as an implicit GEMM where GEMMs run on the own float32 kernel and O >= 12),
    and their d_weight on the direct d_weight kernel where C % 16 == 0; conv._DIRECT =
    False (or a padded image over plane_limit elements) forces the row-im2col GEMM paths.
    Both agree with each other and with torch, the results do not depend on the thread
    count, and in AVX-512 builds the forward and d_input of the two paths differ (the
    switch reaches the kernels)."""
    import importlib
    import fastnn._backend
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    N, C, H, W, O, k, p, d = geo
    k2 = (k, k) if isinstance(k, int) else k
    rng = np.random.default_rng(5)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((O, C) + k2).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    res, gemm, dy = _direct_and_gemm(conv, F.conv2d_fwd, F.conv2d_bwd, x, w, b, p, d,
                                     plane_limit, cig=cig)
    if conv._avx512_direct_built() and plane_limit is None:
        assert not np.array_equal(res[0][0], gemm[0])        # forward
        if C % 4 == 0:                                         # d_input: C output channels
            assert not np.array_equal(res[0][1], gemm[1])
        # (d_weight may match OpenBLAS bit for bit: both sum each weight's products over
        # the positions in order)
    want = _torch_grads(torch.nn.functional.conv2d, x, w, b, p, d, dy)
    for got in (res[0], gemm):
        for a, e in zip(got, want):
            assert a.shape == e.shape and a.dtype == np.float32
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())


def test_bench_conv3x3_rows_count_the_arithmetic_done():
    """fastnn bench's conv2d 3x3 rows (16x64x56x56 -> 64) count the multiply-adds the
    loaded kernels do: Winograd F(2x2, 3x3)'s 16 per 2 x 2 tile and channel pair where it
    runs (the forward and d_input in AVX2 and AVX-512 builds, d_weight in AVX-512 builds),
    the direct 9 per output and channel pair elsewhere -- so the
    row's share of sgemm never counts work that was not done."""
    import importlib
    import fastnn._backend
    from fastnn.bench import conv as bench_conv
    conv = importlib.import_module(fastnn._backend.backend("cpu").conv2d.__module__)
    rows = {c.op: c for c in bench_conv.cases() if c.op.startswith("conv2d 3x3")}
    direct = 2.0 * 16 * 64 * 56 * 56 * 64 * 9
    wino = 2.0 * 16 * 64 * 64 * 16 * 28 * 28
    want = wino if conv._winograd_built() else direct
    wgrad = wino if conv._winograd_built() and conv._avx512_direct_built() else direct
    assert rows["conv2d 3x3 fwd"].flops == want
    assert rows["conv2d 3x3 fwd+bwd"].flops == 2 * want + wgrad
    # ResNet's 7 x 7 planes (8 x 512 -> 512): the small-plane Winograd in AVX-512 builds
    # (4 x 4 tiles of 2 x 2 an image, covering 8 x 8)
    small = conv._avx512_direct_built() and conv._own_sgemm_on()
    direct7 = 2.0 * 8 * 512 * 7 * 7 * 512 * 9
    wino7 = 2.0 * 8 * 512 * 512 * 16 * 4 * 4
    assert rows["conv2d 3x3 fwd+bwd, 7x7 planes"].flops == (3 * wino7 if small else 3 * direct7)
    conv._WINOGRAD = False
    try:
        assert bench_conv.cases()[0].flops == direct
    finally:
        conv._WINOGRAD = True


def test_conv_kernels_check_their_tuple_arguments():
    """The compiled conv kernels index their shape and geometry tuples unchecked; a padding
    of two values (the functional layer passes four) is a ValueError there, not a read past
    the tuple (it crashed the process)."""
    from fastnn._backend import backend
    be = backend("cpu")
    x = np.ones((1, 2, 5, 5), np.float32)
    w = np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="padding"):
        be.conv2d(x, w, None, (1, 1), (1, 1), (1, 1), 1)
    with pytest.raises(ValueError, match="stride"):
        be.conv2d(x, w, None, (1,), (1, 1, 1, 1), (1, 1), 1)
    y, _ = be.conv2d(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert y.shape == (1, 3, 5, 5)
