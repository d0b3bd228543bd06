# Recurrent family: stacked, (bi)directional RNN (tanh / relu), GRU and LSTM with BPTT.
#
# One op runs a whole stack (see fastnn/reference/rnn.py for the interface).  Per layer:
#   forward   one GEMM per direction projects the WHOLE sequence (X W_ih^T) into the gate
#             buffer; then per time step one GEMM adds h_{t-1} W_hh^T and ONE fused
#             pointwise pass adds the biases, applies the gates, the cell update and the nonlinearity,
#             overwriting the pre-activations with the activations backward needs.
#   backward  per time step (reversed) ONE fused pointwise pass turns dh (and dc) into the
#             pre-activation gradients dG_t, then one GEMM gives dh_{t-1} = dG_t W_hh; the
#             weight gradients are whole-sequence GEMMs at the end (dW_ih = dG^T X,
#             dW_hh = dG^T H_prev, dX = dG W_ih), never per step.
# Saved per layer: the activated gates (T, B, D*G*H), the outputs, and for LSTM the cell
# states (GRU: W_hn h + b_hn); tanh(c_t) and the RNN derivative are recomputed.
#
# Threads: the time loop of a layer runs in ONE OpenMP team for the whole sequence.  The
# team is split between the directions (a bidirectional layer runs both at once); inside a
# direction each thread owns a fixed slice of hidden units: it computes the GEMM columns of
# its units' gates (BLAS single-threaded), then their pointwise update, then waits at one
# barrier per step.  Every output element is computed the same way whatever the split, so
# results do not depend on the thread count.  Bias gradients are column sums over fixed
# row chunks in double, added in order.
#
# Layout of this file: the C declarations (fnn_rnn.h holds the cell passes and the packed
# per-step GEMM), the one-layer time loop (forward and backward per direction, each step
# split into its GEMM and its pointwise pass), the block layout, the saved state, then the
# stack shell (one layer at a time) and the six public ops (reference stack_ops).
#
# Pointers: the shell reads every buffer through a 1-D typed memoryview and takes each
# pointer with _span, which (in the FASTNN_DEBUG build, where boundscheck is on) checks
# that the whole run the kernel will touch lies inside the buffer.
cimport cython
cimport numpy as cnp
from cython.parallel cimport parallel, prange
from libc.stdint cimport int64_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free
from libc.string cimport memset

from fnn_blas cimport gemm as _scipy_gemm, real

import numpy as np

from fastnn._threads import single_threaded_blas
from fastnn.reference.rnn import stack_ops

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_gemm.pxi"
include "fnn_colsum.pxi"

OPS = ("rnn", "rnn_backward", "gru", "gru_backward", "lstm", "lstm_backward")

cdef extern from "fnn_rnn.h" nogil:
    void fnn_rnn_barrier()
    int fnn_rnn_team()
    int fnn_rnn_tid()
    void fnn_lstm_fwd_f(float*, const float*, const float*, float*, float*, Py_ssize_t)
    void fnn_lstm_fwd_d(double*, const double*, const double*, double*, double*, Py_ssize_t)
    void fnn_gru_fwd_f(float*, const float*, const float*, const float*, const float*,
                       float*, float*, Py_ssize_t)
    void fnn_gru_fwd_d(double*, const double*, const double*, const double*, const double*,
                       double*, double*, Py_ssize_t)
    void fnn_rnn_fwd_f(const float*, const float*, float*, int, Py_ssize_t)
    void fnn_rnn_fwd_d(const double*, const double*, double*, int, Py_ssize_t)
    void fnn_lstm_bwd_f(const float*, const float*, const float*, const float*, const float*,
                        float*, float*, Py_ssize_t)
    void fnn_lstm_bwd_d(const double*, const double*, const double*, const double*,
                        const double*, double*, double*, Py_ssize_t)
    void fnn_gru_bwd_f(const float*, const float*, const float*, const float*, float*, float*,
                       float*, Py_ssize_t)
    void fnn_gru_bwd_d(const double*, const double*, const double*, const double*, double*,
                       double*, double*, Py_ssize_t)
    void fnn_rnn_bwd_f(const float*, const float*, const float*, float*, int, Py_ssize_t)
    void fnn_rnn_bwd_d(const double*, const double*, const double*, double*, int, Py_ssize_t)
    ctypedef struct fnn_philox_out:
        uint32_t v[4]
    fnn_philox_out fnn_philox4x32(uint64_t block, uint64_t offset, uint64_t seed)
    int FNN_RNN_PACKED
    void fnn_rnn_pgemm(Py_ssize_t, Py_ssize_t, Py_ssize_t, const float*, Py_ssize_t, const float*,
                       float*, Py_ssize_t, int)
    void fnn_rnn_pack(const float*, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, float*)

cdef enum:
    RNN_TANH = 0
    RNN_RELU = 1
    GRU = 2
    LSTM = 3

_MODES = {"rnn_tanh": RNN_TANH, "rnn_relu": RNN_RELU, "gru": GRU, "lstm": LSTM}
_NGATES = {RNN_TANH: 1, RNN_RELU: 1, GRU: 3, LSTM: 4}


