"""Fit tanh's 16-lane table (csrc/fnn_math.h: fnn_tanh16_tab).

tanh is odd; with a = |x| the avx512 build evaluates it on [0, 7.875) in 32 pieces of
width 1/4 centred at k/4, each a degree-5 polynomial in c = a - k/4 (weighted least
squares in float64 on the relative error); the piece scheme of the GELU tables
(fnn_tab16_eval) at twice the width and one degree more, so that inputs of a few units
(saturating tanh layers) rarely leave the table.  Pieces 0 and 1 (a < SMALL = 0.375)
hold tanh(a) / a instead, and the kernel multiplies their value by a: tanh itself there
would need a constant term that cancels against the slope (piece 1 at a = 1/8 loses two
bits) or, for piece 0, relative accuracy down to subnormal a; the ratio is ~1 and smooth,
and one masked multiply replaces the separate odd polynomial the kernel used to take
below SMALL.  Past the table, 1 - 2e(1 - e), e = exp(-2a).  Row j of the table holds
c^j's coefficients of the 32 pieces.  Prints the C table and the float32-evaluated error
in ulps.

    python tools/tanh_tables.py
"""
import numpy as np

WIDTH, DEG, SMALL = 0.25, 5, 0.375


def fit():
    tab = np.zeros((DEG + 1, 32))
    for p in range(32):
        c = np.linspace(-WIDTH / 2 if p else 1e-9, WIDTH / 2, 4001)
        a = p * WIDTH + c
        y = np.tanh(a) / a if a[0] < SMALL else np.tanh(a)
        V = np.stack([(c / WIDTH) ** j for j in range(DEG + 1)], 1)
        co = np.linalg.lstsq(V / y[:, None], np.ones_like(y), rcond=None)[0]
        tab[:, p] = co / WIDTH ** np.arange(DEG + 1)
    return tab.astype(np.float32)


def evaluate(tab, a):
    """The kernel's evaluation in float32: piece k = round(a / WIDTH), Horner in c, times a
    below SMALL."""
    k = np.rint(a / WIDTH).astype(int)
    c = (a - k * np.float32(WIDTH)).astype(np.float32)
    r = tab[DEG, k]
    for j in range(DEG - 1, -1, -1):
        r = (r * c + tab[j, k]).astype(np.float32)
    return np.where(a < SMALL, (r * a).astype(np.float32), r)


def main():
    from gelu_tanh_tables import c_table   # the GELU tables' C layout
    tab = fit()
    cut = 31.5 * WIDTH
    a = np.concatenate([np.linspace(0, cut - 1e-4, 2_000_001),
                        np.geomspace(1e-38, cut - 1e-4, 200_001)]).astype(np.float32)
    a = a[a > 0]
    got = evaluate(tab, a)
    want = np.tanh(a.astype(np.float64))
    err = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    print(c_table(tab, "fnn_tanh16_tab"))
    for name, m in (("ratio pieces", a < SMALL), ("table", a >= SMALL)):
        print(f"/* {name}: max error {err[m].max():.3f} ulp at a = {a[m][np.argmax(err[m])]!r} */")


if __name__ == "__main__":
    main()
