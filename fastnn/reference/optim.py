"""Optim family, reference: in-place parameter updates (the oracle of csrc/optim.pyx).

Unlike the other families these kernels do not return ``(out, saved)``: an optimizer
step is an in-place update.  Each op takes the parameter, its gradient and its state
arrays (all C-contiguous, one dtype), updates ``param`` and the state IN PLACE and
returns None.  ``grad`` is read only.  The formulas are torch.optim's single-tensor
ones, in the same order; the reference computes in float64 and stores back in the
parameter's dtype.

    sgd_step(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay,
             nesterov, maximize, first)
        momentum_buffer is None when momentum == 0; ``first`` (the buffer's first use)
        sets it to the gradient, as torch clones it.
    adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
              weight_decay, step, maximize)
        L2 penalty added to the gradient (torch.optim.Adam); ``step`` is the step count
        after this update (1 on the first call); max_exp_avg_sq is None unless amsgrad.
    adamw_step(...same arguments...)
        decoupled decay: param *= 1 - lr * weight_decay first (torch.optim.AdamW).
    adam_step_foreach(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr, beta1,
                      beta2, eps, weight_decay, steps, maximize)
    adamw_step_foreach(...same arguments...)
        the single-tensor step for every parameter of a list (torch's foreach): lists of
        arrays (max_exp_avg_sqs None or a list), steps[i] parameter i's step count; the
        same result as one call per parameter.
    rmsprop_step(param, grad, square_avg, grad_avg, momentum_buffer, lr, alpha, eps,
                 weight_decay, momentum, maximize)
        grad_avg is None unless centered, momentum_buffer None unless momentum > 0.
    adagrad_step(param, grad, state_sum, clr, eps, weight_decay, maximize)
        clr = lr / (1 + (step - 1) lr_decay), formed by the optimizer as torch does.
    nadam_step(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
               decoupled, mu, mu_next, mu_product, step, maximize)
        torch.optim.NAdam: mu / mu_next this step's and the next step's momentum
        coefficients, mu_product the product of every mu so far, this step's included.
    radam_step(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
               decoupled, step, maximize)
        torch.optim.RAdam: the rectified step once the variance's length rho_t passes 5.
    adamax_step(param, grad, exp_avg, exp_inf, lr, beta1, beta2, eps, weight_decay, step,
                maximize)
        torch.optim.Adamax: exp_inf = max(beta2 exp_inf, |g| + eps).
    ``decoupled``: AdamW-style decay (param *= 1 - lr weight_decay) instead of the L2 term.
    The per-step scalars of NAdam and RAdam are formed once, in double precision, by
    ``nadam_scalars`` / ``radam_scalars`` (every backend uses them).
"""
import numpy as np

OPS = ("sgd_step", "adam_step", "adamw_step", "adam_step_foreach", "adamw_step_foreach",
       "rmsprop_step", "adagrad_step", "nadam_step", "radam_step", "adamax_step")


def sgd_step(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay,
             nesterov, maximize, first):
    p = param.astype(np.float64)
    g = grad.astype(np.float64)
    if maximize:
        g = -g
    if weight_decay != 0:
        g = g + weight_decay * p
    if momentum != 0:
        if first:
            buf = g.copy()
        else:
            buf = momentum_buffer.astype(np.float64) * momentum + (1 - dampening) * g
        momentum_buffer[...] = buf
        g = g + momentum * buf if nesterov else buf
    param[...] = p - lr * g


def _adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
          weight_decay, step, maximize, decoupled):
    p, g = _decayed(param, grad, lr, weight_decay, decoupled, maximize)
    m, v = _moments(exp_avg, exp_avg_sq, g, beta1, beta2)
    if max_exp_avg_sq is not None:
        v = np.maximum(max_exp_avg_sq.astype(np.float64), v)
        max_exp_avg_sq[...] = v
    bias_correction1 = 1 - beta1 ** step
    bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
    step_size = lr / bias_correction1
    denom = np.sqrt(v) / bias_correction2_sqrt + eps
    param[...] = p - step_size * m / denom


def adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
              weight_decay, step, maximize):
    _adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
          weight_decay, step, maximize, False)


def adamw_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
               weight_decay, step, maximize):
    _adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
          weight_decay, step, maximize, True)


def _lerp(a, b, w):
    """torch.lerp's two forms (switched at weight 0.5)."""
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - w)


def _grad_with_decay(param, grad, weight_decay, maximize):
    return _decayed(param, grad, 0.0, weight_decay, False, maximize)


def rmsprop_step(param, grad, square_avg, grad_avg, momentum_buffer, lr, alpha, eps,
                 weight_decay, momentum, maximize):
    p, g = _grad_with_decay(param, grad, weight_decay, maximize)
    sq = square_avg.astype(np.float64) * alpha + (1 - alpha) * g * g
    square_avg[...] = sq
    if grad_avg is not None:
        ga = _lerp(grad_avg.astype(np.float64), g, 1 - alpha)
        grad_avg[...] = ga
        avg = np.sqrt(sq - ga * ga)
    else:
        avg = np.sqrt(sq)
    avg = avg + eps
    if momentum_buffer is not None:
        buf = momentum_buffer.astype(np.float64) * momentum + g / avg
        momentum_buffer[...] = buf
        param[...] = p - lr * buf
    else:
        param[...] = p - lr * (g / avg)


