"""Fit tanh's 16-lane table (csrc/fnn_math.h: fnn_tanh16_tab).

tanh is odd; with a = |x| the avx512 build evaluates tanh(a) on [SMALL, 3.9375) in 32
pieces of width 1/8 centred at k/8, each a degree-4 polynomial in c = a - k/8 (weighted
least squares in float64 on the relative error), the same piece scheme as the GELU
tables (fnn_tab16_eval).  Below SMALL = 0.1875 (pieces 0 and 1, where a piece's
constant term would cancel against its slope) it takes the odd polynomial
a + a s (t3 + s (t5 + s (t7 + s t9))), s = a^2, fitted on the relative error; past the
cut, 1 - 2e(1 - e), e = exp(-2a).  Row j of the table holds c^j's coefficients of the 32
pieces.  Prints the C table, the odd polynomial and the float32-evaluated error in ulps.

    python tools/tanh_tables.py
"""
import numpy as np

from gelu_tanh_tables import c_table, evaluate   # the same piece scheme and C layout


SMALL = 0.1875


def fit_odd():
    """t3, t5, t7, t9 of tanh(a) = a + a s (t3 + s (t5 + s (t7 + s t9))) on [0, SMALL]."""
    a = np.concatenate([np.geomspace(1e-6, 1e-2, 400), np.linspace(1e-2, SMALL, 4000)])
    s = a * a
    y = (np.tanh(a) - a) / (a * s)          # the relative fit of the correction
    V = np.stack([s ** j for j in range(4)], 1)
    return np.linalg.lstsq(V, y, rcond=None)[0].astype(np.float32)


def evaluate_odd(t, a):
    a = a.astype(np.float32)
    s = (a * a).astype(np.float32)
    q = t[3]
    for j in (2, 1, 0):
        q = (q * s + t[j]).astype(np.float32)
    return ((a * s).astype(np.float32) * q + a).astype(np.float32)


def fit(f):
    tab = np.zeros((5, 32))
    for p in range(32):
        c = np.linspace(-1 / 16 if p else 0.0, 1 / 16, 4001)
        if p == 0:
            c = np.concatenate([np.geomspace(1e-8, 1e-3, 200), c[c > 1e-3]])
        y = f(p / 8 + c)
        w = 1 / np.abs(y)
        t = 8 * c
        first = 1 if p == 0 else 0
        V = np.stack([t ** j for j in range(first, 5)], 1)
        co = np.linalg.lstsq(V * w[:, None], y * w, rcond=None)[0]
        tab[first:, p] = co * 8.0 ** np.arange(first, 5)
    return tab.astype(np.float32)


def ulps(got, want):
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


def main():
    tab, odd = fit(np.tanh), fit_odd()
    a = np.concatenate([np.linspace(0, 3.9374, 2_000_001),
                        np.geomspace(1e-38, 3.9374, 200_001)]).astype(np.float32)
    a = a[a > 0]
    got = np.where(a < SMALL, evaluate_odd(odd, a), evaluate(tab, a))
    err = ulps(got, np.tanh(a.astype(np.float64)))
    print(c_table(tab, "fnn_tanh16_tab"))
    print("t3..t9: " + ", ".join(f"{v:.9e}f" for v in odd))
    for name, m in (("odd", a < SMALL), ("table", a >= SMALL)):
        print(f"/* {name}: max error {err[m].max():.3f} ulp at a = {a[m][np.argmax(err[m])]!r} */")


if __name__ == "__main__":
    main()
