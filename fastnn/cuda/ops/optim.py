"""Optim family on the GPU: fused in-place SGD / Adam / AdamW / RMSprop / Adagrad / NAdam /
RAdam / Adamax updates.

One elementwise kernel per step and parameter updates the parameter and its state in
place (torch.optim's single-tensor formulas, in the same order).  Hyperparameters and
the bias corrections are computed on the host in float64 and passed as scalars of the
parameter's dtype, so float32 parameters are updated in float32 arithmetic.
"""
import math

from ...reference.optim import foreach, nadam_scalars, radam_scalars
from .. import _kit
from .._kit import THREADS, cuda, gid, gsz, kernel

OPS = ("sgd_step", "adam_step", "adamw_step", "adam_step_foreach", "adamw_step_foreach",
       "rmsprop_step", "adagrad_step", "nadam_step", "radam_step", "adamax_step")


@_kit.per_dtype
def _kernels(dt):
    one = dt.type(1)

    @cuda.jit(device=True)
    def grad_of(g, p, i, wd, has_wd, maximize):
        # torch's first lines: maximize flips the gradient, then the L2 penalty
        d = -g[i] if maximize else g[i]
        return d + wd * p[i] if has_wd else d

    @kernel
    def sgd(p, g, buf, n, lr, momentum, damp_c, wd, has_wd, nesterov, maximize, first, has_mom):
        for i in range(gid(), n, gsz()):
            d = grad_of(g, p, i, wd, has_wd, maximize)
            if has_mom:
                if first:
                    b = d
                else:
                    b = buf[i] * momentum + damp_c * d
                buf[i] = b
                if nesterov:
                    d = d + momentum * b
                else:
                    d = b
            p[i] = p[i] - lr * d

    @cuda.jit(device=True)
    def variant_start(p, g, m, i, oma, lerp_low, wd, has_wd, decay, maximize, decoupled):
        # Adam and its variants: maximize, the weight decay, exp_avg's lerp (torch's two
        # forms, switched at weight 0.5) -> (w, d, mi)
        d = -g[i] if maximize else g[i]
        w = p[i]
        if has_wd:
            if decoupled:
                w = w * decay
            else:
                d = d + wd * w
        mi = m[i]
        if lerp_low:
            mi = mi + oma * (d - mi)
        else:
            mi = d - (d - mi) * (one - oma)
        m[i] = mi
        return w, d, mi

    @kernel
    def adam(p, g, m, v, vmax, n, b1c, lerp_low, b2, b2c, eps, wd, has_wd, step_size, bc2_sqrt,
             decay, maximize, decoupled, amsgrad):
        for i in range(gid(), n, gsz()):
            w, d, mi = variant_start(p, g, m, i, b1c, lerp_low, wd, has_wd, decay, maximize,
                                     decoupled)
            vi = v[i] * b2 + b2c * d * d
            v[i] = vi
            if amsgrad:
                vi = max(vmax[i], vi)
                vmax[i] = vi
            p[i] = w - step_size * mi / (math.sqrt(vi) / bc2_sqrt + eps)

    @kernel
    def rmsprop(p, g, sq, ga, buf, n, lr, alpha, oma, lerp_low, eps, wd, has_wd, momentum,
                maximize, centered, has_mom):
        for i in range(gid(), n, gsz()):
            d = grad_of(g, p, i, wd, has_wd, maximize)
            si = sq[i] * alpha + oma * d * d
            sq[i] = si
            if centered:
                gai = ga[i]
                if lerp_low:
                    gai = gai + oma * (d - gai)
                else:
                    gai = d - (d - gai) * alpha
                ga[i] = gai
                a = math.sqrt(si - gai * gai) + eps
            else:
                a = math.sqrt(si) + eps
            if has_mom:
                b = buf[i] * momentum + d / a
                buf[i] = b
                p[i] = p[i] - lr * b
            else:
                p[i] = p[i] - lr * (d / a)

    @kernel
    def adagrad(p, g, ssum, n, clr, eps, wd, has_wd, maximize):
        for i in range(gid(), n, gsz()):
            d = grad_of(g, p, i, wd, has_wd, maximize)
            si = ssum[i] + d * d
            ssum[i] = si
            p[i] = p[i] - clr * (d / (math.sqrt(si) + eps))

    @kernel
    def nadam(p, g, m, v, n, oma, lerp_low, b2, omb2, eps, wd, has_wd, decay, bc2, c_grad,
              c_avg, maximize, decoupled):
        for i in range(gid(), n, gsz()):
            w, d, mi = variant_start(p, g, m, i, oma, lerp_low, wd, has_wd, decay, maximize,
                                     decoupled)
            vi = v[i] * b2 + omb2 * d * d
            v[i] = vi
            den = math.sqrt(vi / bc2) + eps
            w = w + c_grad * d / den
            p[i] = w + c_avg * mi / den

    @kernel
    def radam(p, g, m, v, n, oma, lerp_low, b2, omb2, eps, wd, has_wd, decay, bc1, bc2_sqrt,
              rect, lr, maximize, decoupled, rect_on):
        for i in range(gid(), n, gsz()):
            w, d, mi = variant_start(p, g, m, i, oma, lerp_low, wd, has_wd, decay, maximize,
                                     decoupled)
            vi = v[i] * b2 + omb2 * d * d
            v[i] = vi
            b = mi / bc1
            if rect_on:
                p[i] = w - b * lr * (bc2_sqrt / (math.sqrt(vi) + eps)) * rect
            else:
                p[i] = w - b * lr

    @kernel
    def adamax(p, g, m, u, n, oma, lerp_low, b2, eps, wd, has_wd, neg_clr, maximize):
        for i in range(gid(), n, gsz()):
            w, d, mi = variant_start(p, g, m, i, oma, lerp_low, wd, has_wd, one, maximize,
                                     False)
            ui = u[i] * b2
            a = abs(d) + eps
            if ui == ui and (a != a or a > ui):    # torch.maximum: NaN propagates
                ui = a
            u[i] = ui
            p[i] = w + neg_clr * mi / ui

    # fetched by name (DESIGN.md: never by tuple position)
    return _kit.named(sgd=sgd, adam=adam, rmsprop=rmsprop, adagrad=adagrad, nadam=nadam,
                      radam=radam, adamax=adamax)