def adagrad_step(param, grad, state_sum, clr, eps, weight_decay, maximize):
    p, g = _grad_with_decay(param, grad, weight_decay, maximize)
    s = state_sum.astype(np.float64) + g * g
    state_sum[...] = s
    param[...] = p - clr * (g / (np.sqrt(s) + eps))


# ---------------------------------------------------------------- NAdam, RAdam, Adamax
def nadam_scalars(lr, beta2, mu, mu_next, mu_product, step):
    """(bias_correction2, the gradient's coefficient, the moment's coefficient): torch's
    addcdiv values -lr (1 - mu) / (1 - mu_product) and -lr mu_next / (1 - mu_product
    mu_next), in its order."""
    bias_correction2 = 1 - beta2 ** step
    c_grad = -lr * (1.0 - mu) / (1.0 - mu_product)
    c_avg = (-lr * mu_next) / (1.0 - mu_product * mu_next)
    return bias_correction2, c_grad, c_avg


def radam_scalars(beta1, beta2, step):
    """(bias_correction1, sqrt(bias_correction2), rect or None): the rectification term
    when the approximated SMA length rho_t is above 5, else None (the un-adapted step)."""
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    rho_inf = 2 / (1 - beta2) - 1
    rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
    rect = None
    if rho_t > 5.0:
        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
    return bias_correction1, bias_correction2 ** 0.5, rect


def _decayed(param, grad, lr, weight_decay, decoupled, maximize):
    """(p, g) in float64 after maximize and the weight decay (decoupled: p scaled first)."""
    p = param.astype(np.float64)
    g = grad.astype(np.float64)
    if maximize:
        g = -g
    if weight_decay != 0:
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
    return p, g


def _moments(exp_avg, exp_avg_sq, g, beta1, beta2):
    m = _lerp(exp_avg.astype(np.float64), g, 1 - beta1)
    v = exp_avg_sq.astype(np.float64) * beta2 + (1 - beta2) * g * g
    exp_avg[...] = m
    exp_avg_sq[...] = v
    return m, v


def nadam_step(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
               decoupled, mu, mu_next, mu_product, step, maximize):
    p, g = _decayed(param, grad, lr, weight_decay, decoupled, maximize)
    m, v = _moments(exp_avg, exp_avg_sq, g, beta1, beta2)
    bc2, c_grad, c_avg = nadam_scalars(lr, beta2, mu, mu_next, mu_product, step)
    denom = np.sqrt(v / bc2) + eps
    p = p + c_grad * g / denom
    param[...] = p + c_avg * m / denom


def radam_step(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay,
               decoupled, step, maximize):
    p, g = _decayed(param, grad, lr, weight_decay, decoupled, maximize)
    m, v = _moments(exp_avg, exp_avg_sq, g, beta1, beta2)
    bc1, bc2_sqrt, rect = radam_scalars(beta1, beta2, step)
    bcm = m / bc1
    if rect is None:
        param[...] = p - bcm * lr
    else:
        param[...] = p - bcm * lr * (bc2_sqrt / (np.sqrt(v) + eps)) * rect


def adamax_step(param, grad, exp_avg, exp_inf, lr, beta1, beta2, eps, weight_decay, step,
                maximize):
    p, g = _decayed(param, grad, lr, weight_decay, False, maximize)
    m = _lerp(exp_avg.astype(np.float64), g, 1 - beta1)
    exp_avg[...] = m
    u = np.maximum(exp_inf.astype(np.float64) * beta2, np.abs(g) + eps)   # NaN propagates
    exp_inf[...] = u
    clr = lr / (1 - beta1 ** step)
    param[...] = p + -clr * m / u


def foreach(step_fn):
    """The list form of a single-tensor Adam(W) step: step_fn for every parameter of the
    lists, in list order (the reference's and the cuda backend's *_step_foreach)."""
    def op(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr, beta1, beta2, eps,
           weight_decay, steps, maximize):
        k = len(params)
        if not (len(grads) == len(exp_avgs) == len(exp_avg_sqs) == len(steps) == k) or (
                max_exp_avg_sqs is not None and len(max_exp_avg_sqs) != k):
            raise ValueError("params, grads, exp_avgs, exp_avg_sqs, steps (and "
                             "max_exp_avg_sqs) must have one entry per parameter")
        vmax = max_exp_avg_sqs if max_exp_avg_sqs is not None else [None] * k
        for p, g, m, v, vm, st in zip(params, grads, exp_avgs, exp_avg_sqs, vmax, steps):
            step_fn(p, g, m, v, vm, lr, beta1, beta2, eps, weight_decay, st, maximize)
    op.__name__ = op.__qualname__ = step_fn.__name__ + "_foreach"
    op.__doc__ = f"{step_fn.__name__} for every parameter of a list; steps[i] is parameter " \
                 f"i's step count."
    return op


adam_step_foreach = foreach(adam_step)
adamw_step_foreach = foreach(adamw_step)
