"""Conv family benchmarks: conv2d (3x3 and depthwise), conv1d, conv_transpose2d, max/avg and
adaptive average pooling, batchnorm2d.

Each op has a forward+backward case (vs PyTorch in the same run) and, where the issue
sets a ceiling target, a forward-only case whose GFLOP/s or GB/s is read against the
machine's sgemm rate or copy bandwidth.  The conv2d 3x3 rows count the arithmetic the
loaded kernels do: Winograd F(2x2, 3x3)'s in AVX-512 builds (16 multiply-adds per 2 x 2
tile and channel pair instead of the direct 36)."""
import numpy as np

from .core import BenchCase, torch_or_none

F32 = 4


def _winograd(N, C, H, W, O, k, pad, groups):
    """(forward and d_input, d_weight): whether the loaded kernels run this conv2d (3x3,
    stride 1, 'same' padding, groups 1) on Winograd F(2x2, 3x3) -- the forward and d_input
    in AVX2 and AVX-512 builds on planes of >= 64 positions, and in AVX-512 builds on
    smaller planes of several images with >= 64 channels (conv._fwd_on_winograd);
    d_weight in AVX-512 builds where its route is Winograd's (wide layers with few tiles
    take GEMMs: conv._wgrad_route)."""
    if k != 3 or pad != 1 or groups != 1:
        return False, False
    try:
        import importlib
        from fastnn._backend import backend
        conv = importlib.import_module(backend("cpu").conv2d.__module__)
        fwd = conv._fwd_on_winograd((N, C, H, W), (O, C, k, k), (pad,) * 4)
        wgrad = conv._wgrad_route((N, C, H, W), (O, C, k, k), (1, 1), (pad,) * 4)
        return fwd, fwd and bool(conv._avx512_direct_built()) and wgrad == "winograd"
    except (ImportError, AttributeError):
        return False, False