def _cfg(n):
    return _kit.blocks_for(n), THREADS


def _targets(grad, *named):
    """(host, [in-place device targets], grad, dtype, n) for a step: ``named`` is (array or
    None, name) pairs, the parameter first; host arrays go to the device and come back by
    _kit.copy_back(host)."""
    host = []
    arrays = [_kit.inplace_target(a, name, host) for a, name in named]
    p = arrays[0]
    return host, arrays, _kit.dev(grad), _kit.dtype_of(p), _kit.numel(_kit.shape_of(p))


def sgd_step(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay,
             nesterov, maximize, first):
    host, (p, buf), g, dt, n = _targets(grad, (param, "param"),
                                        (momentum_buffer, "momentum_buffer"))
    if n == 0:
        return None
    T = dt.type
    sgd = _kernels(dt).sgd
    sgd[_cfg(n)](_kit.flat(p), _kit.flat(g), _kit.flat(p if buf is None else buf), n, T(lr),
                 T(momentum), T(1 - dampening), T(weight_decay), weight_decay != 0, bool(nesterov), bool(maximize),
                 bool(first), buf is not None)
    _kit.copy_back(host)
    return None


def _adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
          weight_decay, step, maximize, decoupled):
    host, (p, m, v, vmax), g, dt, n = _targets(
        grad, (param, "param"), (exp_avg, "exp_avg"), (exp_avg_sq, "exp_avg_sq"),
        (max_exp_avg_sq, "max_exp_avg_sq"))
    if n == 0:
        return None
    T = dt.type
    bias_correction1 = 1 - beta1 ** step
    bc2_sqrt = math.sqrt(1 - beta2 ** step)
    adam = _kernels(dt).adam
    adam[_cfg(n)](_kit.flat(p), _kit.flat(g), _kit.flat(m), _kit.flat(v),
                  _kit.flat(v if vmax is None else vmax), n, T(1 - beta1), abs(1 - beta1) < 0.5, T(beta2), T(1 - beta2),
                  T(eps), T(weight_decay), weight_decay != 0, T(lr / bias_correction1), T(bc2_sqrt),
                  T(1 - lr * weight_decay), bool(maximize), bool(decoupled), vmax is not None)
    _kit.copy_back(host)
    return None


def adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
              weight_decay, step, maximize):
    _adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
          weight_decay, step, maximize, False)


