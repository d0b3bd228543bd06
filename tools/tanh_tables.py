"""Fit tanh's 16-lane table (csrc/fnn_math.h: fnn_tanh16_tab, FNN_TANH16_T*).

tanh is odd; with a = |x| the avx512 build evaluates tanh(a) on [SMALL, 7.875) in 32
pieces of width 1/4 centred at k/4, each a degree-5 polynomial in c = a - k/4 (weighted
least squares in float64 on the relative error); the piece scheme of the GELU tables
(fnn_tab16_eval) at twice the width and one degree more, so that inputs of a few units
(saturating tanh layers) rarely leave the table.  Below SMALL = 0.375 (pieces 0 and 1,
where a piece's constant term would cancel against its slope) it takes the odd
polynomial a + a s (t3 + s (t5 + s (t7 + s (t9 + s t11)))), s = a^2, fitted on the
relative error; past the table, 1 - 2e(1 - e), e = exp(-2a).  Row j of the table holds
c^j's coefficients of the 32 pieces.  Prints the C table, the odd polynomial and the
float32-evaluated error in ulps.

    python tools/tanh_tables.py
"""
import numpy as np

WIDTH, DEG, SMALL, NODD = 0.25, 5, 0.375, 5


def fit_odd():
    """t3 .. t11 of tanh(a) = a + a s (t3 + s (...)) on [0, SMALL], relative."""
    a = np.concatenate([np.geomspace(1e-6, 1e-2, 400), np.linspace(1e-2, SMALL, 4000)])
    s = a * a
    y = (np.tanh(a) - a) / (a * s)
    V = np.stack([s ** j for j in range(NODD)], 1)
    return np.linalg.lstsq(V, y, rcond=None)[0].astype(np.float32)


def evaluate_odd(t, a):
    s = (a * a).astype(np.float32)
    q = t[-1]
    for j in range(NODD - 2, -1, -1):
        q = (q * s + t[j]).astype(np.float32)
    return ((a * s).astype(np.float32) * q + a).astype(np.float32)


def fit():
    tab = np.zeros((DEG + 1, 32))
    for p in range(32):
        c = np.linspace(-WIDTH / 2 if p else 0.0, WIDTH / 2, 4001)
        y = np.tanh(p * WIDTH + c)
        w = 1 / np.abs(np.where(y == 0, 1.0, y))
        V = np.stack([(c / WIDTH) ** j for j in range(DEG + 1)], 1)
        co = np.linalg.lstsq(V * w[:, None], y * w, rcond=None)[0]
        tab[:, p] = co / WIDTH ** np.arange(DEG + 1)
    return tab.astype(np.float32)


def evaluate(tab, a):
    """The kernel's evaluation in float32: piece k = round(a / WIDTH), Horner in c."""
    k = np.rint(a / WIDTH).astype(int)
    c = (a - k * np.float32(WIDTH)).astype(np.float32)
    r = tab[DEG, k]
    for j in range(DEG - 1, -1, -1):
        r = (r * c + tab[j, k]).astype(np.float32)
    return r


def main():
    from gelu_tanh_tables import c_table   # the GELU tables' C layout
    tab, odd = fit(), fit_odd()
    cut = 31.5 * WIDTH
    a = np.concatenate([np.linspace(0, cut - 1e-4, 2_000_001),
                        np.geomspace(1e-38, cut - 1e-4, 200_001)]).astype(np.float32)
    a = a[a > 0]
    got = np.where(a < SMALL, evaluate_odd(odd, a), evaluate(tab, a))
    want = np.tanh(a.astype(np.float64))
    err = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    print(c_table(tab, "fnn_tanh16_tab"))
    print("odd: " + ", ".join(f"{v:.9e}f" for v in odd))
    for name, m in (("odd", a < SMALL), ("table", a >= SMALL)):
        print(f"/* {name}: max error {err[m].max():.3f} ulp at a = {a[m][np.argmax(err[m])]!r} */")


if __name__ == "__main__":
    main()
