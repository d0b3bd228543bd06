"""Fit the tanh GELU's 16-lane tables (csrc/fnn_math.h: fnn_gelut16_tab, fnn_gelut16_dtab).

GPT-2's GELU is y = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).  With a = |x| and
g(a) = a sigmoid(-2u(a)), y = max(x, 0) - g(a) (u is odd) and dy/dx = 1 - g'(a) for x >= 0,
g'(a) for x < 0.  g and G = g' are fitted on [0, 3.9375) in 32 pieces of width 1/8 centred
at k/8, each a degree-4 polynomial in c = a - k/8 (weighted least squares in float64: on
the relative error for g, piece 0 without a constant term so that g(0) = 0; relative to
max(|G|, 1e-3) for G), as fnn_gelu16 does for the erf GELU.  Row j of a table holds c^j's
coefficients of the 32 pieces.  Prints the two C tables and the float32-evaluated errors.

    python tools/gelu_tanh_tables.py
"""
import numpy as np

K = np.sqrt(2 / np.pi)
C = 0.044715


def _sig(z):
    return 1 / (1 + np.exp(-z))


def g(a):
    return a * _sig(-2 * K * (a + C * a ** 3))


def G(a):
    """g'(a) = the tanh GELU's derivative at x = -a."""
    x = -a
    s = _sig(2 * K * (x + C * x ** 3))
    return s + 2 * x * s * (1 - s) * K * (1 + 3 * C * x * x)


def fit(f, floor, no_const0):
    tab = np.zeros((5, 32))
    for p in range(32):
        c = np.linspace(-1 / 16 if p else 0.0, 1 / 16, 4001)
        y = f(p / 8 + c)
        w = 1 / np.maximum(np.abs(y), floor)
        t = 8 * c
        first = 1 if (no_const0 and p == 0) else 0
        V = np.stack([t ** j for j in range(first, 5)], 1)
        co = np.linalg.lstsq(V * w[:, None], y * w, rcond=None)[0]
        tab[first:, p] = co * 8.0 ** np.arange(first, 5)
    return tab.astype(np.float32)


def evaluate(tab, a):
    """The kernel's evaluation in float32: piece k = round(8a), Horner in c = a - k/8."""
    a = a.astype(np.float32)
    k = np.rint(a * 8).astype(int)
    c = (a - k / np.float32(8)).astype(np.float32)
    r = tab[4, k]
    for j in (3, 2, 1, 0):
        r = (r * c + tab[j, k]).astype(np.float32)
    return r


def c_table(tab, name):
    rows = []
    for j in range(len(tab)):
        vals = [f"{v:.9e}f" for v in tab[j]]
        body = ",\n".join("    " + ", ".join(vals[i:i + 4]) for i in range(0, 32, 4))
        rows.append("  {\n" + body + "\n  }")
    return (f"static const float {name}[{len(tab)}][32] __attribute__((aligned(64))) = {{\n"
            + ",\n".join(rows) + "\n};")


def main():
    tg, tG = fit(g, 1e-30, True), fit(G, 1e-3, False)
    x = np.linspace(-3.9374, 3.9374, 2_000_001).astype(np.float32)
    ax, x64 = np.abs(x), x.astype(np.float64)
    y = np.maximum(x, 0) - evaluate(tg, ax)
    want = x64 * _sig(2 * K * (x64 + C * x64 ** 3))
    d = np.where(x < 0, evaluate(tG, ax), np.float32(1) - evaluate(tG, ax))
    dwant = G(-x64)
    print(c_table(tg, "fnn_gelut16_tab"))
    print(c_table(tG, "fnn_gelut16_dtab"))
    print(f"/* forward max relative error {np.max(np.abs(y - want) / np.abs(want + 1e-300)):.3g}, "
          f"derivative {np.max(np.abs(d - dwant) / np.maximum(np.abs(dwant), 1e-3)):.3g} */")


if __name__ == "__main__":
    main()