def adamw_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
               weight_decay, step, maximize):
    _adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
          weight_decay, step, maximize, True)




# the list forms: a kernel launch per parameter
adam_step_foreach = foreach(adam_step)
adamw_step_foreach = foreach(adamw_step)

def rmsprop_step(param, grad, square_avg, grad_avg, momentum_buffer, lr, alpha, eps,
                 weight_decay, momentum, maximize):
    host, (p, sq, ga, buf), g, dt, n = _targets(
        grad, (param, "param"), (square_avg, "square_avg"), (grad_avg, "grad_avg"),
        (momentum_buffer, "momentum_buffer"))
    if n == 0:
        return None
    T = dt.type
    _kernels(dt).rmsprop[_cfg(n)](
        _kit.flat(p), _kit.flat(g), _kit.flat(sq), _kit.flat(sq if ga is None else ga),
        _kit.flat(sq if buf is None else buf), n, T(lr), T(alpha), T(1 - alpha),
        abs(1 - alpha) < 0.5, T(eps), T(weight_decay), weight_decay != 0, T(momentum),
        bool(maximize), ga is not None, buf is not None)
    _kit.copy_back(host)
    return None


def adagrad_step(param, grad, state_sum, clr, eps, weight_decay, maximize):
    host, (p, ssum), g, dt, n = _targets(grad, (param, "param"), (state_sum, "state_sum"))
    if n == 0:
        return None
    T = dt.type
    _kernels(dt).adagrad[_cfg(n)](_kit.flat(p), _kit.flat(g), _kit.flat(ssum), n, T(clr), T(eps),
                             T(weight_decay), weight_decay != 0, bool(maximize))
    _kit.copy_back(host)
    return None


def nadam_step(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
               decoupled, mu, mu_next, mu_product, step, maximize):
    host, (p, m, v), g, dt, n = _targets(grad, (param, "param"), (exp_avg, "exp_avg"),
                                         (exp_avg_sq, "exp_avg_sq"))
    if n == 0:
        return None
    T = dt.type
    bc2, c_grad, c_avg = nadam_scalars(lr, beta2, mu, mu_next, mu_product, step)
    _kernels(dt).nadam[_cfg(n)](
        _kit.flat(p), _kit.flat(g), _kit.flat(m), _kit.flat(v), n, T(1 - beta1),
        abs(1 - beta1) < 0.5, T(beta2), T(1 - beta2), T(eps), T(weight_decay), weight_decay != 0,
        T(1 - lr * weight_decay), T(bc2), T(c_grad), T(c_avg), bool(maximize), bool(decoupled))
    _kit.copy_back(host)
    return None


def radam_step(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
               decoupled, step, maximize):
    host, (p, m, v), g, dt, n = _targets(grad, (param, "param"), (exp_avg, "exp_avg"),
                                         (exp_avg_sq, "exp_avg_sq"))
    if n == 0:
        return None
    T = dt.type
    bc1, bc2_sqrt, rect = radam_scalars(beta1, beta2, step)
    _kernels(dt).radam[_cfg(n)](
        _kit.flat(p), _kit.flat(g), _kit.flat(m), _kit.flat(v), n, T(1 - beta1),
        abs(1 - beta1) < 0.5, T(beta2), T(1 - beta2), T(eps), T(weight_decay), weight_decay != 0,
        T(1 - lr * weight_decay), T(bc1), T(bc2_sqrt), T(0.0 if rect is None else rect), T(lr),
        bool(maximize), bool(decoupled), rect is not None)
    _kit.copy_back(host)
    return None


def adamax_step(param, grad, exp_avg, exp_inf, lr, beta1, beta2, eps, weight_decay, step,
                maximize):
    host, (p, m, u), g, dt, n = _targets(grad, (param, "param"), (exp_avg, "exp_avg"),
                                         (exp_inf, "exp_inf"))
    if n == 0:
        return None
    T = dt.type
    _kernels(dt).adamax[_cfg(n)](
        _kit.flat(p), _kit.flat(g), _kit.flat(m), _kit.flat(u), n, T(1 - beta1),
        abs(1 - beta1) < 0.5, T(beta2), T(eps), T(weight_decay), weight_decay != 0,
        T(-(lr / (1 - beta1 ** step))), bool(maximize))
    _kit.copy_back(host)
    return None