# ------------------------------------------------------------------ pointwise rows
# fnn_rnn.h's cell passes; the fused type picks the float (_f) or double (_d) one at
# compile time.
cdef inline void _lstm_fwd_row(real* ga, const real* bi, const real* cp, real* c_out,
                               real* h_out, Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_lstm_fwd_f(ga, bi, cp, c_out, h_out, n)
    else:
        fnn_lstm_fwd_d(ga, bi, cp, c_out, h_out, n)


cdef inline void _gru_fwd_row(real* ga, const real* bi, const real* gh, const real* b_hn,
                              const real* hp, real* hn_out, real* h_out,
                              Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_gru_fwd_f(ga, bi, gh, b_hn, hp, hn_out, h_out, n)
    else:
        fnn_gru_fwd_d(ga, bi, gh, b_hn, hp, hn_out, h_out, n)


cdef inline void _rnn_fwd_row(const real* g, const real* bi, real* h_out, bint relu,
                              Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_rnn_fwd_f(g, bi, h_out, relu, n)
    else:
        fnn_rnn_fwd_d(g, bi, h_out, relu, n)


cdef inline void _lstm_bwd_row(const real* a, const real* c, const real* cp, const real* dy,
                               const real* dh, real* dc, real* dg, Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_lstm_bwd_f(a, c, cp, dy, dh, dc, dg, n)
    else:
        fnn_lstm_bwd_d(a, c, cp, dy, dh, dc, dg, n)


cdef inline void _gru_bwd_row(const real* a, const real* hn, const real* hp, const real* dy,
                              real* dh, real* dg, real* dgh, Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_gru_bwd_f(a, hn, hp, dy, dh, dg, dgh, n)
    else:
        fnn_gru_bwd_d(a, hn, hp, dy, dh, dg, dgh, n)


cdef inline void _rnn_bwd_row(const real* h, const real* dy, const real* dh, real* dg, bint relu,
                              Py_ssize_t n) noexcept nogil:
    if real is float:
        fnn_rnn_bwd_f(h, dy, dh, dg, relu, n)
    else:
        fnn_rnn_bwd_d(h, dy, dh, dg, relu, n)


# ------------------------------------------------------------------ one layer's time loop
cdef struct Layer:
    int mode
    Py_ssize_t T, B, H, D, G
    Py_ssize_t UB, NBLK  # unit blocks: fixed by (G, H) only, never by the thread count
    bint hzero          # no initial state given: h0/c0 are zeros (skip the first GEMM)
    bint need_dh0       # backward: compute dh0 (the last GEMM)
    void* xp            # (T, B, D*G*H) forward: gate pre-activations (input side)
    void* act           # (T, B, D*G*H) the activated gates (LSTM, GRU)
    void* out           # (T, B, D*H)
    void* aux           # (T, B, D*H) LSTM c_t, GRU W_hn h_{t-1} + b_hn; else NULL
    void* h0            # (D, B, H)
    void* c0            # (D, B, H) LSTM
    void* whh[2]        # per direction (G*H, H), rows in the kernel's gate order
    float* whp[2]       # float32: room for W_hh packed per unit block (each thread packs
                        # its own blocks before its time loop), or NULL (BLAS)
    void* bhn[2]        # GRU per direction b_hn (H,)
    void* bias[2]       # per direction (G*H,) kernel order: b_ih + b_hh (GRU n gate: b_ih only),
                        # added by the forward pointwise pass (zeros without bias)
    void* gh            # GRU forward scratch (D, B, G*H): h_{t-1} W_hh^T
    void* dout          # (T, B, D*H) gradient of out, or a zero row (H,) with lddy = 0
    Py_ssize_t lddy
    void* dg            # (T, B, D*G*H) gate gradients, input side
    void* dgh           # GRU: hidden side (n part times r); else == dg
    void* dh            # (D, B, H) in: d_h_n, out: d_h0
    void* dc            # (D, B, H) LSTM: in d_c_n, out d_c0
    int nomem           # set (fnn_flag_set) when a step's GEMM could not get its work
                        # buffer; the caller raises MemoryError after the time loop


cdef inline Py_ssize_t _units(const Layer* L, Py_ssize_t u) noexcept nogil:
    """Hidden units in block u (the last block may be short)."""
    return L.H - u * L.UB if L.H - u * L.UB < L.UB else L.UB


cdef inline Py_ssize_t _panels(Py_ssize_t n) noexcept nogil:
    """Columns of n rounded up to whole 16-wide panels."""
    return (n + 15) // 16 * 16


cdef inline Py_ssize_t _pack_stride(const Layer* L, bint backward) noexcept nogil:
    """Floats per unit block of a packed W_hh: forward block u: columns = its G*nu gate
    rows, K = H; backward block u: columns = its nu units, K = G*H (the rows)."""
    return _panels(L.UB) * L.G * L.H if backward else _panels(L.G * L.UB) * L.H


cdef void _pack_blocks(Layer* L, int d, Py_ssize_t u0, Py_ssize_t u1, bint backward) noexcept nogil:
    """Pack this thread's unit blocks of W_hh (kernel row order) for fnn_rnn_pgemm."""
    cdef const float* w = <const float*>L.whh[d]
    cdef float* P = L.whp[d]
    cdef Py_ssize_t u, j0, nu, H = L.H, G = L.G, per = _pack_stride(L, backward)
    for u in range(u0, u1):
        j0 = u * L.UB
        nu = _units(L, u)
        if backward:
            fnn_rnn_pack(w + j0, 1, H, nu, G * H, P + u * per)
        else:
            fnn_rnn_pack(w + G * j0 * H, H, 1, G * nu, H, P + u * per)


cdef inline void _step_state(const Layer* L, int d, Py_ssize_t t, bint first, const real** hp,
                             const real** cp, Py_ssize_t* ldp) noexcept nogil:
    """The state step t reads: h_{t-1} (and LSTM c_{t-1}) -- h0 / c0 for the first step of
    direction d, else the neighbouring output row (d = 0 runs forward in time, d = 1 back)."""
    cdef Py_ssize_t DH = L.D * L.H, tp
    if first:
        hp[0] = <const real*>L.h0 + d * L.B * L.H
        cp[0] = <const real*>L.c0 + d * L.B * L.H if L.mode == LSTM else NULL
        ldp[0] = L.H
    else:
        tp = t - 1 if d == 0 else t + 1
        hp[0] = <const real*>L.out + tp * L.B * DH + d * L.H
        cp[0] = <const real*>L.aux + tp * L.B * DH + d * L.H if L.mode == LSTM else NULL
        ldp[0] = DH


cdef void _fwd_gemm(const Layer* L, int d, Py_ssize_t u0, Py_ssize_t u1, Py_ssize_t b0,
                    Py_ssize_t b1, const real* hp, Py_ssize_t ldp, real* gt) noexcept nogil:
    """Hidden projection h_{t-1} W_hh^T of this thread's unit blocks and batch rows
    [b0, b1), one GEMM per block: added onto the gate pre-activations gt (GRU: into its
    scratch gh, kept apart because r multiplies the n part)."""
    cdef Py_ssize_t G = L.G, H = L.H, UB = L.UB, u, c0, nu, ldc, M = b1 - b0
    cdef const real* whh = <const real*>L.whh[d]
    cdef real* C
    cdef bint acc = L.mode != GRU
    if M <= 0:
        return
    if L.mode == GRU:
        C = <real*>L.gh + d * L.B * G * H
        ldc = G * H
    else:
        C = gt
        ldc = L.D * G * H
    C += b0 * ldc
    hp += b0 * ldp
    for u in range(u0, u1):
        c0 = u * G * UB
        nu = _units(L, u)
        if real is float:
            if L.whp[d] != NULL:
                fnn_rnn_pgemm(M, G * nu, H, hp, ldp, L.whp[d] + u * _pack_stride(L, False),
                              C + c0, ldc, acc)
                continue
        if gemm(False, True, <int>M, <int>(G * nu), <int>H, <real>1, hp, <int>ldp,
                whh + c0 * H, <int>H, <real>(1 if acc else 0), C + c0, <int>ldc):
            fnn_flag_set(&(<Layer*>L).nomem)


cdef void _fwd_cells(const Layer* L, int d, Py_ssize_t u0, Py_ssize_t u1, Py_ssize_t b0,
                     Py_ssize_t b1, Py_ssize_t t, const real* hp, const real* cp,
                     Py_ssize_t ldp) noexcept nogil:
    """The fused pointwise pass of step t over this thread's unit blocks and batch rows
    [b0, b1), row by row.  The gated cells write their activated gates over the
    pre-activations (L.act is L.xp: _layer_forward)."""
    cdef Py_ssize_t G = L.G, H = L.H, UB = L.UB, GH = L.G * L.H
    cdef Py_ssize_t DGH = L.D * GH, DH = L.D * L.H, b, u, c0, j0, nu
    cdef real* gt = <real*>L.xp + t * L.B * DGH + d * GH
    cdef const real* bias = <const real*>L.bias[d]
    cdef const real* gh = <const real*>L.gh + d * L.B * GH
    cdef const real* bhn = <const real*>L.bhn[d]
    cdef real* orow
    cdef real* arow
    cdef bint relu = L.mode == RNN_RELU
    for b in range(b0, b1):
        orow = <real*>L.out + t * L.B * DH + b * DH + d * H
        arow = <real*>L.aux + t * L.B * DH + b * DH + d * H if L.aux != NULL else NULL
        for u in range(u0, u1):
            c0 = u * G * UB
            j0 = u * UB
            nu = _units(L, u)
            if L.mode == LSTM:
                _lstm_fwd_row(gt + b * DGH + c0, bias + c0, cp + b * ldp + j0, arow + j0,
                              orow + j0, nu)
            elif L.mode == GRU:
                _gru_fwd_row(gt + b * DGH + c0, bias + c0, gh + b * GH + c0, bhn + j0,
                             hp + b * ldp + j0, arow + j0, orow + j0, nu)
            else:
                _rnn_fwd_row(gt + b * DGH + c0, bias + c0, orow + j0, relu, nu)


cdef void _fwd_dir(Layer* L, int d, Py_ssize_t u0, Py_ssize_t u1, Py_ssize_t b0,
                   Py_ssize_t b1, bint sync, real* tag) noexcept nogil:
    """Direction d's forward time loop over unit blocks [u0, u1) and batch rows [b0, b1):
    per step the hidden GEMM, the pointwise pass, then (sync: the direction's units are
    shared by several threads) the team's barrier (the next step reads all of h_t)."""
    cdef Py_ssize_t s, t, ldp
    cdef const real* hp
    cdef const real* cp
    cdef real* gt
    for s in range(L.T):
        t = s if d == 0 else L.T - 1 - s
        _step_state[real](L, d, t, s == 0, &hp, &cp, &ldp)
        gt = <real*>L.xp + t * L.B * L.D * L.G * L.H + d * L.G * L.H
        # a zero initial state adds nothing (GRU still needs its gh = 0 scratch)
        if not (s == 0 and L.hzero and L.mode != GRU):
            _fwd_gemm(L, d, u0, u1, b0, b1, hp, ldp, gt)
        _fwd_cells(L, d, u0, u1, b0, b1, t, hp, cp, ldp)
        if sync:
            fnn_rnn_barrier()


cdef void _bwd_cells(const Layer* L, int d, Py_ssize_t u0, Py_ssize_t u1, Py_ssize_t b0,
                     Py_ssize_t b1, Py_ssize_t t, const real* hp, const real* cp,
                     Py_ssize_t ldp) noexcept nogil:
    """The fused pointwise backward pass of step t: dh (and dc) into the pre-activation
    gradients dG_t of this thread's unit blocks and batch rows [b0, b1)."""
    cdef Py_ssize_t G = L.G, H = L.H, UB = L.UB, GH = L.G * L.H
    cdef Py_ssize_t DGH = L.D * GH, DH = L.D * L.H, lddy = L.lddy, b, u, c0, j0, nu
    cdef const real* at = <const real*>L.act + t * L.B * DGH + d * GH
    cdef real* dgt = <real*>L.dg + t * L.B * DGH + d * GH
    cdef real* dght = <real*>L.dgh + t * L.B * DGH + d * GH
    cdef const real* dyt = <const real*>L.dout + (t * L.B * DH + d * H if lddy else 0)
    cdef real* dh = <real*>L.dh + d * L.B * H
    cdef real* dc = <real*>L.dc + d * L.B * H if L.mode == LSTM else NULL
    cdef const real* orow
    cdef const real* arow
    cdef bint relu = L.mode == RNN_RELU
    for b in range(b0, b1):
        orow = <const real*>L.out + t * L.B * DH + b * DH + d * H
        arow = <const real*>L.aux + t * L.B * DH + b * DH + d * H if L.aux != NULL else NULL
        for u in range(u0, u1):
            c0 = u * G * UB
            j0 = u * UB
            nu = _units(L, u)
            if L.mode == LSTM:
                _lstm_bwd_row(at + b * DGH + c0, arow + j0, cp + b * ldp + j0,
                              dyt + b * lddy + j0, dh + b * H + j0, dc + b * H + j0,
                              dgt + b * DGH + c0, nu)
            elif L.mode == GRU:
                _gru_bwd_row(at + b * DGH + c0, arow + j0, hp + b * ldp + j0,
                             dyt + b * lddy + j0, dh + b * H + j0, dgt + b * DGH + c0,
                             dght + b * DGH + c0, nu)
            else:
                _rnn_bwd_row(orow + j0, dyt + b * lddy + j0, dh + b * H + j0,
                             dgt + b * DGH + c0, relu, nu)


cdef void _bwd_gemm(const Layer* L, int d, Py_ssize_t u0, Py_ssize_t u1, Py_ssize_t b0,
                    Py_ssize_t b1, const real* dght) noexcept nogil:
    """dh_{t-1}[b0:b1, block] = dG_t[b0:b1] W_hh[:, block] for this thread's blocks (GRU:
    added onto the direct part the pointwise pass left in dh)."""
    cdef Py_ssize_t GH = L.G * L.H, H = L.H, u, j0, nu, M = b1 - b0
    cdef Py_ssize_t ldg = L.D * GH
    cdef const real* whh = <const real*>L.whh[d]
    cdef real* dh = <real*>L.dh + d * L.B * H + b0 * H
    cdef bint acc = L.mode == GRU
    if M <= 0:
        return
    dght += b0 * ldg
    for u in range(u0, u1):
        j0 = u * L.UB
        nu = _units(L, u)
        if real is float:
            if L.whp[d] != NULL:
                fnn_rnn_pgemm(M, nu, GH, dght, ldg, L.whp[d] + u * _pack_stride(L, True),
                              dh + j0, H, acc)
                continue
        if gemm(False, False, <int>M, <int>nu, <int>GH, <real>1, dght, <int>ldg, whh + j0,
                <int>H, <real>(1 if acc else 0), dh + j0, <int>H):
            fnn_flag_set(&(<Layer*>L).nomem)


cdef void _bwd_dir(Layer* L, int d, Py_ssize_t u0, Py_ssize_t u1, Py_ssize_t b0,
                   Py_ssize_t b1, bint sync, real* tag) noexcept nogil:
    """Direction d's backward time loop (reversed) over unit blocks [u0, u1) and batch rows
    [b0, b1): per step the pointwise pass, the team's barrier when sync (the GEMM reads
    all of dG_t), then the recurrent GEMM."""
    cdef Py_ssize_t s, t, ldp, DGH = L.D * L.G * L.H
    cdef const real* hp
    cdef const real* cp
    cdef bint first
    for s in range(L.T):
        t = L.T - 1 - s if d == 0 else s
        first = s == L.T - 1          # the step whose predecessor is h0
        _step_state[real](L, d, t, first, &hp, &cp, &ldp)
        _bwd_cells[real](L, d, u0, u1, b0, b1, t, hp, cp, ldp)
        if sync:
            fnn_rnn_barrier()
        if not first or L.need_dh0:
            _bwd_gemm(L, d, u0, u1, b0, b1,
                      <const real*>L.dgh + t * L.B * DGH + d * L.G * L.H)


cdef enum:
    ROW_SPLIT_MIN = 8     # batch rows per thread for the barrier-free row split


cdef inline bint _row_split(Py_ssize_t B, Py_ssize_t ntd, bint packed) noexcept nogil:
    """Whether ntd threads sharing a direction split its batch rows (each thread all the
    units of its rows: a thread reads only the h_{t-1} rows it wrote, so the time loop
    runs without a barrier per step) rather than its unit blocks (a barrier per step).
    Rows: at least ROW_SPLIT_MIN per thread, as a GEMM tile has rows; and only on the
    packed kernel, whose every output is the same FMA chain whatever rows a call gets
    (a BLAS call's bits may depend on its M: the results would depend on the thread
    count)."""
    return packed and ntd > 1 and B >= ROW_SPLIT_MIN * ntd


cdef void _run_team(Layer* L, bint backward, real* tag) noexcept nogil:
    """Called by every thread of the team: pick a direction and a range of unit blocks
    (or, _row_split, of batch rows), pack that range of W_hh, run the time loop."""
    cdef int n = fnn_rnn_team(), tid = fnn_rnn_tid()
    cdef int D = <int>L.D, ntd, d, r
    cdef bint sync, rows
    cdef Py_ssize_t NB = L.NBLK, B = L.B, u0, u1, b0, b1, p0, p1
    if n < D:  # one thread: the directions one after the other
        for d in range(D):
            if real is float:
                if L.whp[d] != NULL:
                    _pack_blocks(L, d, 0, NB, backward)
            if backward:
                _bwd_dir(L, d, 0, NB, 0, B, False, tag)
            else:
                _fwd_dir(L, d, 0, NB, 0, B, False, tag)
        return
    ntd = n // D
    rows = _row_split(B, ntd, L.whp[0] != NULL)
    # a direction of its own per thread (two threads, bidirectional), or a batch-row share
    # of one: a thread reads only what it wrote, so the steps run without a barrier -- one
    # thread held up (a busy machine) no longer holds up the other at every step
    sync = n != D and not rows
    if tid >= D * ntd:  # a spare thread: no work, but it keeps the barrier count
        d = 0
        r = 0
        u0 = u1 = p0 = p1 = b0 = b1 = 0
    else:
        d = tid // ntd
        r = tid % ntd
        p0 = r * NB // ntd      # the unit blocks this thread packs
        p1 = (r + 1) * NB // ntd
        if rows:
            u0 = 0
            u1 = NB
            b0 = r * B // ntd
            b1 = (r + 1) * B // ntd
        else:
            u0 = p0
            u1 = p1
            b0 = 0
            b1 = B
    if real is float:
        if L.whp[d] != NULL and p1 > p0:
            _pack_blocks(L, d, p0, p1, backward)
    if rows and n != D:
        fnn_rnn_barrier()       # every block of W_hh packed before any thread reads it
    if backward:
        _bwd_dir(L, d, u0, u1, b0, b1, sync, tag)
    else:
        _fwd_dir(L, d, u0, u1, b0, b1, sync, tag)


cdef void _run_layer(Layer* L, bint backward, int team, real* tag) noexcept nogil:
    if team <= 1:
        _run_team(L, backward, tag)
    else:
        with parallel(num_threads=team):
            _run_team(L, backward, tag)


cdef int _team_size(Py_ssize_t D, Py_ssize_t B, Py_ssize_t G, Py_ssize_t H, Py_ssize_t NB,
                    bint packed):
    """Threads for a layer's time loop: only when a step has enough GEMM work to share;
    at most one per unit block unless the batch rows are split (_row_split)."""
    cdef int nt = _threads_for(D * B * G * H * H, 1 << 16)
    cdef int per = <int>(nt // D)
    if per > NB and not _row_split(B, per, packed):
        per = <int>NB
    if per < 1:
        return 1
    return <int>(D * per)


# ------------------------------------------------------------------ whole-sequence helpers
cdef void _dropout(const real* x, real* y, Py_ssize_t n, uint64_t base, uint64_t seed,
                   uint64_t offset, double p) noexcept nogil:
    """y = x * m, m = 1/(1-p) where the Philox uniform of element base + i is >= p, else 0.
    ``base`` is a multiple of 4, so one Philox block gives four consecutive elements."""
    cdef Py_ssize_t nblk = (n + 3) // 4, k, i, lane
    cdef real scale = <real>(1.0 / (1.0 - p))
    cdef fnn_philox_out o
    cdef double u
    cdef int nt = _threads_for(n, 1 << 14)
    for k in prange(nblk, nogil=True, schedule="static", num_threads=nt):
        o = fnn_philox4x32(base // 4 + k, offset, seed)
        for lane in range(4):
            i = 4 * k + lane
            if i < n:
                u = (o.v[lane] >> 8) * (1.0 / 16777216.0)
                y[i] = x[i] * (scale if u >= p else <real>0)


cdef enum:
    GEMM_ROWS = 512   # row chunk of the whole-sequence GEMMs (fixed: results never
                      # depend on the thread count, as each chunk is one BLAS call)


cdef int _gemm_rows(bint ta, bint tb, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, const real* A,
                    Py_ssize_t lda, const real* Bm, Py_ssize_t ldb, real beta, real* C,
                    Py_ssize_t ldc) noexcept nogil:
    """Row-major C = op(A) op(B) + beta C as fixed chunks of GEMM_ROWS rows of C, one
    single-threaded BLAS call per chunk, chunks spread over the OpenMP threads.  -> 0, or
    -1 when a chunk's GEMM could not get its work buffer (the caller raises MemoryError)."""
    cdef Py_ssize_t nch = (M + GEMM_ROWS - 1) // GEMM_ROWS, c, r0, m
    cdef int nt = _threads_for(M * N * K // 64, 1 << 14), failed = 0
    if nch <= 1 or nt <= 1:
        for c in range(nch):
            r0 = c * GEMM_ROWS
            m = M - r0 if M - r0 < GEMM_ROWS else GEMM_ROWS
            if gemm(ta, tb, <int>m, <int>N, <int>K, <real>1, A + (r0 if ta else r0 * lda),
                    <int>lda, Bm, <int>ldb, beta, C + r0 * ldc, <int>ldc):
                return -1
        return 0
    for c in prange(nch, nogil=True, schedule="static", num_threads=nt):
        r0 = c * GEMM_ROWS
        m = M - r0 if M - r0 < GEMM_ROWS else GEMM_ROWS
        if gemm(ta, tb, <int>m, <int>N, <int>K, <real>1, A + (r0 if ta else r0 * lda),
                <int>lda, Bm, <int>ldb, beta, C + r0 * ldc, <int>ldc):
            fnn_flag_set(&failed)
    return -1 if failed else 0


cdef inline real* _span(real[::1] v, Py_ssize_t off, Py_ssize_t n) except? NULL:
    """&v[off] for a kernel that touches v[off : off + n] (NULL when n == 0).  Both ends
    are indexed, so the FASTNN_DEBUG build's bounds checks cover the whole run."""
    if n <= 0:
        return NULL
    cdef real* last = &v[off + n - 1]
    return &v[off]


cdef inline const real* _cspan(const real[::1] v, Py_ssize_t off, Py_ssize_t n) except? NULL:
    """_span for a read-only buffer."""
    if n <= 0:
        return NULL
    cdef const real* last = &v[off + n - 1]
    return &v[off]


cdef inline _flat(a):
    """A contiguous array's elements as one flat view (None stays None)."""
    return None if a is None else a.reshape(-1)


# ------------------------------------------------------------------ block layout
def _block_size(Py_ssize_t G, Py_ssize_t H):
    """Hidden units per block of the time loop: about H/2 (two threads share a direction;
    each block is one GEMM per step, so fewer, wider blocks are faster) but at least 64
    gate columns per GEMM; a multiple of 8."""
    cdef Py_ssize_t ub = ((H + 1) // 2 + 7) // 8 * 8
    cdef Py_ssize_t lo = ((64 + G - 1) // G + 7) // 8 * 8
    ub = ub if ub > lo else lo
    return ub if ub < H else H


def _perm(Py_ssize_t G, Py_ssize_t H, Py_ssize_t UB):
    """perm[p] = torch's gate row of kernel row p.  The kernel keeps a block's G gates
    together: block u (units u*UB ...) occupies rows u*G*UB ..., gate k of its unit l at
    u*G*UB + k*n_u + l.  Then each block's hidden projection is one GEMM and its
    pointwise update reads one contiguous run."""
    perm = np.empty(G * H, np.intp)
    cdef Py_ssize_t u, k, nu, j0
    for u in range((H + UB - 1) // UB):
        j0 = u * UB
        nu = H - j0 if H - j0 < UB else UB
        for k in range(G):
            perm[u * G * UB + k * nu: u * G * UB + (k + 1) * nu] = np.arange(k * H + j0, k * H + j0 + nu)
    return perm


cdef bint _packed_on = FNN_RNN_PACKED


def _use_packed(bint on):
    """Route the float32 per-step GEMMs through the pre-packed kernel (default where the
    build has AVX2+FMA) or through BLAS (tests compare the two).  Returns the old setting."""
    global _packed_on
    old = _packed_on
    _packed_on = on and FNN_RNN_PACKED
    return old


def _time_loop_split(str mode, Py_ssize_t B, Py_ssize_t H, bint bidirectional, dtype):
    """How the time loop of a layer of this shape would share its work at the current
    thread count: (threads, "rows" | "units" | "directions" | "one"), for tests."""
    cdef Py_ssize_t G = {"LSTM": 4, "GRU": 3}.get(mode, 1), D = 2 if bidirectional else 1
    cdef Py_ssize_t UB = _block_size(G, H), NB = (H + UB - 1) // UB
    cdef bint packed = _packed_on and np.dtype(dtype) == np.float32
    cdef int team = _team_size(D, B, G, H, NB, packed)
    if team < D or team == 1:
        return team, "one"
    if team == D:
        return team, "directions"
    return team, "rows" if _row_split(B, team // D, packed) else "units"


# ------------------------------------------------------------------ saved state
cdef class _Stack:
    """The shape of one call's stack, fixed by its arguments; and, once the forward has
    run, what the backward needs (``layers``: one _LayerState per layer)."""
    cdef readonly int mode, L, D, G
    cdef readonly Py_ssize_t H, T, B, UB, NB, nw
    cdef readonly bint has_hx, batch_first, use_drop
    cdef readonly double p
    cdef readonly uint64_t seed, offset
    cdef readonly object dtype
    cdef readonly object perm      # kernel row p -> torch gate row perm[p]
    cdef readonly object h0, c0    # (L*D, B, H) initial states (zeros when not given)
    cdef readonly list layers

    cdef Py_ssize_t n_out(self):
        """Elements of one layer's output (T, B, D*H): the dropout boundary size."""
        return self.T * self.B * self.D * self.H

    cdef Py_ssize_t drop_base(self, int k):
        """Philox numbering of boundary k (reference.rnn): k * N rounded up to 4."""
        return k * ((self.n_out() + 3) // 4 * 4)


cdef class _LayerState:
    """One layer's forward results kept for backward: its input (T, B, I), the activated
    gates (T, B, D*G*H; LSTM, GRU), the output (T, B, D*H), aux (LSTM c_t, GRU
    W_hn h_{t-1} + b_hn) and per direction W_ih / W_hh in kernel row order."""
    cdef readonly object inp, act, out, aux
    cdef readonly tuple w_ih, w_hh
    cdef readonly Py_ssize_t n_in  # input features (inp is kept flat)


# ------------------------------------------------------------------ forward
cdef inline bint _packs(_Stack s):
    """Whether the stack's per-step GEMMs run on the packed kernel (float32, packed on)."""
    return _packed_on and s.dtype == np.float32


cdef _Stack _stack(int mode, x, h0, c0, tuple weights, int L, bint bidirectional,
                   bint batch_first, double p, bint train, uint64_t seed, uint64_t offset):
    cdef _Stack s = _Stack.__new__(_Stack)
    s.mode = mode
    s.L = L
    s.D = 2 if bidirectional else 1
    s.G = _NGATES[mode]
    s.nw = len(weights) // (L * s.D)
    s.H = weights[1].shape[1]
    s.T = x.shape[1] if batch_first else x.shape[0]
    s.B = x.shape[0] if batch_first else x.shape[1]
    s.UB = _block_size(s.G, s.H)
    s.NB = (s.H + s.UB - 1) // s.UB
    s.has_hx = h0 is not None
    s.batch_first = batch_first
    s.use_drop = train and p > 0 and L > 1
    s.p = p
    s.seed = seed
    s.offset = offset
    s.dtype = x.dtype
    s.perm = _perm(s.G, s.H, s.UB)
    shape = (L * s.D, s.B, s.H)
    s.h0 = np.zeros(shape, s.dtype) if h0 is None else np.ascontiguousarray(h0)
    if mode == LSTM:
        s.c0 = np.zeros(shape, s.dtype) if c0 is None else np.ascontiguousarray(c0)
    s.layers = []
    return s


cdef void _layer_shape(_Stack s, Layer* lay) noexcept:
    """The fields of a Layer fixed by the stack's shape; every buffer pointer NULL."""
    memset(lay, 0, sizeof(Layer))
    lay.mode = s.mode
    lay.T = s.T
    lay.B = s.B
    lay.H = s.H
    lay.D = s.D
    lay.G = s.G
    lay.UB = s.UB
    lay.NBLK = s.NB
    lay.hzero = not s.has_hx


cdef tuple _kernel_weights(_Stack s, tuple weights, int k, int d):
    """Direction d of layer k in the kernel's row order: (W_ih, W_hh, bias, b_hn); bias =
    b_ih + b_hh (GRU n gate: b_ih only, b_hn is applied inside r * (...)), zeros without
    biases."""
    cdef Py_ssize_t base = (k * s.D + d) * s.nw, H = s.H
    perm = s.perm
    zeros_h = np.zeros(H, s.dtype)
    if s.nw == 4:
        if s.mode == GRU:
            bias = weights[base + 2].copy()
            bias[:2 * H] += weights[base + 3][:2 * H]
            bhn = np.ascontiguousarray(weights[base + 3][2 * H:])
        else:
            bias = weights[base + 2] + weights[base + 3]
            bhn = zeros_h
    else:
        bias = np.zeros(s.G * H, s.dtype)
        bhn = zeros_h
    return (weights[base][perm], weights[base + 1][perm], np.ascontiguousarray(bias[perm]), bhn)


cdef _LayerState _layer_forward(_Stack s, int k, const real[::1] inp, Py_ssize_t I,
                                tuple weights, int team):
    """Layer k over the whole sequence, both directions: one input-projection GEMM per
    direction, then the time loop."""
    cdef Py_ssize_t T = s.T, B = s.B, H = s.H, D = s.D, GH = s.G * s.H
    cdef Py_ssize_t DGH = D * GH, TB = T * B, d
    cdef Layer lay
    cdef _LayerState st = _LayerState.__new__(_LayerState)
    dt = s.dtype
    gated = s.mode in (GRU, LSTM)
    xp = np.empty((T, B, DGH), dt)
    st.out = np.empty((T, B, D * H), dt)
    st.aux = np.empty((T, B, D * H), dt) if gated else None
    # the gated cells write their activated gates (kept for backward) over the input
    # projections: one T x B x G*H buffer, not two (fnn_rnn_cell.h)
    st.act = xp if gated else None
    gh = np.empty((D, B, GH), dt) if s.mode == GRU else None
    cdef real[::1] xpv = xp.reshape(-1)
    cdef real[::1] outv = st.out.reshape(-1)
    cdef real[::1] auxv = _flat(st.aux)
    cdef real[::1] ghv = _flat(gh)
    cdef const real[::1] h0v = s.h0.reshape(-1)
    cdef const real[::1] c0v = _flat(s.c0)
    cdef const real[::1] wi
    cdef const real[::1] wh
    cdef const real[::1] bias
    cdef const real[::1] bhn
    cdef real[::1] packed
    cdef const real* pin
    cdef const real* pwi
    cdef real* pxp
    cdef Py_ssize_t nstate = D * B * H, state0 = k * nstate
    _layer_shape(s, &lay)
    lay.xp = _span(xpv, 0, TB * DGH)
    lay.act = lay.xp if gated else NULL      # the same buffer (st.act is xp)
    lay.out = _span(outv, 0, TB * D * H)
    lay.aux = _span(auxv, 0, TB * D * H) if gated else NULL
    lay.gh = _span(ghv, 0, D * B * GH) if s.mode == GRU else NULL
    lay.h0 = <void*>_cspan(h0v, state0, nstate)
    lay.c0 = <void*>_cspan(c0v, state0, nstate) if s.mode == LSTM else NULL
    w_ih = []
    w_hh = []
    keep = []
    for d in range(D):
        kw = _kernel_weights(s, weights, k, d)
        keep.append(kw)         # the pointers below stay valid until the loop has run
        w_ih.append(kw[0])
        w_hh.append(kw[1])
        wi = kw[0].reshape(-1)
        wh = kw[1].reshape(-1)
        bias = kw[2]
        bhn = kw[3]
        # the input projection of every step at once: xp[:, :, d] = inp W_ih^T
        pin = _cspan(inp, 0, TB * I)
        pwi = _cspan(wi, 0, GH * I)
        pxp = _span(xpv, d * GH, (TB - 1) * DGH + GH)
        with nogil:
            if _gemm_rows(False, True, TB, GH, I, pin, I, pwi, I, <real>0, pxp, DGH):
                _raise_gemm_nomem()
        lay.whh[d] = <void*>_cspan(wh, 0, GH * H)
        lay.bias[d] = <void*>_cspan(bias, 0, GH)
        lay.bhn[d] = <void*>_cspan(bhn, 0, H)
        if real is float:
            if _packed_on:
                pk = np.empty(s.NB * _panels(s.G * s.UB) * H, np.float32)
                keep.append(pk)
                packed = pk
                lay.whp[d] = _span(packed, 0, s.NB * _panels(s.G * s.UB) * H)
    with nogil:
        _run_layer[real](&lay, False, team, NULL)
    if lay.nomem:
        _raise_gemm_nomem()
    st.inp = inp.base if inp.base is not None else np.asarray(inp)
    st.n_in = I
    st.w_ih = tuple(w_ih)
    st.w_hh = tuple(w_hh)
    return st


cdef _final_states(_Stack s, _LayerState st, int k, h_n, c_n):
    """h_n (c_n) of layer k: direction 0's last step, direction 1's first."""
    cdef Py_ssize_t D = s.D, H = s.H, T = s.T
    h_n[k * D] = st.out[T - 1, :, :H]
    if D == 2:
        h_n[k * D + 1] = st.out[0, :, H:]
    if s.mode == LSTM:
        c_n[k * D] = st.aux[T - 1, :, :H]
        if D == 2:
            c_n[k * D + 1] = st.aux[0, :, H:]


cdef _col_sums(const real[::1] a, Py_ssize_t rows, Py_ssize_t n, real[::1] out, int nt):
    """out = the column sums of the (rows, n) ``a`` (fnn_colsum.pxi: fixed row chunks)."""
    cdef const real* pa = _cspan(a, 0, rows * n)
    cdef real* po = _span(out, 0, n)
    with nogil:
        _col_sum(pa, rows, n, po, nt, 128)


cdef _dropped(_Stack s, int k, const real[::1] a):
    """The layer boundary k's dropout applied to the flat ``a`` (a new array)."""
    cdef Py_ssize_t n = s.n_out()
    out = np.empty(n, s.dtype)
    cdef real[::1] ov = out
    cdef uint64_t base = s.drop_base(k)
    cdef const real* src = _cspan(a, 0, n)
    cdef real* dst = _span(ov, 0, n)
    with nogil:
        _dropout(src, dst, n, base, s.seed, s.offset, s.p)
    return out


cdef tuple _forward_stack(_Stack s, const real[::1] x, Py_ssize_t I, tuple weights):
    """Every layer in turn (dropout between them) -> (y, h_n, c_n, s); x is the flat
    time-major (T, B, I) input."""
    cdef Py_ssize_t T = s.T, B = s.B
    cdef int k
    cdef int team = _team_size(s.D, B, s.G, s.H, s.NB, _packs(s))
    cdef const real[::1] inp = x
    cdef _LayerState st
    shape = (s.L * s.D, B, s.H)
    h_n = np.empty(shape, s.dtype)
    c_n = np.empty(shape, s.dtype) if s.mode == LSTM else None
    for k in range(s.L):
        if k > 0:
            I = s.D * s.H
        st = _layer_forward(s, k, inp, I, weights, team)
        s.layers.append(st)
        _final_states(s, st, k, h_n, c_n)
        if k < s.L - 1:
            inp = _dropped[real](s, k, st.out.reshape(-1)) if s.use_drop else st.out.reshape(-1)
    y = st.out
    if s.batch_first:
        y = np.ascontiguousarray(y.transpose(1, 0, 2))
    return y, h_n, c_n, s


def _forward(str mode, x, h0, c0, weights, int num_layers, bint bidirectional,
             bint batch_first, double dropout, bint train, uint64_t seed, uint64_t offset):
    """The whole-stack forward (see stack_ops): -> (y, h_n, c_n or None, saved)."""
    cdef _Stack s = _stack(_MODES[mode], x, h0, c0, tuple(weights), num_layers, bidirectional,
                           batch_first, dropout, train, seed, offset)
    xs = np.ascontiguousarray(x.transpose(1, 0, 2) if batch_first else x).reshape(-1)
    with single_threaded_blas():   # every GEMM is one single-threaded call on fixed work
        if s.dtype == np.float32:
            return _forward_stack[float](s, xs, x.shape[2], tuple(weights))
        return _forward_stack[double](s, xs, x.shape[2], tuple(weights))


# ------------------------------------------------------------------ backward
cdef _unpermute(_Stack s, a):
    """Rows (first axis) of ``a`` from the kernel's gate order back to torch's."""
    out = np.empty_like(a)
    out[s.perm] = a
    return out


cdef _layer_backward(_Stack s, int k, const real[::1] dy, Py_ssize_t lddy, d_h_n, d_c_n,
                     dh0, dc0, list dweights, int team, bint need_w):
    """Layer k's backward: the reversed time loop (gate gradients dG, dh0, dc0), then the
    whole-sequence weight gradients; returns d(layer input) (T, B, I)."""
    cdef _LayerState st = s.layers[k]
    cdef Py_ssize_t T = s.T, B = s.B, H = s.H, D = s.D, GH = s.G * s.H, DGH = D * GH
    cdef Py_ssize_t TB = T * B, nstate = D * B * H, d
    cdef Layer lay
    dt = s.dtype
    dg = np.empty((T, B, DGH), dt)
    dgh = np.empty((T, B, DGH), dt) if s.mode == GRU else dg
    dh = np.zeros((D, B, H), dt) if d_h_n is None else np.array(d_h_n[k * D:(k + 1) * D], dt)
    dc = None
    if s.mode == LSTM:
        dc = np.zeros((D, B, H), dt) if d_c_n is None else np.array(d_c_n[k * D:(k + 1) * D], dt)
    cdef real[::1] dgv = dg.reshape(-1)
    cdef real[::1] dghv = dgh.reshape(-1)
    cdef real[::1] dhv = dh.reshape(-1)
    cdef real[::1] dcv = _flat(dc)
    cdef const real[::1] outv = st.out.reshape(-1)
    cdef const real[::1] auxv = _flat(st.aux)
    cdef const real[::1] actv = _flat(st.act)
    cdef const real[::1] h0v = s.h0.reshape(-1)
    cdef const real[::1] c0v = _flat(s.c0)
    cdef const real[::1] wh
    cdef real[::1] packed
    gated = s.mode in (GRU, LSTM)
    _layer_shape(s, &lay)
    lay.need_dh0 = s.has_hx
    lay.xp = NULL
    lay.gh = NULL
    lay.act = <void*>_cspan(actv, 0, TB * DGH) if gated else NULL
    lay.out = <void*>_cspan(outv, 0, TB * D * H)
    lay.aux = <void*>_cspan(auxv, 0, TB * D * H) if gated else NULL
    lay.h0 = <void*>_cspan(h0v, k * nstate, nstate)
    lay.c0 = <void*>_cspan(c0v, k * nstate, nstate) if s.mode == LSTM else NULL
    lay.dout = <void*>_cspan(dy, 0, TB * D * H if lddy else H)
    lay.lddy = lddy
    lay.dg = _span(dgv, 0, TB * DGH)
    lay.dgh = _span(dghv, 0, TB * DGH)
    lay.dh = _span(dhv, 0, nstate)
    lay.dc = _span(dcv, 0, nstate) if s.mode == LSTM else NULL
    keep = []
    for d in range(D):
        wh = st.w_hh[d].reshape(-1)
        lay.whh[d] = <void*>_cspan(wh, 0, GH * H)
        if real is float:
            if _packed_on:
                pk = np.empty(s.NB * _panels(s.UB) * GH, np.float32)
                keep.append(pk)
                packed = pk
                lay.whp[d] = _span(packed, 0, s.NB * _panels(s.UB) * GH)
    with nogil:
        _run_layer[real](&lay, True, team, NULL)
    if lay.nomem:
        _raise_gemm_nomem()
    dh0[k * D:(k + 1) * D] = dh
    if s.mode == LSTM:
        dc0[k * D:(k + 1) * D] = dc
    return _weight_grads(s, k, dgv, dghv, dweights, need_w)


cdef _weight_grads(_Stack s, int k, real[::1] dg, real[::1] dgh, list dweights, bint need_w):
    """Layer k's parameter gradients and d(input) from its gate gradients, as whole-
    sequence GEMMs (rows in the kernel's gate order, put back in torch's at the end):
    dW_ih = dG^T X, dW_hh = dG^T H_prev, dX = dG W_ih, biases = column sums of dG.
    need_w False (frozen weights): d(input) alone."""
    cdef _LayerState st = s.layers[k]
    cdef Py_ssize_t T = s.T, B = s.B, H = s.H, D = s.D, GH = s.G * s.H, DGH = D * GH
    cdef Py_ssize_t TB = T * B, I = st.n_in, nw = s.nw, d, base
    cdef Py_ssize_t hrow = B * D * H   # one step of the layer output
    cdef bint has_h0 = s.has_hx
    dt = s.dtype
    dx = np.empty((T, B, I), dt)
    dbi = np.empty(D * GH, dt)
    dbh = np.empty(D * GH, dt) if s.mode == GRU else dbi
    cdef real[::1] dxv = dx.reshape(-1)
    cdef real[::1] dbiv = dbi
    cdef real[::1] dbhv = dbh
    cdef const real[::1] inp = st.inp.reshape(-1)
    cdef const real[::1] outv = st.out.reshape(-1)
    cdef const real[::1] h0v = s.h0.reshape(-1)
    cdef const real[::1] wi
    cdef real[::1] dwiv
    cdef real[::1] dwhv
    cdef const real* pdg
    cdef const real* pdgh_prev   # dG rows of the steps whose h_{t-1} is an output row
    cdef const real* phv         # ... and those output rows, read in place
    cdef const real* pdgh_first  # dG rows of the step whose h_{t-1} is h0
    cdef const real* ph0
    cdef real* pdwi
    cdef real* pdwh
    cdef real* pdx = _span(dxv, 0, TB * I)
    cdef const real* pin = _cspan(inp, 0, TB * I)
    cdef const real* pwi
    cdef int nt = _threads_for(TB * DGH, 1 << 15)
    if not need_w:
        for d in range(D):
            wi = st.w_ih[d].reshape(-1)
            pdg = _cspan(dg, d * GH, (TB - 1) * DGH + GH)
            pwi = _cspan(wi, 0, GH * I)
            with nogil:
                if _gemm_rows(False, False, TB, I, GH, pdg, DGH, pwi, I, <real>(1 if d else 0),
                              pdx, I):
                    _raise_gemm_nomem()
        return dx
    _col_sums(dg, TB, DGH, dbiv, nt)
    if s.mode == GRU:
        _col_sums(dgh, TB, DGH, dbhv, nt)
    for d in range(D):
        base = (k * D + d) * nw
        dwi = np.empty((GH, I), dt)
        dwh = np.empty((GH, H), dt)
        dwiv = dwi.reshape(-1)
        dwhv = dwh.reshape(-1)
        wi = st.w_ih[d].reshape(-1)
        pdg = _cspan(dg, d * GH, (TB - 1) * DGH + GH)
        # dW_hh = sum_t dG_t^T h_{t-1}: direction 0's step t > 0 reads out[t - 1],
        # direction 1's step t < T - 1 reads out[t + 1]; the h0 step last (if h0 given)
        if d == 0:
            pdgh_prev = _cspan(dgh, B * DGH, (TB - B - 1) * DGH + GH)
            phv = _cspan(outv, 0, (TB - B - 1) * D * H + H)
            pdgh_first = _cspan(dgh, 0, (B - 1) * DGH + GH)
        else:
            pdgh_prev = _cspan(dgh, GH, (TB - B - 1) * DGH + GH)
            phv = _cspan(outv, hrow + H, (TB - B - 1) * D * H + H)
            pdgh_first = _cspan(dgh, (T - 1) * B * DGH + GH, (B - 1) * DGH + GH)
        ph0 = _cspan(h0v, (k * D + d) * B * H, B * H)
        pdwi = _span(dwiv, 0, GH * I)
        pdwh = _span(dwhv, 0, GH * H)
        pwi = _cspan(wi, 0, GH * I)
        with nogil:
            if (_gemm_rows(True, False, GH, I, TB, pdg, DGH, pin, I, <real>0, pdwi, I)
                    or _gemm_rows(True, False, GH, H, TB - B, pdgh_prev, DGH, phv, D * H,
                                  <real>0, pdwh, H)
                    or (has_h0 and _gemm_rows(True, False, GH, H, B, pdgh_first, DGH, ph0, H,
                                              <real>1, pdwh, H))
                    or _gemm_rows(False, False, TB, I, GH, pdg, DGH, pwi, I,
                                  <real>(1 if d else 0), pdx, I)):
                _raise_gemm_nomem()
        dweights[base] = _unpermute(s, dwi)
        dweights[base + 1] = _unpermute(s, dwh)
        if nw == 4:
            dweights[base + 2] = _unpermute(s, dbi[d * GH:(d + 1) * GH])
            dweights[base + 3] = _unpermute(s, dbh[d * GH:(d + 1) * GH])
    return dx


cdef tuple _backward_stack(_Stack s, const real[::1] dy, Py_ssize_t lddy, d_h_n, d_c_n,
                           bint need_w):
    """Every layer in reverse (the dropout masks applied to d(input) between them)."""
    cdef int k
    cdef int team = _team_size(s.D, s.B, s.G, s.H, s.NB, _packs(s))
    shape = (s.L * s.D, s.B, s.H)
    dweights = [None] * (s.L * s.D * s.nw)
    dh0 = np.empty(shape, s.dtype)
    dc0 = np.empty(shape, s.dtype) if s.mode == LSTM else None
    for k in range(s.L - 1, -1, -1):
        dx = _layer_backward(s, k, dy, lddy, d_h_n, d_c_n, dh0, dc0, dweights, team, need_w)
        if k > 0:
            dy = _dropped[real](s, k - 1, dx.reshape(-1)) if s.use_drop else dx.reshape(-1)
            lddy = s.D * s.H
    if s.batch_first:
        dx = np.ascontiguousarray(dx.transpose(1, 0, 2))
    return (dx, dh0 if s.has_hx else None, dc0 if s.has_hx and s.mode == LSTM else None,
            tuple(dweights))


def _backward(d_out, d_h_n, d_c_n, _Stack saved not None, bint weight_grad=True):
    """The whole-stack backward (see stack_ops): -> (dx, dh0, dc0, d_weights); d_weights
    all None, their GEMMs and sums not run, without ``weight_grad``."""
    cdef _Stack s = saved
    cdef Py_ssize_t lddy = s.D * s.H
    if d_out is None:
        dy = np.zeros(s.H, s.dtype)   # one zero row, read with stride 0
        lddy = 0
    else:
        dy = np.ascontiguousarray(d_out.transpose(1, 0, 2) if s.batch_first else d_out,
                                  dtype=s.dtype).reshape(-1)
    with single_threaded_blas():
        if s.dtype == np.float32:
            return _backward_stack[float](s, dy, lddy, d_h_n, d_c_n, weight_grad)
        return _backward_stack[double](s, dy, lddy, d_h_n, d_c_n, weight_grad)


# ------------------------------------------------------------------ the public ops
rnn, rnn_backward, gru, gru_backward, lstm, lstm_backward = stack_ops(_forward, _backward)