def _conv_case(N, C, H, W, O, k, pad, groups, fwd_only, op, stride=1):
    OH = (H + 2 * pad - k) // stride + 1
    OW = (W + 2 * pad - k) // stride + 1

    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = (rng.standard_normal((O, C // groups, k, k)) * 0.05).astype(np.float32)
        b = np.zeros(O, np.float32)
        y0 = F.conv2d(x, w, b, stride, pad, 1, groups)
        dy = rng.standard_normal(y0.shape).astype(np.float32)
        ref = backend("reference")
        geo = ((stride, stride), (pad, pad, pad, pad), (1, 1), groups)

        if fwd_only:
            def fast():
                return F.conv2d(x, w, b, stride, pad, 1, groups)

            def reference():
                return ref.conv2d(x, w, b, *geo)
        else:
            def fast():
                y, ctx = F.conv2d_fwd(x, w, b, stride, pad, 1, groups)
                return F.conv2d_bwd(ctx, dy)

            def reference():
                y, s = ref.conv2d(x, w, b, *geo)
                return ref.conv2d_backward(dy, s)
        fns = {"fastnn": fast, "reference": None if N * C * H * W > 1 << 20 else reference,
               "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=not fwd_only)
            tm = torch.nn.Conv2d(C, O, k, stride=stride, padding=pad, groups=groups)
            tdy = torch.tensor(dy)
            if fwd_only:
                def t():
                    with torch.no_grad():
                        tm(tx)
            else:
                def t():
                    tx.grad = None
                    tm.zero_grad(set_to_none=True)
                    tm(tx).backward(tdy)
            fns["torch"] = t
        return fns
    direct = 2.0 * N * O * OH * OW * (C // groups) * k * k
    fwd = wgrad = direct
    wino, wino_wgrad = _winograd(N, C, H, W, O, k, pad, groups) if stride == 1 else (False, False)
    if wino:
        # the multiply-adds the kernel does: 16 per 2 x 2 output tile and channel pair,
        # not the direct 36 -- so the row's share of sgemm is a share of work done (the
        # forward and d_input; d_weight too where it runs on the same transforms:
        # AVX-512 builds, O % 16 == 0, C % 4 == 0)
        fwd = 2.0 * N * O * (C // groups) * 16 * ((H + 1) // 2) * ((W + 1) // 2)
        wgrad = fwd if wino_wgrad else direct
    return BenchCase("conv", op, f"{N}x{C}x{H}x{W}->{O} k{k}" + (f" g{groups}" if groups > 1 else "")
                     + (f" s{stride}" if stride > 1 else ""), make,
                     flops=fwd if fwd_only else 2 * fwd + wgrad, min_time=0.3, max_reps=20)


def _pool_case(kind, N, C, H, W, k, s, p, fwd_only):
    OH = (H + 2 * p - k) // s + 1
    OW = (W + 2 * p - k) // s + 1

    def make():
        import fastnn.functional as F
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        dy = rng.standard_normal((N, C, OH, OW)).astype(np.float32)
        fwd = F.max_pool2d_fwd if kind == "max" else F.avg_pool2d_fwd
        bwd = F.max_pool2d_bwd if kind == "max" else F.avg_pool2d_bwd

        if fwd_only:
            def fast():
                return fwd(x, k, s, p)[0]
        else:
            def fast():
                y, ctx = fwd(x, k, s, p)
                return bwd(ctx, dy)
        fns = {"fastnn": fast, "reference": None, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=not fwd_only)
            tdy = torch.tensor(dy)
            tf = torch.nn.functional.max_pool2d if kind == "max" else torch.nn.functional.avg_pool2d
            if fwd_only:
                def t():
                    with torch.no_grad():
                        # with_indices: what a training forward computes (and torch saves)
                        if kind == "max":
                            torch.nn.functional.max_pool2d(tx, k, s, p, return_indices=True)
                        else:
                            tf(tx, k, s, p)
            else:
                def t():
                    tx.grad = None
                    tf(tx, k, s, p).backward(tdy)
            fns["torch"] = t
        return fns
    nin, nout = N * C * H * W * F32, N * C * OH * OW * F32
    # forward: read x, write y (+ the argmax of max pooling, int32); backward the reverse
    idx = N * C * OH * OW * 4 if kind == "max" else 0
    nbytes = nin + nout + idx if fwd_only else 2 * (nin + nout + idx)
    op = f"{kind}_pool2d " + ("fwd" if fwd_only else "fwd+bwd")
    return BenchCase("conv", op, f"{N}x{C}x{H}x{W} k{k}/{s}" + (f" p{p}" if p else ""), make,
                     bytes=nbytes, min_time=0.3, max_reps=30)


def _bn_case(N, C, H, W):
    def make():
        import fastnn.functional as F
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        dy = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = np.ones(C, np.float32)
        b = np.zeros(C, np.float32)
        rm = np.zeros(C, np.float32)
        rv = np.ones(C, np.float32)

        def fast():
            y, ctx = F.batch_norm_fwd(x, rm, rv, w, b, True)
            return F.batch_norm_bwd(ctx, dy)
        fns = {"fastnn": fast, "reference": None, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=True)
            tm = torch.nn.BatchNorm2d(C)
            tdy = torch.tensor(dy)

            def t():
                tx.grad = None
                tm.zero_grad(set_to_none=True)
                tm(tx).backward(tdy)
            fns["torch"] = t
        return fns
    n = N * C * H * W * F32
    # forward reads x twice and writes y; backward reads dy, x twice and writes dx
    return BenchCase("conv", "batch_norm2d fwd+bwd", f"{N}x{C}x{H}x{W}", make, bytes=8 * n,
                     min_time=0.3, max_reps=30)


def _conv1d_case(N, C, L, O, k, pad):
    def make():
        import fastnn.functional as F
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, L)).astype(np.float32)
        w = (rng.standard_normal((O, C, k)) * 0.05).astype(np.float32)
        b = np.zeros(O, np.float32)
        dy = rng.standard_normal(F.conv1d(x, w, b, 1, pad).shape).astype(np.float32)

        def fast():
            y, ctx = F.conv1d_fwd(x, w, b, 1, pad)
            return F.conv1d_bwd(ctx, dy)
        fns = {"fastnn": fast, "reference": None, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=True)
            tm = torch.nn.Conv1d(C, O, k, padding=pad)
            tdy = torch.tensor(dy)

            def t():
                tx.grad = None
                tm.zero_grad(set_to_none=True)
                tm(tx).backward(tdy)
            fns["torch"] = t
        return fns
    flops = 2.0 * N * O * L * C * k
    return BenchCase("conv", "conv1d fwd+bwd", f"{N}x{C}x{L}->{O} k{k}", make, flops=3 * flops,
                     min_time=0.3, max_reps=20)


def _tconv_case(N, C, H, W, O, k, s, p):
    def make():
        import fastnn.functional as F
        from fastnn._backend import backend
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = (rng.standard_normal((C, O, k, k)) * 0.05).astype(np.float32)
        b = np.zeros(O, np.float32)
        dy = rng.standard_normal(F.conv_transpose2d(x, w, b, s, p).shape).astype(np.float32)
        ref = backend("reference")
        OH, OW = dy.shape[2:]

        def fast():
            y, ctx = F.conv_transpose2d_fwd(x, w, b, s, p)
            return F.conv_transpose2d_bwd(ctx, dy)

        def reference():
            y, sv = ref.conv_transpose2d(x, w, b, (s, s), (p, p, p, p), (OH, OW), (1, 1), 1)
            return ref.conv_transpose2d_backward(dy, sv)
        fns = {"fastnn": fast, "reference": None if N * C * H * W > 1 << 20 else reference,
               "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=True)
            tm = torch.nn.ConvTranspose2d(C, O, k, stride=s, padding=p)
            tdy = torch.tensor(dy)

            def t():
                tx.grad = None
                tm.zero_grad(set_to_none=True)
                tm(tx).backward(tdy)
            fns["torch"] = t
        return fns
    flops = 2.0 * N * C * H * W * O * k * k
    return BenchCase("conv", "conv_transpose2d fwd+bwd", f"{N}x{C}x{H}x{W}->{O} k{k} s{s} p{p}",
                     make, flops=3 * flops, min_time=0.3, max_reps=20)


def _adaptive_avg_case(N, C, H, W, out):
    def make():
        import fastnn.functional as F
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        dy = rng.standard_normal((N, C, out, out)).astype(np.float32)

        def fast():
            y, ctx = F.adaptive_avg_pool2d_fwd(x, out)
            return F.adaptive_avg_pool2d_bwd(ctx, dy)
        fns = {"fastnn": fast, "reference": None, "torch": None}
        torch = torch_or_none()
        if torch is not None:
            tx = torch.tensor(x, requires_grad=True)
            tdy = torch.tensor(dy)

            def t():
                tx.grad = None
                torch.nn.functional.adaptive_avg_pool2d(tx, out).backward(tdy)
            fns["torch"] = t
        return fns
    # minimum traffic: fwd reads x; bwd writes dx (the outputs are tiny)
    return BenchCase("conv", "adaptive_avg_pool2d fwd+bwd", f"{N}x{C}x{H}x{W}->{out}", make,
                     bytes=2.0 * F32 * N * C * H * W, max_reps=200)


def cases():
    return [
        _conv_case(16, 64, 56, 56, 64, 3, 1, 1, True, "conv2d 3x3 fwd"),
        _conv_case(16, 64, 56, 56, 64, 3, 1, 1, False, "conv2d 3x3 fwd+bwd"),
        # one image, deep channels (inference and small-batch fine-tuning): the per-call
        # weight transform and the threads' share of a single image
        _conv_case(1, 256, 14, 14, 256, 3, 1, 1, True, "conv2d 3x3 fwd, one image"),
        _conv_case(1, 256, 14, 14, 256, 3, 1, 1, False, "conv2d 3x3 fwd+bwd, one image"),
        # a ResNet stage's first conv (stride 2, channels doubled), one image
        _conv_case(1, 256, 28, 28, 512, 3, 1, 1, False, "conv2d 3x3 stride 2 fwd+bwd, one image",
                   stride=2),
        # ResNet's last stage: 7 x 7 planes, several images a GEMM (ResNet-18's 3x3 and
        # ResNet-50's 1x1)
        _conv_case(8, 512, 7, 7, 512, 3, 1, 1, False, "conv2d 3x3 fwd+bwd, 7x7 planes"),
        _conv_case(8, 2048, 7, 7, 512, 1, 0, 1, False, "conv2d 1x1 fwd+bwd, 7x7 planes"),
        _conv_case(16, 128, 56, 56, 128, 3, 1, 128, False, "conv2d depthwise 3x3 fwd+bwd"),
        _pool_case("max", 16, 64, 112, 112, 2, 2, 0, True),
        _pool_case("max", 16, 64, 112, 112, 2, 2, 0, False),
        _pool_case("avg", 16, 64, 112, 112, 3, 2, 1, True),
        _pool_case("avg", 16, 64, 112, 112, 3, 2, 1, False),
        _bn_case(16, 64, 112, 112),
        _conv1d_case(32, 256, 1024, 256, 3, 1),
        _tconv_case(16, 64, 28, 28, 32, 4, 2, 1),
        _adaptive_avg_case(32, 512, 14, 14, 1),
    ]
