# Conv family: conv2d (NCHW cross-correlation; stride, asymmetric zero padding,
# dilation, groups) forward and backward.
#
# Kernels:
#   * general: im2col + BLAS GEMM per image and group, y_n[g] = W_g @ col_g with
#     col (C/G*kH*kW, OH*OW) built in L2-sized tiles of output rows; backward
#     d_col = W_g^T @ dy_n[g] scattered back by col2im, d_W += dy_n[g] @ col_g^T.
#     Forward with horizontal stride 1 uses "row im2col": a tile holds only the padded
#     input rows each kernel row reads, (C*kH, rows*We), and the kW column taps are kW
#     GEMMs on column-shifted views of it, accumulated on the padded width We and copied
#     out -- kW times less im2col traffic (3x3: 75% -> 80% of the single-thread sgemm rate).
#   * direct 3x3 stride 1 (float32, AVX2 builds; groups 1, output channels a multiple of
#     4): an implicit GEMM in fnn_conv.h that reads the input through zero-padded row
#     tiles instead of packing a column matrix (OpenBLAS packs every operand on every
#     call: ~7% of the time at 64 channels), 6 x 16 register tiles (4 x 16 for the last
#     output channels) over 16-channel blocks.  Its d_weight twin sums dy * shifted input
#     rows in vector lanes per image chunk (8 lanes per weight per thread, so only up
#     to 16 MiB of them; larger layers take the GEMM path).  16x64x56x56 -> 64, one thread: forward
#     48 -> 43.5 ms (~89% of sgemm), fwd+bwd 153 -> 132 ms.
#   * conv_transpose2d's forward (float32, AVX2 builds, groups 1, output channels a
#     multiple of 4): its stride-s output splits into s*s phases (rows a + s*q, columns
#     b + s*r), each a stride-1 correlation of the input with the taps of that phase, run
#     on the same direct kernel with a tap-offset list (fnn_cvd_run) -- no d_col GEMM,
#     col2im scatter or zeroing pass.  16x64x28x28 -> 32 k4 s2 p1, one thread: 16 -> 13 ms.
#   * AVX-512 builds (session 6): the tap-list kernel runs 6 x 64 zmm tiles summing over
#     all channels before storing (same products, same order: same bits as the AVX2
#     tiles), and more goes through it -- conv1d (the (N, C, 1, L) view, stride 1, groups
#     1) forward and d_input, summing straight into y when L % 16 == 0, no row im2col or
#     OpenBLAS packing; conv1d's d_weight on a direct d_weight kernel (fnn_cvw_run: dy
#     broadcast against the padded input row transposed once per image, every tap a
#     row-shifted read of it); conv_transpose2d's backward in one pass per image chunk
#     sharing each image's phase planes of dy (phase-major): d_input on the tap-list
#     kernel (one channel group per phase) and d_weight on fnn_cvw_run (the planes
#     broadcast against x transposed).  32x256x1024 -> 256 k3, one thread: forward 139 ->
#     119 ms, backward 284 -> 250 ms; 16x64x28x28 -> 32 k4 s2 p1: backward 22.6 -> 18.9 ms.
#   * AVX-512 builds (session 7): conv2d 3x3 stride 1 (groups 1, O % 4 == 0) on Winograd
#     F(2x2, 3x3) (fnn_wg_* in fnn_conv.h): per image the input zero-padded once, then
#     chunks of 64 2x2 output tiles -- the input transform (16 tiles per vector), 16 GEMMs
#     (one per transform position) on the tap-list kernel's 6 x 64 tiles, the output
#     transform + bias straight into y: 16 products per tile and channel pair instead of
#     36.  d_input (the forward of the flipped weights) runs on it too, and d_weight
#     (C % 4 == 0, O % 16 == 0) on the same transforms: dU[xi] = sum over tiles of
#     (A dy A^T)[xi] * V[xi] on fnn_cvw_run, dw = G^T dU G in double after the chunk
#     partials.  16x64x56x56 -> 64, one thread: forward 36.8 -> 22.5 ms, fwd+bwd 114 ->
#     71 ms (torch 35 / 113).  Other stride-1 conv2d (5x5, dilated, 1x3 / 3x1, ...): forward
#     and d_input as one run of kH*kW taps on the tap-list kernel over the padded image,
#     d_weight (C % 16 == 0) on fnn_cvw_run against the padded image transposed.
#   * AVX2 builds (session 17): the 3x3 forward and d_input on the same Winograd transforms
#     (8 tiles a vector; fnn_wg_* after fnn_cvd_run_init in fnn_conv.h), their GEMMs on
#     the 6 x 16 / 4 x 16 tiles; d_weight stays on the direct 3x3 kernel.  16x64x56x56 ->
#     64, 2 threads on a Zen 3: forward 21.5 -> 15.4 ms, fwd+bwd 66 -> 54 ms (torch 21 / 71).
#   * backward with stride 1: d_input is the forward convolution of dy with the flipped,
#     transposed weights (padding dilation*(k-1) - padding), so it runs on the forward
#     kernels above instead of d_col GEMM + col2im.
#   * 1x1, stride 1, no padding: the input plane *is* the column matrix -- plain GEMMs.
#   * depthwise (one input channel per output channel, groups == C): direct loops per
#     plane over a zero-padded copy of it (in L1/L2), so no tap needs a bounds test and
#     each output element is summed in a register across its taps, vectorised across the
#     row (3x3 unrolled).  Backward with stride 1: d_input is the correlation of the
#     zero-padded dy with the flipped taps (each dx row written once, no zeroing and
#     scatter), and d_weight / d_bias come from one pass over the plane with float lanes
#     folded into double every <= 256 elements (3x3; other kernels and strides scatter
#     tap by tap).
#     16x128x56x56 3x3, one thread: forward 12.5 -> 6.1 ms, backward 30 -> 11 ms.
# Threads: with several images and threads, the images (backward: fixed chunks of
# images) are spread over OpenMP threads and every GEMM runs single-threaded (the shell
# limits BLAS to one thread around those calls); otherwise images run in order and each
# GEMM may use BLAS's threads.  Either way every image runs the same GEMM calls, and the
# per-chunk d_weight partials are added in chunk order, so results do not depend on the
# thread count.  Images / chunks are coarse (milliseconds each) and independent, so they
# are handed out dynamically: on a shared machine a descheduled thread does not hold
# the others up, and which thread runs an image cannot change its result.  Parameter-gradient sums of the depthwise kernel and d_bias are kept per
# (image, channel) in double and added in image order.
cimport cython
cimport numpy as cnp
from cython.parallel cimport prange, parallel
from libc.stdlib cimport free
from libc.string cimport memcpy, memset

from libc.stdint cimport int32_t, int64_t, uintptr_t

from fnn_blas cimport gemm as _scipy_gemm, real

import numpy as np

cnp.import_array()

include "fnn_runtime.pxi"
include "fnn_span.pxi"

include "fnn_window.pxi"


cdef extern from "fnn_reduce.h" nogil:
    double fnn_cv_sum_f(const float* x, Py_ssize_t n)
    double fnn_cv_sum_d(const double* x, Py_ssize_t n)
    double fnn_cv_dot_f(const float* x, const float* y, Py_ssize_t n, Py_ssize_t sy)
    double fnn_cv_dot_d(const double* x, const double* y, Py_ssize_t n, Py_ssize_t sy)


cdef extern from "fnn_conv.h" nogil:
    void fnn_im2col_row_f(float* d, const float* src, Py_ssize_t n, Py_ssize_t o0, Py_ssize_t o1,
                          Py_ssize_t s)
    void fnn_im2col_row_d(double* d, const double* src, Py_ssize_t n, Py_ssize_t o0,
                          Py_ssize_t o1, Py_ssize_t s)
    void fnn_col2im_row_f(float* dst, const float* d, Py_ssize_t o0, Py_ssize_t o1, Py_ssize_t s)
    void fnn_col2im_row_d(double* dst, const double* d, Py_ssize_t o0, Py_ssize_t o1, Py_ssize_t s)
    int FNN_HAVE_CV3
    Py_ssize_t fnn_cv3_o6(Py_ssize_t O)
    Py_ssize_t fnn_wg_ustride(Py_ssize_t O, Py_ssize_t C)
    void fnn_zero_tails(float* A, Py_ssize_t rows, Py_ssize_t ld, Py_ssize_t z0)
    int FNN_WG_TB
    void fnn_wg_pack_block(const float* w, Py_ssize_t rs, Py_ssize_t cs, int flip, Py_ssize_t C,
                           Py_ssize_t m, float* S, float* U, Py_ssize_t OC)
    void fnn_pack_block_oct(const float* w, Py_ssize_t C, Py_ssize_t T, Py_ssize_t m, float* dst)
    void fnn_pack_block_taps(const float* w, Py_ssize_t rs, Py_ssize_t cs, const Py_ssize_t* tof,
                             Py_ssize_t C, Py_ssize_t T, Py_ssize_t m, float* dst)
    void fnn_cvd_run_raw(const float* W, Py_ssize_t ars, Py_ssize_t cs, Py_ssize_t ts,
                         const float* xp, Py_ssize_t plane, const Py_ssize_t* toff, Py_ssize_t nt,
                         Py_ssize_t C, Py_ssize_t O, float* ct, Py_ssize_t ldc, Py_ssize_t npos,
                         const float* bias)
    void fnn_flip_transpose_oct(const float* w, Py_ssize_t O, Py_ssize_t C, Py_ssize_t T,
                                Py_ssize_t o0, Py_ssize_t o1, float* wt)
    void fnn_wg_unpack_rows(const float* part, Py_ssize_t nch, Py_ssize_t ps, Py_ssize_t C,
                            Py_ssize_t O, Py_ssize_t o0, Py_ssize_t o1, float* D, double* L,
                            float* dw)
    Py_ssize_t fnn_cv3_rows(Py_ssize_t C, Py_ssize_t OW, Py_ssize_t OH)
    Py_ssize_t fnn_cv3_plane_rows(Py_ssize_t R, Py_ssize_t OW)
    int FNN_HAVE_CVD_RAW
    void fnn_cv3_image(const float* x, const float* Ap, Py_ssize_t ars, Py_ssize_t cs,
                       Py_ssize_t ts, const float* bias, float* y, Py_ssize_t C,
                       Py_ssize_t H, Py_ssize_t W, Py_ssize_t O, Py_ssize_t OH, Py_ssize_t OW,
                       Py_ssize_t pt, Py_ssize_t pl, float* xp, float* ct)
    void fnn_cv3_wgrad_image(const float* x, const float* dy, float* acc, Py_ssize_t C, Py_ssize_t H,
                             Py_ssize_t W, Py_ssize_t O, Py_ssize_t OH, Py_ssize_t OW,
                             Py_ssize_t pt, Py_ssize_t pl, float* xp, float* dyp)
    void fnn_cv3_wgrad_reduce(const float* acc, float* dw, Py_ssize_t C, Py_ssize_t O)
    void fnn_wg_dims(Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t* th, Py_ssize_t* tw, Py_ssize_t* We,
                     Py_ssize_t* PH, Py_ssize_t* ldv)
    void fnn_wg_image(const float* x, const float* U, const float* bias, float* y, Py_ssize_t C,
                      Py_ssize_t H, Py_ssize_t W, Py_ssize_t O, Py_ssize_t OH, Py_ssize_t OW,
                      Py_ssize_t pt, Py_ssize_t pl, float* xp, float* V, float* M,
                      const float* zeros)
    void fnn_wg_wgrad_image(const float* x, const float* dy, float* dU, Py_ssize_t C, Py_ssize_t H,
                            Py_ssize_t W, Py_ssize_t O, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t pt,
                            Py_ssize_t pl, float* xp, float* V, float* D, float* Dt)
    void fnn_cv3_pad_tile(const float* x, float* xp, Py_ssize_t C, Py_ssize_t H, Py_ssize_t W,
                          Py_ssize_t We, Py_ssize_t PR, Py_ssize_t h0, Py_ssize_t pl)
    int FNN_HAVE_CVW
    int FNN_HAVE_WG
    void fnn_cvw_transpose(const float* x, float* xt, Py_ssize_t C, Py_ssize_t W, Py_ssize_t We,
                           Py_ssize_t pl)
    void fnn_cvw_run(const float* a, Py_ssize_t lda, Py_ssize_t arow, const Py_ssize_t* aoff,
                     const float* b, Py_ssize_t ldb, Py_ssize_t brow, const Py_ssize_t* boff,
                     Py_ssize_t nt, Py_ssize_t Q, Py_ssize_t R, Py_ssize_t M, Py_ssize_t Nv,
                     float* dw)
    void fnn_cv_interleave2(const float* a, const float* b, float* y, Py_ssize_t na,
                            Py_ssize_t nb)
    void fnn_cvd_run_init(const float* Ap, const float* xp, Py_ssize_t plane,
                          const Py_ssize_t* toff, Py_ssize_t nt, Py_ssize_t cg, Py_ssize_t C,
                          Py_ssize_t O, float* ct, Py_ssize_t ldc, Py_ssize_t npos,
                          const float* bias)
    void fnn_cvd_run(const float* Ap, const float* xp, Py_ssize_t plane, const Py_ssize_t* toff,
                     Py_ssize_t nt, Py_ssize_t cg, Py_ssize_t C, Py_ssize_t O, float* ct,
                     Py_ssize_t ldc, Py_ssize_t npos)
    void fnn_pad_plane_f(float* dst, Py_ssize_t rows, Py_ssize_t cols, const float* src,
                         Py_ssize_t H, Py_ssize_t W, Py_ssize_t top, Py_ssize_t left)
    void fnn_pad_plane_d(double* dst, Py_ssize_t rows, Py_ssize_t cols, const double* src,
                         Py_ssize_t H, Py_ssize_t W, Py_ssize_t top, Py_ssize_t left)
    void fnn_dw_fwd_row_f(const float* xp, Py_ssize_t ldx, const float* w, float bias, float* y,
                          Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sw,
                          Py_ssize_t dh, Py_ssize_t dw)
    void fnn_dw_fwd_row_d(const double* xp, Py_ssize_t ldx, const double* w, double bias,
                          double* y, Py_ssize_t OW, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sw,
                          Py_ssize_t dh, Py_ssize_t dw)
    void fnn_dw_dx_row_f(const float* gp, Py_ssize_t ldg, const float* w, float* d, Py_ssize_t W,
                         int accumulate)
    void fnn_dw_dx_row_d(const double* gp, Py_ssize_t ldg, const double* w, double* d,
                         Py_ssize_t W, int accumulate)
    void fnn_dw_wgrad_f(const float* g, const float* xp, Py_ssize_t ldx, Py_ssize_t OH,
                        Py_ssize_t OW, double* acc)
    void fnn_dw_wgrad_d(const double* g, const double* xp, Py_ssize_t ldx, Py_ssize_t OH,
                        Py_ssize_t OW, double* acc)

OPS = ("conv2d", "conv2d_backward", "conv_transpose2d", "conv_transpose2d_backward")


include "fnn_gemm.pxi"

cdef extern from "fnn_conv_gemm.h" nogil:
    int FNN_HAVE_CIG
    int fnn_cig_image(const float* W, Py_ssize_t O, Py_ssize_t K, const float* pl,
                      const Py_ssize_t* koff, Py_ssize_t Wp, Py_ssize_t OW, Py_ssize_t j0,
                      Py_ssize_t j1, float* y, Py_ssize_t P, const float* bias)
    int fnn_cig_multi(const float* W, Py_ssize_t O, Py_ssize_t K, const float* pl,
                      const Py_ssize_t* koff, Py_ssize_t P, Py_ssize_t PS, Py_ssize_t RS,
                      Py_ssize_t CS, Py_ssize_t OW, Py_ssize_t J, float* tmp, Py_ssize_t ldt)
    void fnn_wgs_weight(const float* w, Py_ssize_t rs, Py_ssize_t cs, int flip, Py_ssize_t S,
                        Py_ssize_t ld, Py_ssize_t Cn, Py_ssize_t r0, Py_ssize_t r1, float* U)
    void fnn_wgs_weight_t(const float* w, Py_ssize_t O, Py_ssize_t C, Py_ssize_t c0,
                          Py_ssize_t c1, float* U)
    void fnn_wgs_input(const float* x, Py_ssize_t hw, const int32_t* ix, Py_ssize_t nt,
                       Py_ssize_t npad, float* V, Py_ssize_t vs)
    void fnn_wgs_output(const float* M, Py_ssize_t ms, const int32_t* iy, const int32_t* io,
                        Py_ssize_t nt, Py_ssize_t npad, Py_ssize_t ps, float bias, float* y)
    Py_ssize_t fnn_sgz_buffer_floats()
    void fnn_wgs_tables(Py_ssize_t H, Py_ssize_t W, Py_ssize_t OH, Py_ssize_t OW, Py_ssize_t pt,
                        Py_ssize_t pl, Py_ssize_t npad, int32_t* ix, int32_t* iy, int32_t* io)
    void fnn_wgs_dout(const float* dy, Py_ssize_t ps, const int32_t* iy, Py_ssize_t nt,
                      Py_ssize_t npad, float* D, Py_ssize_t ds)
    void fnn_wgs_wgrad_out(const float* dU, Py_ssize_t S, Py_ssize_t C, Py_ssize_t r0,
                           Py_ssize_t r1, float* dw)


cdef struct Geo:
    Py_ssize_t N, C, H, W, O, Cg, kh, kw, OH, OW, sh, sw, pt, pl, dh, dw, G
    bint direct                     # _DIRECT when the geometry was made (for nogil checks)


# the element counts of a geometry's arrays: what the kernels' pointers span (fnn_span.pxi)
cdef inline Py_ssize_t _xsize(Geo* g) noexcept nogil:
    return g.N * g.C * g.H * g.W


cdef inline Py_ssize_t _wsize(Geo* g) noexcept nogil:
    return g.O * g.Cg * g.kh * g.kw


cdef inline Py_ssize_t _ysize(Geo* g) noexcept nogil:
    return g.N * g.O * g.OH * g.OW


cdef inline double _sum(const real* x, Py_ssize_t n) noexcept nogil:
    if real is float:
        return fnn_cv_sum_f(x, n)
    else:
        return fnn_cv_sum_d(x, n)


cdef inline double _dot(const real* x, const real* y, Py_ssize_t n, Py_ssize_t sy) noexcept nogil:
    if real is float:
        return fnn_cv_dot_f(x, y, n, sy)
    else:
        return fnn_cv_dot_d(x, y, n, sy)


# ---------------------------------------------------------------- im2col / col2im
cdef inline void _im2col(const real* x, real* col, Geo* g, Py_ssize_t r0,
                         Py_ssize_t r1) noexcept nogil:
    """col[(c, i, j), (oh - r0, ow)] = xpad[c, oh*sh + i*dh, ow*sw + j*dw] for one image
    and the output rows oh in [r0, r1) (a tile of (r1 - r0) * OW columns)."""
    _im2col_c(x, col, g, r0, r1, 0, g.C, (r1 - r0) * g.OW)


cdef void _im2col_c(const real* x, real* col, Geo* g, Py_ssize_t r0, Py_ssize_t r1,
                    Py_ssize_t c0, Py_ssize_t c1, Py_ssize_t T) noexcept nogil:
    """_im2col for channels [c0, c1), their rows in col from its first on, T apart (at
    least the tile's (r1 - r0) * OW columns: several images' tiles side by side)."""
    cdef Py_ssize_t c, i, j, oh, ow, ih, off, o0, o1
    cdef Py_ssize_t OW = g.OW, sw = g.sw, H = g.H, W = g.W
    cdef real* d
    cdef const real* src
    for c in range(c0, c1):
        for i in range(g.kh):
            for j in range(g.kw):
                off = j * g.dw - g.pl
                _ow_range(off, sw, W, OW, &o0, &o1)
                d = col + (((c - c0) * g.kh + i) * g.kw + j) * T
                for oh in range(r0, r1):
                    ih = oh * g.sh - g.pt + i * g.dh
                    if ih < 0 or ih >= H or o0 >= o1:
                        memset(d, 0, OW * sizeof(real))
                    elif real is float:
                        fnn_im2col_row_f(d, x + (c * H + ih) * W + off, OW, o0, o1, sw)
                    else:
                        fnn_im2col_row_d(d, x + (c * H + ih) * W + off, OW, o0, o1, sw)
                    d += OW


cdef inline void _col2im(const real* col, real* dx, Geo* g, Py_ssize_t r0,
                         Py_ssize_t r1) noexcept nogil:
    """dx (one image, zeroed by the caller) += the tile's columns scattered back."""
    _col2im_c(col, dx, g, r0, r1, 0, g.C)


cdef void _col2im_c(const real* col, real* dx, Geo* g, Py_ssize_t r0, Py_ssize_t r1,
                    Py_ssize_t c0, Py_ssize_t c1) noexcept nogil:
    """_col2im for channels [c0, c1), whose rows the tile holds from its first on."""
    cdef Py_ssize_t c, i, j, oh, ow, ih, off, o0, o1
    cdef Py_ssize_t OW = g.OW, sw = g.sw, H = g.H, W = g.W, T = (r1 - r0) * g.OW
    cdef const real* d
    cdef real* dst
    for c in range(c0, c1):
        for i in range(g.kh):
            for j in range(g.kw):
                off = j * g.dw - g.pl
                _ow_range(off, sw, W, OW, &o0, &o1)
                d = col + (((c - c0) * g.kh + i) * g.kw + j) * T
                for oh in range(r0, r1):
                    ih = oh * g.sh - g.pt + i * g.dh
                    if ih >= 0 and ih < H:
                        if real is float:
                            fnn_col2im_row_f(dx + (c * H + ih) * W + off, d, o0, o1, sw)
                        else:
                            fnn_col2im_row_d(dx + (c * H + ih) * W + off, d, o0, o1, sw)
                    d += OW


# ---------------------------------------------------------------- GEMM paths
cdef inline bint _is_plain_1x1(Geo* g) noexcept nogil:
    """A 1x1 kernel at any stride reading no padding: output (oh, ow) reads input (oh*sh,
    ow*sw) of every channel."""
    return (g.kh == 1 and g.kw == 1 and g.pt == 0 and g.pl == 0
            and g.OH == (g.H - 1) // g.sh + 1 and g.OW == (g.W - 1) // g.sw + 1)


cdef inline bint _is_1x1(Geo* g) noexcept nogil:
    return (g.kh == 1 and g.kw == 1 and g.sh == 1 and g.sw == 1 and g.pt == 0 and g.pl == 0
            and g.OH == g.H and g.OW == g.W)


cdef inline Py_ssize_t _tile_rows(Geo* g) noexcept nogil:
    """Output rows per im2col tile: the tile (C*kH*kW x rows*OW) stays within ~256 KiB
    of float32 so it is still in L2 when the GEMM packs it.  Shapes only."""
    cdef Py_ssize_t K = g.C * g.kh * g.kw
    cdef Py_ssize_t r = (1 << 16) // (K * g.OW if K * g.OW > 0 else 1)
    if r < 1:
        r = 1
    return r if r < g.OH else g.OH


cdef Py_ssize_t _TBWD_ELEMS = 1 << 19   # 2 MiB of float32: a whole 28x28 image at 512 rows


# the phase planes of one image per thread (_tbwd_chunk) up to this many elements (64 MiB
# of float32); larger images build their column tiles straight from the input (_im2col)
cdef Py_ssize_t _TBWD_PLANES_MAX = 1 << 24


cdef inline Py_ssize_t _tbwd_rows(Geo* g) noexcept nogil:
    """Output rows per im2col tile of the fused conv_transpose2d backward (_tbwd_chunk)."""
    cdef Py_ssize_t K = g.C * g.kh * g.kw
    cdef Py_ssize_t r = _TBWD_ELEMS // (K * g.OW if K * g.OW > 0 else 1)
    if r < 1:
        r = 1
    return r if r < g.OH else g.OH


cdef inline bint _rowcol_ok(Geo* g) noexcept nogil:
    """Horizontal stride 1 and a kernel wider than one: the row-im2col path applies."""
    return g.sw == 1 and g.kw > 1


cdef inline Py_ssize_t _row_tile(Geo* g) noexcept nogil:
    """Output rows per row-im2col tile (~64K elements of (C*kH) x rows*We, shapes only)."""
    cdef Py_ssize_t We = g.OW + g.dw * (g.kw - 1), K = g.C * g.kh
    cdef Py_ssize_t r = (1 << 16) // (K * We if K * We > 0 else 1)
    if r < 1:
        r = 1
    return r if r < g.OH else g.OH


cdef void _rowcol(const real* x, real* Rt, Geo* g, Py_ssize_t r0, Py_ssize_t r1) noexcept nogil:
    """Rt[(c, i), (oh - r0) * We + u] = xpad[c, oh*sh + i*dh, u] for u in [0, We): the
    padded input rows each kernel row reads, once (the kW column taps are column offsets
    into this matrix, so it is kW times smaller than the im2col tile)."""
    cdef Py_ssize_t c, i, oh, ih, o0, o1
    cdef Py_ssize_t We = g.OW + g.dw * (g.kw - 1), H = g.H, W = g.W
    cdef Py_ssize_t T = (r1 - r0) * We
    cdef real* d
    _ow_range(-g.pl, 1, W, We, &o0, &o1)
    for c in range(g.C):
        for i in range(g.kh):
            d = Rt + (c * g.kh + i) * T
            for oh in range(r0, r1):
                ih = oh * g.sh - g.pt + i * g.dh
                if ih < 0 or ih >= H or o0 >= o1:
                    memset(d, 0, We * sizeof(real))
                elif real is float:
                    fnn_im2col_row_f(d, x + (c * H + ih) * W - g.pl, We, o0, o1, 1)
                else:
                    fnn_im2col_row_d(d, x + (c * H + ih) * W - g.pl, We, o0, o1, 1)
                d += We


cdef inline int _gemm_blocks_small(bint own, Py_ssize_t images, Py_ssize_t M, Py_ssize_t N,
                                   Py_ssize_t K) noexcept nogil:
    """Blocks of one image's GEMM (C = M x N over depth K) when the batch is too small to
    spread images over the threads (fewer than 4) and the product runs on the own float32
    kernel (``own``; it needs M >= 24 and K >= 16 and runs on the calling thread): column
    blocks of >= 256 (at most 8) where C is wide, else row blocks of >= 32 (at most 8).
    -> nb > 0: nb column blocks; nb < 0: -nb row blocks; 1: one call.  Fixed by the
    shapes, never by the thread count: the same blocks (so the same bits) on one thread or
    several."""
    cdef Py_ssize_t nb
    if not own or images >= 4 or M < 24 or K < 16 or M * N * K < (1 << 21):
        return 1
    nb = N // 256
    if nb >= 2:
        return <int>(nb if nb < 8 else 8)
    nb = M // 32
    if nb >= 2 and N >= 32:
        return -<int>(nb if nb < 8 else 8)
    return 1


cdef int _gemm_cols(bint trans_a, bint trans_b, int M, int N, int K, real alpha,
                    const real* A, int lda, const real* B, int ldb, real beta, real* C,
                    int ldc, int nb) noexcept nogil:
    """gemm(trans_a, trans_b, ...) in the blocks _gemm_blocks_small chose, over the
    threads: column blocks [n0, n1) (n0 a multiple of 16) or row blocks [m0, m1), each one
    call.  Inside another parallel region the blocks run on its thread, in order.  -> 0,
    or -1 when a GEMM could not get its work buffer (fnn_gemm.pxi: the GEMM helpers up to
    the region that owns them pass it on; that region's driver raises MemoryError)."""
    cdef int k, n0, n1, nbk = nb if nb > 0 else -nb, failed = 0
    if nbk <= 1:
        return gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
    for k in prange(nbk, schedule="dynamic", num_threads=fnn_max_threads()):
        if nb > 0:
            n0 = (N * k // nbk) // 16 * 16
            n1 = N if k == nbk - 1 else (N * (k + 1) // nbk) // 16 * 16
            if gemm(trans_a, trans_b, M, n1 - n0, K, alpha, A, lda,
                    B + (<Py_ssize_t>n0 * ldb if trans_b else n0), ldb, beta, C + n0, ldc):
                fnn_flag_set(&failed)
        else:
            n0 = M * k // nbk
            n1 = M * (k + 1) // nbk
            if gemm(trans_a, trans_b, n1 - n0, N, K, alpha,
                    A + (n0 if trans_a else <Py_ssize_t>n0 * lda), lda, B, ldb, beta,
                    C + <Py_ssize_t>n0 * ldc, ldc):
                fnn_flag_set(&failed)
    return -1 if failed else 0


cdef int _fwd_image_rows(const real* x, const real* wr, const real* b, real* y, real* buf,
                         Geo* g) noexcept nogil:
    """One image, stride-1 columns: for every tile of output rows, y = sum_j W[:, :, :, j] @
    Rt shifted by j*dW columns, computed on the padded width We and copied out."""
    cdef Py_ssize_t P = g.OH * g.OW, Og = g.O // g.G, Kr = g.Cg * g.kh, gi, o, j, oh, ow
    cdef Py_ssize_t We = g.OW + g.dw * (g.kw - 1), R = _row_tile(g), r0, r1, T, Np
    cdef real* Rt = buf
    cdef real* ct = buf + g.C * g.kh * R * We
    cdef real* yr
    cdef const real* cr
    cdef real bo
    cdef int nb
    r0 = 0
    while r0 < g.OH:
        r1 = r0 + R if r0 + R < g.OH else g.OH
        T = (r1 - r0) * We
        Np = T - (We - g.OW)
        nb = _gemm_blocks_small(real is float and _sgz_on, g.N, Og, Np, Kr)
        _rowcol(x, Rt, g, r0, r1)
        if r1 - r0 == 1:
            # one row (conv1d): the result row is y's row, so the GEMMs accumulate
            # straight into y, on the bias (no zeroing pass, no copy out)
            for o in range(g.O):
                bo = b[o] if b != NULL else 0
                yr = y + o * P + r0 * g.OW
                for ow in range(g.OW):
                    yr[ow] = bo
            for gi in range(g.G):
                for j in range(g.kw):
                    if _gemm_cols(False, False, <int>Og, <int>Np, <int>Kr, <real>1,
                                  wr + (j * g.O + gi * Og) * Kr, <int>Kr,
                                  Rt + gi * Kr * T + j * g.dw, <int>T, <real>1,
                                  y + gi * Og * P + r0 * g.OW, <int>P, nb):
                        return -1
            r0 = r1
            continue
        for gi in range(g.G):
            for j in range(g.kw):
                if _gemm_cols(False, False, <int>Og, <int>Np, <int>Kr, <real>1,
                              wr + (j * g.O + gi * Og) * Kr, <int>Kr, Rt + gi * Kr * T + j * g.dw,
                              <int>T, <real>(0 if j == 0 else 1), ct + gi * Og * Np, <int>Np, nb):
                    return -1
        for o in range(g.O):
            bo = b[o] if b != NULL else 0
            for oh in range(r0, r1):
                yr = y + o * P + oh * g.OW
                cr = ct + o * Np + (oh - r0) * We
                for ow in range(g.OW):
                    yr[ow] = cr[ow] + bo
        r0 = r1
    return 0


cdef int _fwd_tile(const real* x, const real* w, const real* b, real* y, real* col, Geo* g,
                   Py_ssize_t r0, Py_ssize_t r1) noexcept nogil:
    """Output rows [r0, r1) of one image (not 1x1): the bias, then W_g @ im2col(rows) for
    every group into y (blocks from _gemm_blocks_small)."""
    cdef Py_ssize_t P = g.OH * g.OW, Og = g.O // g.G, Kg = g.Cg * g.kh * g.kw, gi, o, k
    cdef Py_ssize_t T = (r1 - r0) * g.OW
    cdef real beta = 0
    cdef int nb = _gemm_blocks_small(real is float and _sgz_on, g.N, Og, T, Kg)
    if b != NULL:
        for o in range(g.O):
            for k in range(T):
                y[o * P + r0 * g.OW + k] = b[o]
        beta = 1
    _im2col(x, col, g, r0, r1)
    for gi in range(g.G):
        if _gemm_cols(False, False, <int>Og, <int>T, <int>Kg, <real>1, w + gi * Og * Kg, <int>Kg,
                      col + gi * Kg * T, <int>T, beta, y + gi * Og * P + r0 * g.OW, <int>P, nb):
            return -1
    return 0


cdef int _fwd_image(const real* x, const real* w, const real* b, real* y, real* col,
                    Geo* g) noexcept nogil:
    """One image: y (O, OH*OW) = W_g @ col_g (+ bias) for every group, tile by tile."""
    cdef Py_ssize_t P = g.OH * g.OW, Og = g.O // g.G, Kg = g.Cg * g.kh * g.kw, gi, o, k
    cdef Py_ssize_t R = _tile_rows(g), r0
    cdef real beta = 0
    cdef int nb
    if _is_1x1(g):
        if b != NULL:
            for o in range(g.O):
                for k in range(P):
                    y[o * P + k] = b[o]
            beta = 1
        nb = _gemm_blocks_small(real is float and _sgz_on, g.N, Og, P, Kg)
        for gi in range(g.G):
            if _gemm_cols(False, False, <int>Og, <int>P, <int>Kg, <real>1, w + gi * Og * Kg,
                          <int>Kg, x + gi * Kg * P, <int>P, beta, y + gi * Og * P, <int>P, nb):
                return -1
        return 0
    r0 = 0
    while r0 < g.OH:
        if _fwd_tile(x, w, b, y, col, g, r0, r0 + R if r0 + R < g.OH else g.OH):
            return -1
        r0 += R
    return 0


cdef inline bint _cv3_ok(Geo* g) noexcept nogil:
    """The direct 3x3 stride-1 kernel (float32, AVX2 builds) applies."""
    return (FNN_HAVE_CV3 != 0 and g.kh == 3 and g.kw == 3 and g.sh == 1 and g.sw == 1
            and g.dh == 1 and g.dw == 1 and g.G == 1 and g.O % 4 == 0 and g.C >= 4)


cdef struct WSrc:
    # a weight read in place: filter (o, c) at w + o * rs + c * cs, taps reversed when flip
    # (Winograd's fnn_wg_pack_block: w at the filter's first float; the direct kernel's
    # fnn_cvd_run_raw: w at its first tap read, tap steps ts = 1, or -1 when flipped)
    const float* w
    Py_ssize_t rs
    Py_ssize_t cs
    Py_ssize_t ts
    int flip


cdef inline Py_ssize_t _bound4(Py_ssize_t O, Py_ssize_t ng, Py_ssize_t k) noexcept nogil:
    """Start of output-channel group k of ng (k = ng: O) where each group's weights are
    packed on their own (Winograd) or read in place: multiples of 4 (each group's blocks
    of 6, then 4, are its own), so two groups of 256 channels are 128 each, not 120 and
    136 as _obound's."""
    if k >= ng:
        return O
    return (O * k // ng) // 4 * 4


cdef int _fwd_cv3(const float* x, WSrc* src, const float* b, float* y, Geo* g,
                  int nt, Py_ssize_t ng) except -1 nogil:
    """Every image through fnn_cv3_image, in ng output-channel groups, work items (image,
    group) over nt threads; a group changes no output's sums.  src.rs == 0: src.w is the
    packed weight (_obound's groups: the slice at o0 * C * 9, blocks of 6 from o0 on);
    else the kernel reads the weight in place (fnn_cvd_run_raw, rows src.rs apart, taps
    src.cs and src.ts; _bound4's groups: no packing to follow)."""
    cdef Py_ssize_t n, it, k, o0, o1, R = fnn_cv3_rows(g.C, g.OW, g.OH), We = g.OW + 2
    cdef Py_ssize_t xsz = g.C * fnn_cv3_plane_rows(R, g.OW) * We + 64
    cdef Py_ssize_t csz = g.O * (R * We + 24) + 64
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * g.OH * g.OW, ps = g.OH * g.OW
    cdef float* xp = NULL
    cdef float* ct = NULL
    cdef int failed = 0
    with nogil, parallel(num_threads=nt):
        xp = <float*>fnn_alloc(xsz, sizeof(float))
        ct = <float*>fnn_alloc(csz, sizeof(float))
        if xp == NULL or ct == NULL:
            fnn_flag_set(&failed)
        for it in prange(g.N * ng, schedule="dynamic", chunksize=1):
            if xp != NULL and ct != NULL:
                n = it // ng
                k = it % ng
                if src.rs:
                    o0 = _bound4(g.O, ng, k)
                    o1 = _bound4(g.O, ng, k + 1)
                    fnn_cv3_image(x + n * xs, src.w + o0 * src.rs, src.rs, src.cs, src.ts,
                                  NULL if b == NULL else b + o0, y + n * ys + o0 * ps, g.C,
                                  g.H, g.W, o1 - o0, g.OH, g.OW, g.pt, g.pl, xp, ct)
                else:
                    o0 = _obound(g.O, ng, k)
                    o1 = _obound(g.O, ng, k + 1)
                    fnn_cv3_image(x + n * xs, src.w + o0 * g.C * 9, 0, 0, 0,
                                  NULL if b == NULL else b + o0, y + n * ys + o0 * ps, g.C,
                                  g.H, g.W, o1 - o0, g.OH, g.OW, g.pt, g.pl, xp, ct)
        free(xp)
        free(ct)
    if failed:
        _raise_nomem(xsz + csz, sizeof(float))
    return 0


cdef inline Py_ssize_t _obound(Py_ssize_t O, Py_ssize_t ng, Py_ssize_t k) noexcept nogil:
    """Start of output-channel group k of ng (k = ng: O): multiples of 12, so every group
    but the last is whole blocks of 6 and the last keeps the blocks of 6, then 4, that
    the packing of all O channels gives it."""
    if k >= ng:
        return O
    return (O * k // ng) // 12 * 12


cdef Py_ssize_t _groups(Py_ssize_t items, Py_ssize_t O, int nt, Py_ssize_t least) noexcept nogil:
    """Output-channel groups for a pass over ``items`` independent work items (images, or
    image chunks): 1 when the items alone keep nt threads busy, else enough for nt work
    items, each group >= least channels.  Callers cut groups where an output's sums do not
    change, so the result is the same for any count."""
    cdef Py_ssize_t ng
    if items >= nt or O < 2 * least:
        return 1
    ng = (nt + items - 1) // items
    if ng > O // least:
        ng = O // least
    return ng if ng > 1 else 1


cdef inline Py_ssize_t _ogroups(Py_ssize_t N, Py_ssize_t O, int nt) noexcept nogil:
    """The direct and Winograd forwards' groups per image: >= 24 channels."""
    return _groups(N, O, nt, 24)


cdef int _wgrad_cv3(const float* x, const float* gy, float* part, Py_ssize_t nch, Py_ssize_t per,
                    Geo* g, int nt) except -1 nogil:
    """d_weight of the direct 3x3 kernel: chunk ch sums images [ch*per, ...) in vector
    lanes (image order), reduced into part[ch]."""
    cdef Py_ssize_t ch, n, n1, R = fnn_cv3_rows(g.C, g.OW, g.OH), We = g.OW + 2
    cdef Py_ssize_t xsz = g.C * fnn_cv3_plane_rows(R, g.OW) * We + 64
    cdef Py_ssize_t dsz = g.O * (R * We + 8) + 64, asz = g.O * g.C * 72
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * g.OH * g.OW
    cdef float* xp = NULL
    cdef float* dyp = NULL
    cdef float* acc = NULL
    cdef int failed = 0
    with nogil, parallel(num_threads=nt):
        xp = <float*>fnn_alloc(xsz, sizeof(float))
        dyp = <float*>fnn_alloc(dsz, sizeof(float))
        acc = <float*>fnn_alloc(asz, sizeof(float))
        if xp == NULL or dyp == NULL or acc == NULL:
            fnn_flag_set(&failed)
        for ch in prange(nch, schedule="dynamic", chunksize=1):
            if xp == NULL or dyp == NULL or acc == NULL:
                continue
            memset(acc, 0, asz * sizeof(float))
            n1 = ch * per + per
            if n1 > g.N:
                n1 = g.N
            for n in range(ch * per, n1):
                fnn_cv3_wgrad_image(x + n * xs, gy + n * ys, acc, g.C, g.H, g.W, g.O, g.OH, g.OW,
                                    g.pt, g.pl, xp, dyp)
            fnn_cv3_wgrad_reduce(acc, part + ch * g.O * g.C * 9, g.C, g.O)
        free(xp)
        free(dyp)
        free(acc)
    if failed:
        _raise_nomem(xsz + dsz + asz, sizeof(float))
    return 0


# ---------------------------------------------------------------- Winograd F(2x2, 3x3)
_WINOGRAD = True    # the 3x3 stride-1 forward (and d_input) on Winograd; tests compare both
# the padded image a thread keeps (C x PH x We floats): larger images take the direct kernel
cdef Py_ssize_t _WG_PLANE_MAX = 1 << 24


def _set_wg_plane_max(Py_ssize_t n):
    """Tests: the Winograd path's padded-image size limit (elements); returns the previous one."""
    global _WG_PLANE_MAX
    old = _WG_PLANE_MAX
    _WG_PLANE_MAX = n
    return old


def _winograd_built():
    """Whether this build runs the 3x3 forward (and d_input) on Winograd (AVX2 and AVX-512
    builds)."""
    return FNN_HAVE_WG != 0


def _avx512_direct_built():
    """Whether this build has the AVX-512 builds' direct kernels: the tap-list conv2d for
    other stride-1 kernels, the direct d_weight (fnn_cvw_run) and Winograd's d_weight."""
    return FNN_HAVE_CVW != 0


cdef bint _wg_ok(Geo* g):
    """Winograd F(2x2, 3x3) for a _cv3_ok geometry: AVX2 and AVX-512 builds (FNN_HAVE_WG),
    the padded image within _WG_PLANE_MAX."""
    cdef Py_ssize_t th, tw, We, PH, ldv
    if not (_WINOGRAD and FNN_HAVE_WG != 0 and _cv3_ok(g)):
        return False
    fnn_wg_dims(g.OH, g.OW, &th, &tw, &We, &PH, &ldv)
    return g.C * PH * We <= _WG_PLANE_MAX


cdef bint _wg_fwd_ok(Geo* g):
    """Winograd for the forward (and d_input): _wg_ok and an output plane of >= 64
    positions.  At 7 x 7 the 2 x 2 tiles cover 8 x 8 (77% used) and the per-call weight
    transform weighs more: the direct 3x3 kernel is faster there (one thread, 512 -> 512
    channels: 1 image 4.7 vs 6.5 ms, 16 images 34.8 vs 36.5 ms)."""
    return _wg_ok(g) and g.OH * g.OW >= 64




cdef inline void _wg_zero_tails(float* A, Py_ssize_t rows, Py_ssize_t ldv,
                                Py_ssize_t T) noexcept nogil:
    """Zero lanes [z, ldv) of rows rows of ldv floats, z = the first chunk's tile count
    (min(T, FNN_WG_TB)) rounded down to 16.  The Winograd kernels read whole vectors, past
    a chunk's last tile too, and drop those lanes: the lanes no chunk writes are kept
    finite.  Lanes below z are written before they are read.  (Zeroing all of V and M
    was ~5% of a one-image 256-channel 14 x 14 forward.)"""
    fnn_zero_tails(A, rows, ldv, (T if T < FNN_WG_TB else FNN_WG_TB) // 16 * 16)


cdef inline Py_ssize_t _wg_ubase(Py_ssize_t o0, Py_ssize_t C, Py_ssize_t k) noexcept nogil:
    """Where group k (from output channel o0) starts in U: each group's 16 matrices are
    fnn_wg_ustride(O_k, C) floats apart, 16 * (O_k * C + 16) floats in all."""
    return 16 * (o0 * C + 16 * k)


cdef inline Py_ssize_t _wg_blocks(Py_ssize_t O) noexcept nogil:
    cdef Py_ssize_t o6 = fnn_cv3_o6(O)
    return o6 // 6 + (O - o6) // 4


cdef void _wg_pack_blocks(WSrc* src, float* U, Py_ssize_t O, Py_ssize_t C, Py_ssize_t b0,
                          Py_ssize_t b1, float* S) noexcept nogil:
    """Blocks [b0, b1) of U[k] = the (O, C) matrix of (G w G^T)[., ., k // 4, k % 4] packed
    for the tap-list kernel (blocks of 6 output channels, then 4, each block (C, rows)),
    S: 54 * C floats of scratch (fnn_wg_pack_block)."""
    cdef Py_ssize_t o6 = fnn_cv3_o6(O), nb6 = o6 // 6, blk, o0
    for blk in range(b0, b1):
        o0 = blk * 6 if blk < nb6 else o6 + (blk - nb6) * 4
        fnn_wg_pack_block(src.w + o0 * src.rs, src.rs, src.cs, src.flip, C,
                          6 if blk < nb6 else 4, S, U + o0 * C, fnn_wg_ustride(O, C))


cdef int _wg_pack_run(WSrc* src, float* U, Py_ssize_t O, Py_ssize_t C, int nt) except -1 nogil:
    """_wg_pack_blocks over nt threads, one block per work item."""
    cdef Py_ssize_t nb = _wg_blocks(O), blk
    cdef float* S = NULL
    cdef int failed = 0
    with nogil, parallel(num_threads=nt):
        S = <float*>fnn_alloc(54 * C, sizeof(float))
        if S == NULL:
            fnn_flag_set(&failed)
        for blk in prange(nb, schedule="static"):
            if S != NULL:
                _wg_pack_blocks(src, U, O, C, blk, blk + 1, S)
        free(S)
    if failed:
        _raise_nomem(54 * C, sizeof(float))
    return 0


cdef int _fwd_wg(const float* x, WSrc* src, float* U, const float* b, const float* zeros,
                 float* y, Geo* g, int nt, Py_ssize_t ng, bint pack) except -1 nogil:
    """Every image through fnn_wg_image, in ng output-channel groups (_bound4; group k's
    weights packed on their own at U + _wg_ubase(o0, C, k)): work items (image, group)
    over nt threads.  pack (one image): each work item first packs its group's weights from src
    (one parallel region, and the group's U is in the cache of the thread that uses it);
    else U is packed already.  An output element's sums do not depend on its group, so
    neither does the result."""
    cdef Py_ssize_t n, th, tw, We, PH, ldv, it, k, o0, o1
    fnn_wg_dims(g.OH, g.OW, &th, &tw, &We, &PH, &ldv)
    cdef Py_ssize_t xsz = g.C * PH * We + 64, vsz = 16 * g.C * ldv + 64
    cdef Py_ssize_t msz = 16 * g.O * ldv + 64, ssz = 54 * g.C if pack else 1
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * g.OH * g.OW, ps = g.OH * g.OW
    cdef float* xp = NULL
    cdef float* V = NULL
    cdef float* M = NULL
    cdef float* S = NULL
    cdef WSrc gs
    cdef int failed = 0
    with nogil, parallel(num_threads=nt):
        xp = <float*>fnn_alloc(xsz, sizeof(float))
        V = <float*>fnn_alloc(vsz, sizeof(float))
        M = <float*>fnn_alloc(msz, sizeof(float))
        S = <float*>fnn_alloc(ssz, sizeof(float))
        if xp == NULL or V == NULL or M == NULL or S == NULL:
            fnn_flag_set(&failed)
        else:
            _wg_zero_tails(V, 16 * g.C, ldv, th * tw)
            _wg_zero_tails(M, 16 * g.O, ldv, th * tw)
        for it in prange(g.N * ng, schedule="dynamic", chunksize=1):
            if xp != NULL and V != NULL and M != NULL and S != NULL:
                n = it // ng
                k = it % ng
                o0 = _bound4(g.O, ng, k)
                o1 = _bound4(g.O, ng, k + 1)
                if pack:
                    gs = src[0]
                    gs.w = src.w + o0 * src.rs
                    _wg_pack_blocks(&gs, U + _wg_ubase(o0, g.C, k), o1 - o0, g.C, 0,
                                    _wg_blocks(o1 - o0), S)
                fnn_wg_image(x + n * xs, U + _wg_ubase(o0, g.C, k), b + o0,
                             y + n * ys + o0 * ps, g.C, g.H, g.W, o1 - o0, g.OH, g.OW, g.pt,
                             g.pl, xp, V, M, zeros)
        free(xp)
        free(V)
        free(M)
        free(S)
    if failed:
        _raise_nomem(xsz + vsz + msz + ssz, sizeof(float))
    return 0


cdef _wg_fwd_call(cnp.ndarray x, WSrc* src, void* pb, cnp.ndarray y, Geo* g, int nt_all):
    """The Winograd forward of a _wg_fwd_ok geometry, weights from src (per call: the
    weight may have changed since the last; a C loop, ~1 ns a weight -- NumPy's float64
    matmuls and transposes took 28 ms at 256 x 256 channels).  Fewer images than threads:
    output-channel groups (_ogroups), and one image packs each group's weights in the work
    item that uses them."""
    cdef Py_ssize_t ng = _ogroups(g.N, g.O, nt_all), k, o0, o1
    cdef int team = <int>(g.N * ng if g.N * ng < nt_all else nt_all)
    cdef bint pack = g.N == 1 and ng > 1
    cdef cnp.ndarray U = np.empty(_wg_ubase(g.O, g.C, ng), dtype=np.float32)
    cdef cnp.ndarray zeros = np.zeros(g.O, dtype=np.float32)
    cdef float* pu = <float*>_data(U, _wg_ubase(g.O, g.C, ng), F32)
    cdef const float* pz = <const float*>_data(zeros, g.O, F32)
    cdef const float* px = <const float*>_data(x, _xsize(g), F32)
    cdef float* py = <float*>_data(y, _ysize(g), F32)
    cdef int nt = _threads_for(g.O * g.C * 16, 1 << 16)
    cdef WSrc gs
    with nogil:
        if not pack:
            for k in range(ng):     # group k: its own 16 (O_k, C) matrices at _wg_ubase
                o0 = _bound4(g.O, ng, k)
                o1 = _bound4(g.O, ng, k + 1)
                gs = src[0]
                gs.w = src.w + o0 * src.rs
                _wg_pack_run(&gs, pu + _wg_ubase(o0, g.C, k), o1 - o0, g.C, nt)
        _fwd_wg(px, src, pu, <const float*>pb if pb != NULL else pz, pz, py, g, team, ng, pack)


cdef bint _wg_wgrad_ok(Geo* g, Py_ssize_t nch):
    """d_weight on the Winograd transforms (fnn_wg_wgrad_image, AVX-512 builds): a _wg_ok geometry with
    input channels of 4 and output channels of 16 (fnn_cvw_run's blocks), the 16 x C x O
    partials of the nch chunks within 64 MiB."""
    return (FNN_HAVE_CVW != 0 and _wg_fwd_ok(g) and g.C % 4 == 0 and g.O % 16 == 0
            and nch * 16 * g.C * g.O * 4 <= (64 << 20))


cdef int _wgrad_wg(const float* x, const float* gy, float* part, Py_ssize_t nch, Py_ssize_t per,
                   Geo* g, int nt, Py_ssize_t ng, float* dw) except -1 nogil:
    """Chunk ch sums dU over images [ch*per, ...) (image order) into part[ch] (16 x C x O,
    each work item zeroes its own share first), in ng output-channel groups (_wbound):
    group k's dU is its own (16, C, O_k) at part[ch] + 16 * C * o0, one work item per
    (chunk, group).  A dU element's sum over the tiles does not depend on its group.  dw
    (one chunk only; else NULL and the caller unpacks the summed partials): each work item
    then writes its group's G^T dU G into dw (O, C, 3, 3) while its dU is in cache."""
    cdef Py_ssize_t ch, n, n1, th, tw, We, PH, ldv, it, k, o0, o1
    fnn_wg_dims(g.OH, g.OW, &th, &tw, &We, &PH, &ldv)
    cdef Py_ssize_t xsz = g.C * PH * We + 64, vsz = 16 * g.C * ldv + 64
    cdef Py_ssize_t dsz = 16 * g.O * ldv + 64, usz = 16 * g.C * g.O
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * g.OH * g.OW, ps = g.OH * g.OW
    cdef float* xp = NULL
    cdef float* V = NULL
    cdef float* D = NULL
    cdef float* Dt = NULL
    cdef float* R = NULL
    cdef Py_ssize_t jb, rsz = 9 * 64 + 32 * 64 if dw != NULL else 1
    cdef int failed = 0
    with nogil, parallel(num_threads=nt):
        xp = <float*>fnn_alloc(xsz, sizeof(float))
        V = <float*>fnn_alloc(vsz, sizeof(float))
        D = <float*>fnn_alloc(dsz, sizeof(float))
        Dt = <float*>fnn_alloc(dsz, sizeof(float))
        R = <float*>fnn_alloc(rsz, sizeof(float))   # fnn_wg_unpack_rows' D, then L
        if xp == NULL or V == NULL or D == NULL or Dt == NULL or R == NULL:
            fnn_flag_set(&failed)
        else:   # lanes past a chunk's last tile are transformed and never summed
            _wg_zero_tails(V, 16 * g.C, ldv, th * tw)
            _wg_zero_tails(D, 16 * g.O, ldv, th * tw)
        for it in prange(nch * ng, schedule="dynamic", chunksize=1):
            if xp == NULL or V == NULL or D == NULL or Dt == NULL or R == NULL:
                continue
            ch = it // ng
            k = it % ng
            o0 = _wbound(g.O, ng, k)
            o1 = _wbound(g.O, ng, k + 1)
            n1 = ch * per + per
            if n1 > g.N:
                n1 = g.N
            memset(part + ch * usz + 16 * g.C * o0, 0, 16 * g.C * (o1 - o0) * sizeof(float))
            for n in range(ch * per, n1):
                fnn_wg_wgrad_image(x + n * xs, gy + n * ys + o0 * ps,
                                   part + ch * usz + 16 * g.C * o0, g.C, g.H, g.W, o1 - o0,
                                   g.OH, g.OW, g.pt, g.pl, xp, V, D, Dt)
            if dw != NULL:
                for jb in range(0, o1 - o0, 64):
                    fnn_wg_unpack_rows(part + 16 * g.C * o0, 1, usz, g.C, o1 - o0, jb,
                                       o1 - o0 if jb + 64 > o1 - o0 else jb + 64, R,
                                       <double*>(R + 9 * 64), dw + o0 * g.C * 9)
        free(xp)
        free(V)
        free(D)
        free(Dt)
        free(R)
    if failed:
        _raise_nomem(xsz + vsz + 2 * dsz + rsz, sizeof(float))
    return 0


cdef inline Py_ssize_t _wbound(Py_ssize_t O, Py_ssize_t ng, Py_ssize_t k) noexcept nogil:
    """Start of the Winograd d_weight's output-channel group k of ng (k = ng: O):
    multiples of 16 (fnn_cvw_run's column blocks)."""
    if k >= ng:
        return O
    return (O * k // ng) // 16 * 16


# Winograd d_weight partials (16 * C * O floats) of this many bytes or more: one image
# chunk (_grads).  Per image chunk the partial was read and written once per image and
# summed across the chunks afterwards; past the L2 that traffic was a quarter of the
# backward (4 x 256 x 14 x 14 -> 256: unpack 11%, zeroing 3.5%).
cdef Py_ssize_t _WG_ONE_CHUNK = 2 << 20


cdef Py_ssize_t _wg_l2_groups(Py_ssize_t C, Py_ssize_t O, int nt) noexcept nogil:
    """Output-channel groups of the one-chunk Winograd d_weight: at least the threads, and
    enough that a group's partial (16 * C * O_k floats) is within 1 MiB; each group >= 16
    channels (_wbound)."""
    cdef Py_ssize_t ng = (16 * C * O * 4 + (1 << 20) - 1) >> 20
    if ng < nt:
        ng = nt
    if ng > O // 16:
        ng = O // 16
    return ng if ng > 1 else 1


cdef inline Py_ssize_t _wgroups(Py_ssize_t nch, Py_ssize_t O, int nt) noexcept nogil:
    """The Winograd d_weight's groups per image chunk: >= 32 channels."""
    return _groups(nch, O, nt, 32)


cdef int _wg_unpack_run(const float* part, Py_ssize_t nch, Py_ssize_t ps, float* dw,
                        Py_ssize_t O, Py_ssize_t C, int nt) except -1 nogil:
    """dw = G^T dU G, dU the sum of the nch chunks' partials, output channels in blocks of
    64 per work item (fnn_wg_unpack_rows)."""
    cdef Py_ssize_t nb = (O + 63) // 64, blk
    cdef float* D = NULL
    cdef int failed = 0
    with nogil, parallel(num_threads=nt):
        # D: 9 x 64 floats, then L: 16 x 64 doubles
        D = <float*>fnn_alloc(9 * 64 + 32 * 64, sizeof(float))
        if D == NULL:
            fnn_flag_set(&failed)
        for blk in prange(nb, schedule="static"):
            if D != NULL:
                fnn_wg_unpack_rows(part, nch, ps, C, O, blk * 64,
                                   O if blk * 64 + 64 > O else blk * 64 + 64, D,
                                   <double*>(D + 9 * 64), dw)
        free(D)
    if failed:
        _raise_nomem(9 * 64 + 32 * 64, sizeof(float))
    return 0


cdef cnp.ndarray _unpack_wg_grad(cnp.ndarray part, Py_ssize_t O, Py_ssize_t C, Py_ssize_t ng):
    """dw (O, C, 3, 3) float32 = G^T dU G, dU the chunks' float32 partials part (nch, 16 * C
    * O) summed in double in chunk order, each laid out in ng output-channel groups
    (_wbound) of (16, C, O_k): _wg_unpack_run per group (a C loop; NumPy's float64 matmuls
    took ~100 ms at 512 x 512 channels, and the float64 sum of the partials a copy of
    twice their size)."""
    cdef cnp.ndarray dw = np.empty((O, C, 3, 3), dtype=np.float32)
    cdef Py_ssize_t nch = part.shape[0], ps = 16 * C * O
    cdef const float* pu = <const float*>_data(part, nch * ps, F32)
    cdef float* pd = <float*>_data(dw, O * C * 9, F32)
    cdef int nt = _threads_for(O * C * 16, 1 << 16)
    cdef Py_ssize_t k, o0, o1
    with nogil:
        for k in range(ng):
            o0 = _wbound(O, ng, k)
            o1 = _wbound(O, ng, k + 1)
            _wg_unpack_run(pu + 16 * C * o0, nch, ps, pd + o0 * C * 9, o1 - o0, C, nt)
    return dw


# ---------------------------------------------------------------- direct kernels, any taps
cdef struct DPlan:
    Py_ssize_t N, Cs, Hs, Ws        # source images: channels, rows, columns (x, or dy)
    Py_ssize_t top, left, PR, We    # zero-padded planes: x row u - top at row u (fnn_cv3_pad_tile)
    Py_ssize_t Ct, cg               # channels the kernel reads (Cs); per tap-offset group
    Py_ssize_t Cx                   # planes in xp (Ct; the phase planes: sh*sw*C, their
                                    # phase in the tap offsets)
    Py_ssize_t O, OH, OW, Sh, Sw    # output channels and plane; interleave steps of the runs
    Py_ssize_t nrun, ldc            # runs per image; row stride of the run's result
    Py_ssize_t slack                # rows past the last plane the last blocks may read
    bint yout                       # one run of one row, OW % 16 == 0: results straight into y
    Geo* pg                         # not NULL: xp holds the phase planes of this conv2d's input
    const float* zeros              # d.O zeros (the bias of a yout plan without one)
    const float* wr                 # not NULL: one run whose weights the kernel reads in
    Py_ssize_t ars, acs             # place (fnn_cvd_run_raw: rows ars, channels acs apart,
                                    # taps 1 apart; AVX-512 builds), not from the packing


# per run (one row of the plan's run table): packed-weight offset, tap-offset offset, taps,
# result rows Q and columns Rc, output phase (a, b): y[o, a + Sh*q, b + Sw*r]
DEF _RUN = 8


cdef inline void _direct_run(const float* ap, const Py_ssize_t* toff, const Py_ssize_t* rr,
                             const float* bias, const float* xp, float* ct,
                             DPlan* d) noexcept nogil:
    """One run of the plan into ct (bias, then its taps' sums)."""
    cdef Py_ssize_t nt = rr[2], Q = rr[3], Rc = rr[4], o, k
    cdef Py_ssize_t npos = (Q * d.We + 15) // 16 * 16
    cdef float bo
    if nt > 0 and d.wr != NULL:
        fnn_cvd_run_raw(d.wr, d.ars, d.acs, 1, xp, d.PR * d.We, toff + rr[1], nt, d.Ct, d.O,
                        ct, d.ldc, (Q - 1) * d.We + Rc, bias if bias != NULL else d.zeros)
    elif nt > 0:   # positions up to the last row's last column (the rest is dropped)
        fnn_cvd_run_init(ap + rr[0], xp, d.PR * d.We, toff + rr[1], nt, d.cg, d.Ct, d.O, ct,
                         d.ldc, (Q - 1) * d.We + Rc, bias if bias != NULL else d.zeros)
    else:
        for o in range(d.O):
            bo = bias[o] if bias != NULL else 0
            for k in range(npos):
                ct[o * d.ldc + k] = bo


cdef void _direct_planes(const float* src, float* xp, DPlan* d, Py_ssize_t c0,
                         Py_ssize_t c1) noexcept nogil:
    """Channels [c0, c1) of one image's zero-padded (or phase) planes, as the kernel reads
    them."""
    if d.pg != NULL:
        _phase_planes_c(src, xp, d.pg, True, c0, c1)
    else:
        fnn_cv3_pad_tile(src + c0 * d.Hs * d.Ws, xp + c0 * d.PR * d.We, c1 - c0, d.Hs, d.Ws,
                         d.We, d.PR, -d.top, d.left)


cdef void _direct_image(const float* src, const float* ap, const Py_ssize_t* toff,
                        const Py_ssize_t* runs, const float* bias, float* y, float* xp,
                        float* ct, DPlan* d, bint built=False) noexcept nogil:
    cdef Py_ssize_t plane = d.PR * d.We, r, o, q, c, nt, Q, Rc, a, b
    cdef const Py_ssize_t* rr
    cdef const Py_ssize_t* r2
    cdef float* ct2 = ct + d.O * d.ldc    # the second run of a column-phase pair (Sw == 2)
    cdef float* yr
    cdef const float* cr
    if not built:
        _direct_planes(src, xp, d, 0, d.Cs)
    if d.yout:   # y's rows are whole 16-position blocks: the tiles sum into y, on the bias
        fnn_cvd_run_init(ap + runs[0], xp, plane, toff + runs[1], runs[2], d.cg, d.Ct, d.O,
                         y, d.OW, d.OW, bias if bias != NULL else d.zeros)
        return
    r = 0
    while r < d.nrun:
        rr = runs + r * _RUN
        nt = rr[2]; Q = rr[3]; Rc = rr[4]; a = rr[5]; b = rr[6]
        _direct_run(ap, toff, rr, bias, xp, ct, d)
        r2 = rr + _RUN
        if (d.Sw == 2 and r + 1 < d.nrun and b == 0 and r2[5] == a and r2[6] == 1
                and r2[3] == Q):
            # column phases 0 and 1 of the same rows: interleaved into whole y rows
            # (one pass over y instead of two stride-2 ones)
            _direct_run(ap, toff, r2, bias, xp, ct2, d)
            for o in range(d.O):
                for q in range(Q):
                    fnn_cv_interleave2(ct + o * d.ldc + q * d.We, ct2 + o * d.ldc + q * d.We,
                                       y + (o * d.OH + a + d.Sh * q) * d.OW, Rc, r2[4])
            r += 2
            continue
        r += 1
        for o in range(d.O):
            for q in range(Q):
                yr = y + (o * d.OH + a + d.Sh * q) * d.OW + b
                cr = ct + o * d.ldc + q * d.We
                if d.Sw == 1:
                    memcpy(yr, cr, Rc * sizeof(float))
                else:
                    for c in range(Rc):
                        yr[c * d.Sw] = cr[c]


cdef int _direct(const float* src, const float* ap, const Py_ssize_t* toff,
                 const Py_ssize_t* runs, const float* bias, float* y, DPlan* d,
                 int nt, Py_ssize_t ng) except -1 nogil:
    """Every image through the plan, in ng output-channel groups (_obound): work items
    (image, group) over nt threads.  Group k runs the plan with O_k output channels, each
    run's packed weights from its block at o0 (the packing's blocks of 6 from o0 on, as
    for all O), the bias, result and y from o0.  Each image's result depends on nothing
    else and an output's sums not on its group: the bits do not depend on the thread
    count.  With groups (fewer images than threads), the images' planes are built once,
    shared, each image's channels split over the threads, before the groups run."""
    cdef Py_ssize_t n, it, k, o0, o1, r, xsz = (d.Cx * d.PR + d.slack) * d.We + 64
    cdef Py_ssize_t csz = (2 if d.Sw == 2 else 1) * d.O * d.ldc + 64   # _direct_image
    cdef Py_ssize_t ss = d.Cs * d.Hs * d.Ws, ys = d.O * d.OH * d.OW, ps = d.OH * d.OW
    cdef Py_ssize_t cch = (d.Cs + nt - 1) // nt, c0, c1
    cdef float* xall = NULL
    cdef float* xp = NULL
    cdef float* xi = NULL
    cdef float* ct = NULL
    cdef DPlan* dg = NULL
    cdef Py_ssize_t* rg = NULL
    cdef int failed = 0
    if ng > 1 and d.N * xsz <= _DIRECT_SHARED_MAX:
        xall = <float*>fnn_alloc(d.N * xsz, sizeof(float))
        if xall != NULL:    # each image's over-read past its last plane (as below)
            for n in range(d.N):
                memset(xall + n * xsz + d.Cx * d.PR * d.We, 0, (d.slack * d.We + 64) * sizeof(float))
    with nogil, parallel(num_threads=nt):
        xp = NULL if xall != NULL else <float*>fnn_alloc(xsz, sizeof(float))
        ct = <float*>fnn_alloc(csz, sizeof(float))
        dg = <DPlan*>fnn_alloc(1, sizeof(DPlan))
        rg = <Py_ssize_t*>fnn_alloc(d.nrun * _RUN, sizeof(Py_ssize_t))
        if (xp == NULL and xall == NULL) or ct == NULL or dg == NULL or rg == NULL:
            fnn_flag_set(&failed)
        elif xp != NULL:   # the over-read past the last plane: finite values, never used
            memset(xp + d.Cx * d.PR * d.We, 0, (d.slack * d.We + 64) * sizeof(float))
        if xall != NULL:
            for it in prange(d.N * nt, schedule="static"):
                n = it // nt
                c0 = (it % nt) * cch
                c1 = c0 + cch if c0 + cch < d.Cs else d.Cs
                if c0 < c1:
                    _direct_planes(src + n * ss, xall + n * xsz, d, c0, c1)
        for it in prange(d.N * ng, schedule="dynamic", chunksize=1):
            if (xp != NULL or xall != NULL) and ct != NULL and dg != NULL and rg != NULL:
                n = it // ng
                k = it % ng
                xi = xall + n * xsz if xall != NULL else xp
                if ng == 1:
                    _direct_image(src + n * ss, ap, toff, runs, bias, y + n * ys, xp, ct, d)
                else:
                    o0 = _obound(d.O, ng, k)
                    o1 = _obound(d.O, ng, k + 1)
                    memcpy(dg, d, sizeof(DPlan))
                    dg.O = o1 - o0
                    if d.wr != NULL:
                        dg.wr = d.wr + o0 * d.ars
                    memcpy(rg, runs, d.nrun * _RUN * sizeof(Py_ssize_t))
                    for r in range(d.nrun):     # run r's blocks from o0: o0 * Ct * taps on
                        rg[r * _RUN] = runs[r * _RUN] + o0 * d.Ct * runs[r * _RUN + 2]
                    _direct_image(src + n * ss, ap, toff, rg, NULL if bias == NULL else bias + o0,
                                  y + n * ys + o0 * ps, xi, ct, dg, xall != NULL)
        free(xp)
        free(ct)
        free(dg)
        free(rg)
    free(xall)
    if failed:
        _raise_nomem(xsz + csz, sizeof(float))
    return 0


# _direct shares the images' planes among the output-channel groups up to this many
# elements (64 MiB of float32); past it each thread builds its own
cdef Py_ssize_t _DIRECT_SHARED_MAX = 1 << 24


cdef cnp.ndarray _pack_direct(object wd):
    """wd (O, C, taps) -> the direct kernel's packing: blocks of 6 output channels (then 4),
    block [o0, o0 + m) holding wd[o0 + r, c, t] at (c, t, r); a C loop, one block per work
    item (NumPy's transposes and concatenation took ~2 ms a call at 512 x 512 x 3 x 3)."""
    cdef cnp.ndarray w = np.ascontiguousarray(wd, dtype=np.float32)
    cdef Py_ssize_t O = w.shape[0], C = w.shape[1], T = w.shape[2]
    cdef Py_ssize_t o6 = fnn_cv3_o6(O), nb6 = o6 // 6, nb = o6 // 6 + (O - o6) // 4, blk, o0
    cdef cnp.ndarray out = np.empty(O * C * T, dtype=np.float32)
    cdef const float* pw = <const float*>_data(w, O * C * T, F32)
    cdef float* po = <float*>_data(out, O * C * T, F32)
    cdef int nt = _threads_for(O * C * T, 1 << 17)
    with nogil:
        for blk in prange(nb, schedule="static", num_threads=nt):
            o0 = blk * 6 if blk < nb6 else o6 + (blk - nb6) * 4
            fnn_pack_block_oct(pw + o0 * C * T, C, T, 6 if blk < nb6 else 4, po + o0 * C * T)
    return out


cdef cnp.ndarray _pack_taps(object weight, Py_ssize_t rs, Py_ssize_t cs, list tof,
                           Py_ssize_t R, Py_ssize_t C):
    """The direct kernel's packing (_pack_direct) of R kernel rows x C channels x the taps
    tof, read from a float32 weight by strides (fnn_pack_block_taps): no NumPy gathers or
    transposes of the weight (~3 ms a call at 512 x 256 x 3 x 3)."""
    cdef cnp.ndarray w = np.ascontiguousarray(weight, dtype=np.float32)
    cdef cnp.ndarray t = np.asarray(tof, dtype=np.intp)
    cdef Py_ssize_t T = len(tof), o6 = fnn_cv3_o6(R), nb6 = o6 // 6, nb = o6 // 6 + (R - o6) // 4
    cdef Py_ssize_t blk, o0
    cdef cnp.ndarray out = np.empty(R * C * T, dtype=np.float32)
    cdef const float* pw = <const float*>_data(w, cnp.PyArray_SIZE(w), F32)
    cdef const Py_ssize_t* pt = <const Py_ssize_t*>_data(t, T, INTP)
    cdef float* po = <float*>_data(out, R * C * T, F32)
    cdef int nt = _threads_for(R * C * T, 1 << 17)
    with nogil:
        for blk in prange(nb, schedule="static", num_threads=nt):
            o0 = blk * 6 if blk < nb6 else o6 + (blk - nb6) * 4
            fnn_pack_block_taps(pw + o0 * rs, rs, cs, pt, C, T, 6 if blk < nb6 else 4,
                                po + o0 * C * T)
    return out


cdef inline Py_ssize_t _slack_rows(Py_ssize_t reach, Py_ssize_t We) noexcept nogil:
    """Rows past the last result row that the last 16-position block may read (its reach:
    the largest tap offset within a row, plus the block).  Only the last plane needs them
    (a block's over-read lands in the next plane, in results that are dropped): they are
    allocated past the planes (_direct), not in each."""
    return (16 + reach + We - 1) // We + 1


cdef _run_direct(cnp.ndarray src, object ap, object toff, object runs, void* pbias,
                 cnp.ndarray y, DPlan* d, Py_ssize_t flops):
    cdef cnp.ndarray a = ap, t = np.ascontiguousarray(toff, dtype=np.intp)
    cdef cnp.ndarray r = np.ascontiguousarray(runs, dtype=np.intp)
    cdef int nt_all = _threads_for(flops, 1 << 18)
    # fewer images than threads (a batch of one): output-channel groups too
    cdef Py_ssize_t ng = _ogroups(d.N, d.O, nt_all)
    cdef int nt = <int>(d.N * ng if d.N * ng < nt_all else nt_all)
    cdef const float* ps = <const float*>_data(src, d.N * d.Cs * d.Hs * d.Ws, F32)
    cdef const float* pa = <const float*>_data(a, cnp.PyArray_SIZE(a), F32)
    cdef const Py_ssize_t* pt = <const Py_ssize_t*>_data(t, cnp.PyArray_SIZE(t), INTP)
    cdef const Py_ssize_t* pr = <const Py_ssize_t*>_data(r, d.nrun * _RUN, INTP)
    cdef float* py = <float*>_data(y, d.N * d.O * d.OH * d.OW, F32)
    with nogil:
        _direct(ps, pa, pt, pr, <const float*>pbias, py, d, nt, ng)


cdef tuple _phase_taps(Py_ssize_t k, Py_ssize_t d, Py_ssize_t p, Py_ssize_t s):
    """conv2d tap i reads input row oh*s - p + i*d; with e = i*d - p = s*m + a (0 <= a < s),
    output row oh of the transposed convolution is s*(ih + m) + a.  -> per phase a the
    list of (i, m)."""
    cdef Py_ssize_t i, e, a
    cdef list ph = [[] for _ in range(s)]
    for i in range(k):
        e = i * d - p
        a = ((e % s) + s) % s     # C division in this module: floor by hand
        ph[a].append((i, (e - a) // s))
    return tuple(ph)


cdef bint _tconv_direct_ok(Geo* g):
    """conv_transpose2d's forward through the direct kernel: float32 (the caller checks),
    AVX2 builds, groups 1, its output channels (conv2d's input channels) a multiple of 4.
    Its d_input stays on the fused im2col pass (_tbwd), which shares each column tile
    with d_weight: measured faster than this kernel plus a d_weight-only pass."""
    return (_DIRECT and FNN_HAVE_CV3 != 0 and g.G == 1 and g.C >= 4 and g.O >= 1
            and g.C % 4 == 0)


cdef _tconv_fwd_direct(cnp.ndarray x, cnp.ndarray weight, void* pb, cnp.ndarray y, Geo* g,
                       tuple padding):
    """y = conv_transpose2d(x) (x: conv2d's output shape, y: its input shape, g: that
    conv2d): output phase (a, b) -- rows a + sh*q, columns b + sw*r -- is a stride-1
    correlation of x with the taps of that phase, tap (i, j) reading x[q - m_i, r - m_j]."""
    cdef DPlan d
    cdef Py_ssize_t a, b, PT, PL, maxQ, maxR, mlo, nlo
    rows = _phase_taps(g.kh, g.dh, padding[0], g.sh)
    cols = _phase_taps(g.kw, g.dw, padding[2], g.sw)
    Q = [len(range(a, g.H, g.sh)) for a in range(g.sh)]
    Rc = [len(range(b, g.W, g.sw)) for b in range(g.sw)]
    ms = [m for r in rows for (i, m) in r] or [0]
    ns = [m for c in cols for (j, m) in c] or [0]
    PT = max(0, max(ms)); PL = max(0, max(ns)); mlo = min(ms); nlo = min(ns)
    maxQ = max(Q); maxR = max(Rc)
    d.N = g.N; d.Cs = g.O; d.Hs = g.OH; d.Ws = g.OW
    d.We = max(maxR + PL - nlo, 1)
    d.top = PT; d.left = PL
    d.PR = max(maxQ + PT - mlo, 1)
    d.Ct = g.O; d.cg = g.O; d.Cx = d.Ct
    d.O = g.C; d.OH = g.H; d.OW = g.W; d.Sh = g.sh; d.Sw = g.sw
    d.ldc = maxQ * d.We + 16
    d.slack = _slack_rows(d.We, d.We)
    d.yout = False
    d.pg = NULL
    d.wr = NULL
    zeros = np.zeros(d.O, dtype=np.float32)
    d.zeros = <const float*>_data(zeros, d.O, F32)
    w = <object>weight   # (O, C, kh, kw) of the conv2d: w[o, c, i, j]; x has O channels
    runs, toff, aps = [], [], []
    apo = 0
    for a in range(g.sh):
        for b in range(g.sw):
            if Q[a] == 0 or Rc[b] == 0:
                continue
            taps = [(i, mi, j, mj) for (i, mi) in rows[a] for (j, mj) in cols[b]]
            runs.append([apo, len(toff), len(taps), Q[a], Rc[b], a, b, 0])
            for (i, mi, j, mj) in taps:
                toff.append((PT - mi) * d.We + (PL - mj))
            if taps:    # rows: the conv2d's input channels; channels: its output ones
                pk = _pack_taps(w, g.kh * g.kw, g.C * g.kh * g.kw,
                                [i * g.kw + j for (i, mi, j, mj) in taps], g.C, g.O)
                aps.append(pk)
                apo += pk.shape[0]
    d.nrun = len(runs)
    ap = np.concatenate(aps) if aps else np.zeros(1, np.float32)
    _run_direct(x, ap, toff or [0], runs, pb, y, &d, g.N * g.O * g.OH * g.OW * g.Cg * g.kh * g.kw)


# conv1d (forward, d_input, d_weight) on the direct kernels measured faster than on
# OpenBLAS's GEMMs, and slower than on the avx512 build's own float32 GEMM (fnn_sgemm.h):
# 32x256x1024 -> 256 k3, 2 threads, 3 alternating rounds: forward 38.1-41.8 -> 37.8-41.1
# ms, backward 84.4-92.4 -> 78.7-86.5 ms (torch fwd+bwd 114-123).  The avx2 build's own
# GEMM leaves those depths (768) and the d_weight's transposed A to BLAS.  So they take
# the direct kernels except where GEMMs run on the avx512 build's own kernel -- or when a
# test forces them (_set_rows_direct).
cdef bint _ROWS_DIRECT_FORCED = False


cdef inline bint _rows_direct_beats_gemm() noexcept nogil:
    return _ROWS_DIRECT_FORCED or not (_sgz_on and FNN_SGZ_TRANS_A)


def _set_rows_direct(bint forced):
    """Tests: conv1d on its direct kernels even where GEMMs run on the own float32 kernel;
    returns the previous setting."""
    global _ROWS_DIRECT_FORCED
    old = _ROWS_DIRECT_FORCED
    _ROWS_DIRECT_FORCED = forced
    return old


# the direct conv1d keeps one image's padded row (C x We) and, for rows that are not whole
# 16-position blocks, its result (O x We) per thread: up to this many elements each (64 MiB
# of float32); longer rows take the row-im2col GEMM path, whose tiles are bounded
cdef Py_ssize_t _ROW_PLANE_MAX = 1 << 24


def _set_row_plane_max(Py_ssize_t n):
    """Tests: the direct conv1d's row size limit (elements); returns the previous one."""
    global _ROW_PLANE_MAX
    old = _ROW_PLANE_MAX
    _ROW_PLANE_MAX = n
    return old


cdef bint _rows_direct_ok(Geo* g):
    """A one-row conv2d with unit strides (conv1d's (N, C, 1, L) view, and its d_input,
    the forward of the flipped weights) through the direct kernel: float32 (the caller
    checks), AVX-512 builds (FNN_HAVE_CVW: the 6 x 64 zmm tiles; the AVX2 tiles measured
    slower than OpenBLAS here), groups 1, output channels a multiple of 4, a kernel wider
    than one column.  Its input row, zero-padded, is the kernel's plane; the taps are
    column offsets j*dilation: an implicit GEMM with no im2col and no packing of the
    input."""
    cdef Py_ssize_t We = g.OW + g.dw * (g.kw - 1)
    return (_DIRECT and _rows_direct_beats_gemm() and FNN_HAVE_CVW != 0 and g.G == 1
            and g.O >= 4 and g.O % 4 == 0 and g.H == 1 and g.kh == 1 and g.OH == 1 and g.pt == 0 and g.sh == 1
            and g.sw == 1 and g.kw > 1 and g.C >= 1
            and g.C * We <= _ROW_PLANE_MAX and g.O * We <= _ROW_PLANE_MAX)


cdef _rows_fwd_direct(cnp.ndarray x, cnp.ndarray weight, void* pb, cnp.ndarray y, Geo* g):
    """y = conv2d(x) for _rows_direct_ok shapes: one run of kW taps over each image's
    zero-padded row (xp[c, u] = x[c, u - left])."""
    cdef DPlan d
    cdef Py_ssize_t reach = g.dw * (g.kw - 1)
    d.N = g.N; d.Cs = g.C; d.Hs = 1; d.Ws = g.W
    d.We = g.OW + reach
    d.top = 0; d.left = g.pl; d.PR = 1
    d.Ct = g.C; d.cg = g.C; d.Cx = d.Ct
    d.O = g.O; d.OH = 1; d.OW = g.OW; d.Sh = 1; d.Sw = 1
    d.nrun = 1
    d.yout = g.OW % 16 == 0
    d.ldc = 0 if d.yout else (d.We + 15) // 16 * 16     # yout: no result buffer
    d.slack = _slack_rows(reach, d.We)
    d.pg = NULL
    d.wr = NULL
    zeros = np.zeros(g.O, dtype=np.float32)
    d.zeros = <const float*>_data(zeros, g.O, F32)
    ap = _pack_direct((<object>weight).reshape(g.O, g.C, g.kw))
    toff = [j * g.dw for j in range(g.kw)]
    runs = [[0, 0, g.kw, 1, g.OW, 0, 0, 0]]
    _run_direct(x, ap, toff, runs, pb, y, &d, g.N * g.O * g.OW * g.C * g.kw)


cdef bint _taps_direct_ok(Geo* g):
    """Any other stride-1 conv2d (not 1x1; e.g. 5x5, dilated 3x3, 1x3 / 3x1) through the
    tap-list kernel: float32 (the caller checks), AVX-512 builds (the 6 x 64 zmm tiles),
    groups 1, output channels a multiple of 4.  One run of kH*kW taps over each image's
    zero-padded planes, tap (i, j) at offset i*dH*We + j*dW; each thread keeps one padded
    image and its result (O x OH*We), each within _ROW_PLANE_MAX elements.  A one-row conv
    (conv1d, turned down by _rows_direct_ok) goes to the GEMM paths where those run on the
    own float32 GEMM."""
    cdef Py_ssize_t We = g.OW + g.dw * (g.kw - 1), PR = g.OH + g.dh * (g.kh - 1)
    return (_DIRECT and FNN_HAVE_CVW != 0 and g.G == 1 and g.O >= 4 and g.O % 4 == 0
            and g.sh == 1 and g.sw == 1 and not _is_1x1(g) and g.C >= 1
            and not (g.H == 1 and g.kh == 1 and not _rows_direct_beats_gemm())
            and g.C * PR * We <= _ROW_PLANE_MAX and g.O * (g.OH * We + 16) <= _ROW_PLANE_MAX)


cdef _taps_fwd_direct(cnp.ndarray x, cnp.ndarray weight, void* pb, cnp.ndarray y, Geo* g):
    """y = conv2d(x) for _taps_direct_ok shapes (xp[c, a, b] = x[c, a - pt, b - pl])."""
    cdef DPlan d
    cdef Py_ssize_t reach = g.dw * (g.kw - 1)
    d.N = g.N; d.Cs = g.C; d.Hs = g.H; d.Ws = g.W
    d.We = g.OW + reach
    d.top = g.pt; d.left = g.pl; d.PR = g.OH + g.dh * (g.kh - 1)
    d.Ct = g.C; d.cg = g.C; d.Cx = d.Ct
    d.O = g.O; d.OH = g.OH; d.OW = g.OW; d.Sh = 1; d.Sw = 1
    d.nrun = 1
    d.yout = False
    d.ldc = (g.OH * d.We + 15) // 16 * 16
    d.slack = _slack_rows(reach, d.We)
    d.pg = NULL
    d.wr = NULL
    zeros = np.zeros(g.O, dtype=np.float32)
    d.zeros = <const float*>_data(zeros, g.O, F32)
    ap = _pack_direct((<object>weight).reshape(g.O, g.C, g.kh * g.kw))
    toff = [i * g.dh * d.We + j * g.dw for i in range(g.kh) for j in range(g.kw)]
    runs = [[0, 0, g.kh * g.kw, g.OH, g.OW, 0, 0, 0]]
    _run_direct(x, ap, toff, runs, pb, y, &d, g.N * g.O * g.OH * g.OW * g.C * g.kh * g.kw)


cdef bint _strided_direct_ok(Geo* g):
    """A strided conv2d's forward on the direct kernel over its input's phase planes
    (_tdx_plan says where that applies): a kernel of more than one tap (a 1x1 kernel at
    stride 2 reads one phase of four: a strided GEMM)."""
    return (g.sh > 1 or g.sw > 1) and g.kh * g.kw > 1


_CIG = True     # strided forwards as implicit GEMMs where they apply; tests compare routes
_SDX = True     # the strided d_input on column tiles of the own GEMM (_sdx_ok)
_SWG_GEMM = True  # and its d_weight (_swgrad_gemm)
_WGEMM = True     # stride-1 d_weight of wide layers as GEMMs too (_wgemm_first)
_SWG_TR = True    # that d_weight as im2col x dy^T where im2col has more rows than dy
_CIG_S1 = True  # stride-1 ones too (not 3x3: Winograd or the direct 3x3 kernel take those)


cdef bint _cig_ok(Geo* g):
    """A strided conv2d's forward as an implicit GEMM on the own float32 kernel
    (fnn_conv_gemm.h: AVX-512 builds, GEMMs on fnn_sgemm.h): groups 1, a kernel of more
    than one tap, at least 12 output channels (one 12-row tile), the input's phase planes
    within the limit.  Its B panels are packed straight from the phase planes; the
    direct kernel (_tdx_plan) reads them in place, but reloads each 64-position tile's
    planes from L2 for every 6 output channels: 190-250 GFLOP/s on 2 cores where the
    GEMM kernel's 12 x 32 tiles run at 300+."""
    cdef Py_ssize_t mlo, nlo, Hp, Wp
    if not (_CIG and FNN_HAVE_CIG != 0 and _sgz_on and g.direct and g.G == 1
            and (g.sh > 1 or g.sw > 1 or _CIG_S1) and g.kh * g.kw > 1 and g.O >= 12
            and g.N * g.O * g.OH * g.OW > 0):
        return False
    _phase_dims(g, &mlo, &nlo, &Hp, &Wp)
    return g.C * g.sh * g.sw * Hp * Wp <= _TBWD_PLANES_MAX


cdef int _cig_run(const float* x, const float* w, const float* bias, float* y,
                  const Py_ssize_t* koff, Geo* g, Py_ssize_t Hp, Py_ssize_t Wp,
                  int nt) except -1 nogil:
    """Every image of _cig_fwd: with at least as many images as threads, one image per
    work item (its phase planes in the thread's buffer); with fewer, the images' planes
    built once (channels split over the threads), then column ranges of each image
    (multiples of 32 positions) over the threads."""
    cdef Py_ssize_t P = g.OH * g.OW, K = g.C * g.kh * g.kw, xs = g.C * g.H * g.W
    cdef Py_ssize_t ys = g.O * P, psz = g.C * g.sh * g.sw * Hp * Wp + 64
    cdef Py_ssize_t parts = 1, cch = (g.C + nt - 1) // nt, it, n, k, j0, j1, c0, c1
    cdef float* xall = NULL
    cdef float* buf = NULL
    cdef float* pl
    cdef int failed = 0
    if g.N < nt:
        parts = (nt + g.N - 1) // g.N
        if parts > P // 64:
            parts = P // 64 if P >= 128 else 1
    if parts > 1 and g.N * psz <= _DIRECT_SHARED_MAX:
        xall = <float*>fnn_alloc(g.N * psz, sizeof(float))
    if xall == NULL:
        parts = 1
    with nogil, parallel(num_threads=nt):
        buf = NULL if xall != NULL else <float*>fnn_alloc(psz, sizeof(float))
        if xall == NULL and buf == NULL:
            fnn_flag_set(&failed)
        if xall != NULL:
            for it in prange(g.N * nt, schedule="static"):
                n = it // nt
                c0 = (it % nt) * cch
                c1 = c0 + cch if c0 + cch < g.C else g.C
                if c0 < c1:
                    _phase_planes_c(x + n * xs, xall + n * psz, g, True, c0, c1)
        for it in prange(g.N * parts, schedule="dynamic", chunksize=1):
            if xall == NULL and buf == NULL:
                continue
            n = it // parts
            k = it % parts
            j0 = (P * k // parts) // 32 * 32
            j1 = P if k == parts - 1 else (P * (k + 1) // parts) // 32 * 32
            if xall != NULL:
                pl = xall + n * psz
            else:
                pl = buf
                _phase_planes(x + n * xs, buf, g, True)
            if j0 < j1 and fnn_cig_image(w, g.O, K, pl, koff, Wp, g.OW, j0, j1, y + n * ys,
                                         P, bias) != 0:
                fnn_flag_set(&failed)
        free(buf)
    free(xall)
    if failed:
        _raise_nomem(psz, sizeof(float))
    return 0


cdef _cig_fwd(cnp.ndarray x, cnp.ndarray weight, void* pb, cnp.ndarray y, Geo* g):
    """y = conv2d(x) for _cig_ok shapes: step k = c * taps + t of the implicit GEMM reads
    channel c's planes at tap t's offset (its phase plane's, as _tdx_plan's flat taps)."""
    cdef Py_ssize_t Hp, Wp
    cdef cnp.ndarray koff = _plane_steps(g, &Hp, &Wp)
    cdef const Py_ssize_t* pk = <const Py_ssize_t*>_data(koff, g.C * g.kh * g.kw, INTP)
    cdef const float* px = <const float*>_data(x, _xsize(g), F32)
    cdef const float* pw = <const float*>_data(weight, _wsize(g), F32)
    cdef float* py = <float*>_data(y, _ysize(g), F32)
    cdef int nt = _threads_for(g.N * g.O * g.OH * g.OW * g.C * g.kh * g.kw, 1 << 18)
    with nogil:
        _cig_run(px, pw, <const float*>pb, py, pk, g, Hp, Wp, nt)


cdef cnp.ndarray _plane_steps(Geo* g, Py_ssize_t* Hp, Py_ssize_t* Wp):
    """The implicit GEMM's step offsets: step k = c * taps + t reads channel c's planes
    (*Hp x *Wp each, _phase_dims) at tap t's offset (_phase_tap_offsets)."""
    cdef Py_ssize_t mlo, nlo, c, t, T = g.kh * g.kw
    _phase_dims(g, &mlo, &nlo, Hp, Wp)
    cdef cnp.ndarray koff = np.empty(g.C * T, dtype=np.intp)
    cdef Py_ssize_t* pk = <Py_ssize_t*>_data(koff, g.C * T, INTP)
    _phase_tap_offsets(g, pk)
    for c in range(1, g.C):
        for t in range(T):
            pk[c * T + t] = pk[t] + c * Hp[0] * Wp[0]
    return koff


# ---------------------------------------------------------------- small planes, images side by side
_IMGS = True    # small planes' forwards and d_weights over several images a GEMM


cdef inline Py_ssize_t _imgs_per(Geo* g) noexcept nogil:
    """Images side by side in one GEMM of a small plane (_imgs_fwd_ok, _wgrad_gemm): enough
    for 256 columns (positions), their im2col within 8 MiB, at most N; a function of the
    shapes only."""
    cdef Py_ssize_t P = g.OH * g.OW, K = g.C * g.kh * g.kw, n, cap
    if P <= 0 or K <= 0:
        return 1
    n = (256 + P - 1) // P
    cap = (8 << 20) // (K * P * 4)
    if n > cap:
        n = cap
    if n > g.N:
        n = g.N
    return n if n > 1 else 1


cdef bint _imgs_fwd_ok(Geo* g):
    """A conv2d forward with a small output plane (under 64 positions: ResNet's 7 x 7, where
    Winograd does not run) over several images as GEMMs on the own float32 kernel (AVX-512
    builds): W (O x C*kh*kw, read in place) times the images' positions side by side (an
    implicit GEMM, packed by gathers from their padded planes), so each GEMM has >= 256
    columns where the batch has them.  One image at a time, a 7 x 7
    plane fills 2 panels of 32 columns 77%; the direct 3x3 kernel ran 512 -> 512 channels
    at 220 GFLOP/s on 2 cores (8 images: 8.5 ms, torch 6.1).  Groups 1, a kernel of more
    than one tap (or a 1x1 reading no padding: its planes are the input itself, at any
    stride -- ResNet-50's downsampling 1x1s), >= 2 images, >= 64
    output channels, a depth (C*kh*kw) of >= 512 and a weight of >= 128 Ki floats (4 x 64
    -> 64 channels 3x3 at 7 x 7 ran 0.09 ms direct, 0.13 so).  ResNet-50's last 1x1s
    (2048 -> 512, 512 -> 2048 at 7 x 7) took 1.1-1.2x torch's time forward one image a
    GEMM, and their backward 1.6-1.9x (d_input packed all of W^T for each image)."""
    return (_IMGS and FNN_HAVE_CIG != 0 and _sgz_on and g.direct and g.G == 1
            and (g.kh * g.kw > 1 or _is_plain_1x1(g)) and g.OH * g.OW < 64 and g.N >= 2
            and g.O >= 64 and g.C * g.kh * g.kw >= 512
            and g.O * g.C * g.kh * g.kw >= (1 << 17) and g.N * g.OH * g.OW > 0)


cdef int _imgs_fwd(const float* x, const float* w, const float* b, float* y,
                   const Py_ssize_t* koff, Geo* g, Py_ssize_t Hp, Py_ssize_t Wp,
                   bint one, int nt) except -1 nogil:
    """y = conv2d(x) for _imgs_fwd_ok shapes: work items (group of _imgs_per images, group
    of output channels [o0, o1) where there are fewer image groups than threads) over nt
    threads; each builds its images' padded planes, runs W[o0:o1] times their positions
    side by side as one implicit GEMM (fnn_cig_multi) into tmp, and adds the bias on the
    way into y.  one: a plain 1x1 (_is_plain_1x1), its planes the images themselves (koff
    c * H * W, rows sh * W apart, columns sw).  An output sums its K products in the GEMM's
    fixed k blocks: the same bits whatever the groups."""
    cdef Py_ssize_t P = g.OH * g.OW, K = g.C * g.kh * g.kw, xs = g.C * g.H * g.W
    cdef Py_ssize_t ys = g.O * P, nI = _imgs_per(g), nq = (g.N + nI - 1) // nI
    cdef Py_ssize_t psz = xs if one else g.C * g.sh * g.sw * Hp * Wp
    cdef Py_ssize_t RS = g.sh * g.W if one else Wp, CS = g.sw if one else 1
    cdef Py_ssize_t ng, it, q, k, n, n0, n1, o, o0, o1, p, T
    # near-equal image groups, a multiple of the threads where the images allow (6 + 2
    # images on 2 threads ran 8 images slower than the direct 3x3 kernel)
    if nq % nt and (nq + nt - 1) // nt * nt <= g.N:
        nq = (nq + nt - 1) // nt * nt
    if g.N * P <= 512 and g.O >= 48:
        # all images in one GEMM of <= 16 panels, the threads on output-channel groups:
        # fewer part-empty panels (8 images of 7 x 7: 13 panels 94% full against 2 x 7
        # 88% full), and each thread reads only its rows of the weight
        nq = 1
    nI = (g.N + nq - 1) // nq
    ng = _groups(nq, g.O, nt, 24)
    cdef Py_ssize_t bsz = (0 if one else nI * psz) + g.O * nI * P + 64
    cdef const float* pl
    cdef float* buf = NULL
    cdef float* tmp
    cdef float* src
    cdef float* dst
    cdef float bo
    cdef int failed = 0
    with nogil, parallel(num_threads=nt if nt < nq * ng else <int>(nq * ng)):
        buf = <float*>fnn_alloc(bsz, sizeof(float))
        if buf == NULL:
            fnn_flag_set(&failed)
        for it in prange(nq * ng, schedule="dynamic", chunksize=1):
            if buf == NULL:
                continue
            q = it // ng
            k = it % ng
            n0 = g.N * q // nq
            n1 = g.N * (q + 1) // nq
            T = (n1 - n0) * P
            o0 = _obound(g.O, ng, k)
            o1 = _obound(g.O, ng, k + 1)
            if one:
                tmp = buf
                pl = x + n0 * xs
            else:
                tmp = buf + nI * psz
                pl = buf
                for n in range(n0, n1):
                    _phase_planes(x + n * xs, buf + (n - n0) * psz, g, True)
            if fnn_cig_multi(w + o0 * K, o1 - o0, K, pl, koff, P, psz, RS, CS, g.OW, T, tmp,
                             T) != 0:
                fnn_flag_set(&failed)
                continue
            for n in range(n0, n1):
                for o in range(o0, o1):
                    src = tmp + (o - o0) * T + (n - n0) * P
                    dst = y + n * ys + o * P
                    bo = b[o] if b != NULL else 0
                    for p in range(P):
                        dst[p] = src[p] + bo
        free(buf)
    if failed:
        _raise_nomem(bsz, sizeof(float))
    return 0


cdef _imgs_fwd_call(cnp.ndarray x, cnp.ndarray weight, void* pb, cnp.ndarray y, Geo* g,
                    int nt):
    """_imgs_fwd with its step offsets (_plane_steps, as _cig_fwd's; a plain 1x1's: the
    channels' planes in the image)."""
    cdef Py_ssize_t Hp = 0, Wp = 0
    cdef bint one = _is_plain_1x1(g)
    cdef cnp.ndarray koff = (np.arange(g.C, dtype=np.intp) * (g.H * g.W) if one
                             else _plane_steps(g, &Hp, &Wp))
    cdef const Py_ssize_t* pk = <const Py_ssize_t*>_data(koff, g.C * g.kh * g.kw, INTP)
    cdef const float* px = <const float*>_data(x, _xsize(g), F32)
    cdef const float* pw = <const float*>_data(weight, _wsize(g), F32)
    cdef float* py = <float*>_data(y, _ysize(g), F32)
    with nogil:
        _imgs_fwd(px, pw, <const float*>pb, py, pk, g, Hp, Wp, one, nt)


# ---------------------------------------------------------------- small planes on Winograd
_WGS = True     # 3x3 stride-1 small planes of several images on Winograd as 16 GEMMs
# the image groups' tiles (columns of the 16 GEMMs): V and M hold 16 x C (O) x this many
cdef Py_ssize_t _WGS_TILES = 256


cdef Py_ssize_t _WGS_FWD_CH = 64
cdef Py_ssize_t _WGS_FWD_TILES = 64
cdef Py_ssize_t _WGS_DW_TILES = 16


def _set_wgs_limits(Py_ssize_t fwd_ch, Py_ssize_t fwd_tiles, Py_ssize_t dw_tiles):
    """Tests and tuning: the small-plane Winograd's least channels (each way) and tiles for
    the forward (and d_input), and least tiles for d_weight; returns the previous three."""
    global _WGS_FWD_CH, _WGS_FWD_TILES, _WGS_DW_TILES
    old = (_WGS_FWD_CH, _WGS_FWD_TILES, _WGS_DW_TILES)
    _WGS_FWD_CH, _WGS_FWD_TILES, _WGS_DW_TILES = fwd_ch, fwd_tiles, dw_tiles
    return old


cdef inline Py_ssize_t _wgs_tiles(Geo* g) noexcept nogil:
    """The 2 x 2 output tiles of all images."""
    return g.N * ((g.OH + 1) // 2) * ((g.OW + 1) // 2)


cdef bint _wgs_geo(Geo* g):
    """A 3x3 stride-1 conv2d (groups 1, dilation 1) with a small output plane (under 64
    positions, at least 3 x 3), float32 on the own kernel (AVX-512 builds): the
    geometries the small-plane Winograd (_wgs_run, _wgs_wgrad_run) takes.  It runs F(2x2,
    3x3) as 16 GEMMs over several images' 2 x 2 output tiles side by side; at 7 x 7 the
    tiles cover 8 x 8: 256 products a channel pair for 441 direct ones.  Its transformed
    weight (16 x O x C floats, 1.8x the weight) is held within 64 MiB: up to 1024 x 1024
    channels."""
    return (_WGS and FNN_HAVE_CIG != 0 and _sgz_on and g.direct and g.G == 1
            and g.kh == 3 and g.kw == 3 and g.sh == 1 and g.sw == 1 and g.dh == 1
            and g.dw == 1 and g.OH * g.OW < 64 and g.OH >= 3 and g.OW >= 3 and g.N > 0
            and 16 * 4 * g.O * g.C <= (64 << 20))


cdef bint _wgs_ok(Geo* g):
    """The forward (or a d_input as one) on the small-plane Winograd: >= 64 channels each
    way, >= 64 tiles, the tiles >= 3/4 used (7 x 7, 6 x 6, 4 x 4 outputs; not 5 x 5 or 3
    x 3: no faster there), and either all used (even sides) or >= 8192 tile-channels
    (tiles x the fewer channels).  Elsewhere the direct kernels are as fast or faster: the
    per-call weight transform (16 x O x C floats written) and the tiles' transforms weigh
    more than the products saved.  2 threads, Winograd / direct, forward (d_input): 8 x 512
    x 7 x 7 0.78-0.84 (0.83-0.85), 16 x 96 x 7 x 7 0.76 (0.71), 8 x 64 x 7 x 7 0.98
    (0.94), 8 x 64 x 6 x 6 0.64, 16 x 64 x 4 x 4 0.55; 4 x 64 x 7 x 7 1.15, 8 x 32 x 7 x
    7 1.29."""
    cdef Py_ssize_t th = (g.OH + 1) // 2, tw = (g.OW + 1) // 2
    cdef Py_ssize_t ch = g.C if g.C < g.O else g.O
    return (_wgs_geo(g) and ch >= _WGS_FWD_CH and _wgs_tiles(g) >= _WGS_FWD_TILES
            and 4 * g.OH * g.OW >= 3 * 4 * th * tw
            and (g.OH * g.OW == 4 * th * tw or _wgs_tiles(g) * ch >= 8192))


cdef bint _wgs_dw_ok(Geo* g):
    """d_weight on the small-plane Winograd (_wgs_wgrad): >= 16 tiles, and a weight of at
    most 4096 floats a tile (its 16 x O x C transform costs once a call).  2 threads,
    Winograd / the other kernels: 4 x 128 x 7 x 7 0.16, 8 x 512 x 7 x 7 0.71, 4 x 512 x 7
    x 7 0.87, 32 x 256 x 3 x 3 0.94; 2 x 512 x 7 x 7 (32 tiles) 1.05, one image 1.17."""
    return (_wgs_geo(g) and _wgs_tiles(g) >= _WGS_DW_TILES
            and _wgs_tiles(g) * 4096 >= g.O * g.C)


cdef void _wgs_tiles_in(const float* x, Geo* g, Py_ssize_t n0, Py_ssize_t n1,
                        const int32_t* ix, float* V, int nt) noexcept nogil:
    """V[k] (C x T, T the tiles of images [n0, n1)) of the small-plane Winograd: each input
    plane's tiles' B^T d B (fnn_wgs_input), work items channel-major (each row of V[k]
    written in order)."""
    cdef Py_ssize_t nti = ((g.OH + 1) // 2) * ((g.OW + 1) // 2), npad = (nti + 15) // 16 * 16
    cdef Py_ssize_t m = n1 - n0, T = m * nti, it, c, n
    for it in prange(m * g.C, schedule="static", num_threads=nt):
        c = it // m
        n = it - c * m
        fnn_wgs_input(x + (n0 + n) * g.C * g.H * g.W + c * g.H * g.W, g.H * g.W, ix, nti, npad,
                      V + c * T + n * nti, g.C * T)


cdef inline Py_ssize_t _wgs_edge(Py_ssize_t R, Py_ssize_t nrg, Py_ssize_t j) noexcept nogil:
    """Where row group j of nrg over R rows starts: on the GEMM's 12-row tiles (j = nrg:
    R)."""
    return R if j >= nrg else R * j // nrg // 12 * 12


cdef int _wgs_run(const float* x, const float* w, bint dx, const float* b, float* y, Geo* g,
                  float* U, float* V, float* M, const int32_t* ix, const int32_t* iy,
                  const int32_t* io, Py_ssize_t nI, int nt) except -1 nogil:
    """y = conv2d(x) of a _wgs_ok geometry: U[k] = G f G^T for each filter f of the (O, C,
    3, 3) weight w (the 16 matrices O x C), then per group of nI images their tiles' V[k]
    (C x T; the patches' offsets in ix), the 16 products M[k] = U[k] V[k] (work items: k
    and a row group) and A^T m A into y (+ b; the outputs' offsets in iy, io).  dx: y is a
    d_input, x a dy: the conv's rows are the weight's input channels and its filters the
    weight's flipped, U[k] the transpose of the flipped filters' (fnn_wgs_weight_t).  Each
    output is the same sums whatever the threads."""
    cdef Py_ssize_t nti = ((g.OH + 1) // 2) * ((g.OW + 1) // 2), npad = (nti + 15) // 16 * 16
    cdef Py_ssize_t R = g.O, Cn = g.C, ps = g.OH * g.OW
    cdef Py_ssize_t Rw = Cn if dx else R, Cw = R if dx else Cn
    cdef Py_ssize_t nrb = ((R if dx else Rw) + 15) // 16, n0, n1, T, it, k, r0, r1, n, o
    cdef Py_ssize_t nrg = 1 if nt <= 2 else (8 * nt + 15) // 16
    cdef int failed = 0
    for it in prange(nrb, schedule="static", num_threads=nt):
        r0 = it * 16
        if dx:      # U's rows: the weight's input channels
            fnn_wgs_weight_t(w, Rw, Cw, r0, R if r0 + 16 > R else r0 + 16, U)
        else:
            r1 = Rw if r0 + 16 > Rw else r0 + 16
            fnn_wgs_weight(w, Cw * 9, 9, 0, R * Cn, Cn, Cn, r0, r1, U)
    n0 = 0
    while n0 < g.N:
        n1 = n0 + nI if n0 + nI < g.N else g.N
        T = (n1 - n0) * nti
        _wgs_tiles_in(x, g, n0, n1, ix, V, nt)
        for it in prange(16 * nrg, schedule="dynamic", chunksize=1, num_threads=nt):
            k = it // nrg
            r0 = _wgs_edge(R, nrg, it - k * nrg)
            r1 = _wgs_edge(R, nrg, it - k * nrg + 1)
            if r1 <= r0:
                continue
            if fnn_sgemm_z(0, 0, r1 - r0, T, Cn, 1, U + k * R * Cn + r0 * Cn, Cn,
                           V + k * Cn * T, T, 0, M + k * R * T + r0 * T, T, NULL) != 0:
                fnn_flag_set(&failed)
        if failed:
            _raise_nomem(fnn_sgz_buffer_floats(), sizeof(float))
        for it in prange((n1 - n0) * R, schedule="static", num_threads=nt):
            o = it // (n1 - n0)     # channel-major: each row of M[k] read in order
            n = it - o * (n1 - n0)
            fnn_wgs_output(M + o * T + n * nti, R * T, iy, io, nti, npad, ps,
                           b[o] if b != NULL else 0, y + (n0 + n) * R * ps + o * ps)
        n0 = n1
    return 0


cdef Py_ssize_t _wgs_images(Geo* g) noexcept nogil:
    """Images a group of the small-plane Winograd (at most _WGS_TILES tiles, at least 1)."""
    cdef Py_ssize_t nti = ((g.OH + 1) // 2) * ((g.OW + 1) // 2)
    cdef Py_ssize_t nI = _WGS_TILES // nti if _WGS_TILES >= nti else 1
    return nI if nI < g.N else g.N


cdef tuple _wgs_tables(Geo* g):
    """The tiles' offset tables (fnn_wgs_tables): ix (16 rows), iy (4 rows), io (64),
    int32."""
    cdef Py_ssize_t nti = ((g.OH + 1) // 2) * ((g.OW + 1) // 2), npad = (nti + 15) // 16 * 16
    cdef cnp.ndarray ix = np.empty((16, npad), dtype=np.int32)
    cdef cnp.ndarray iy = np.empty((4, npad), dtype=np.int32)
    cdef cnp.ndarray io = np.empty(64, dtype=np.int32)
    fnn_wgs_tables(g.H, g.W, g.OH, g.OW, g.pt, g.pl, npad, <int32_t*>_data(ix, 16 * npad, I32),
                   <int32_t*>_data(iy, 4 * npad, I32), <int32_t*>_data(io, 64, I32))
    return ix, iy, io


cdef _wgs_call(cnp.ndarray x, cnp.ndarray weight, bint dx, void* pb, cnp.ndarray y, Geo* g,
               int nt):
    """_wgs_run with its buffers -- U (16 x O x C), V and M for image groups of
    _wgs_images -- and offset tables (_wgs_tables)."""
    cdef Py_ssize_t nti = ((g.OH + 1) // 2) * ((g.OW + 1) // 2), nI = _wgs_images(g)
    cdef cnp.ndarray ix, iy, io
    ix, iy, io = _wgs_tables(g)
    cdef cnp.ndarray U = np.empty(16 * g.O * g.C, dtype=np.float32)
    cdef cnp.ndarray V = np.empty(16 * g.C * nI * nti, dtype=np.float32)
    cdef cnp.ndarray M = np.empty(16 * g.O * nI * nti, dtype=np.float32)
    cdef const float* px = <const float*>_data(x, _xsize(g), F32)
    cdef float* py = <float*>_data(y, _ysize(g), F32)
    cdef float* pu = <float*>_data(U, 16 * g.O * g.C, F32)
    cdef float* pv = <float*>_data(V, 16 * g.C * nI * nti, F32)
    cdef float* pm = <float*>_data(M, 16 * g.O * nI * nti, F32)
    cdef const float* pw = <const float*>_data(weight, 9 * g.O * g.C, F32)
    cdef const int32_t* pix = <const int32_t*>_data(ix, cnp.PyArray_SIZE(ix), I32)
    cdef const int32_t* piy = <const int32_t*>_data(iy, cnp.PyArray_SIZE(iy), I32)
    cdef const int32_t* pio = <const int32_t*>_data(io, 64, I32)
    with nogil:
        _wgs_run(px, pw, dx, <const float*>pb, py, g, pu, pv, pm, pix, piy, pio, nI, nt)


cdef int _wgs_wgrad_run(const float* x, const float* dy, float* dw, Geo* g, float* dU, float* V,
                        float* D, const int32_t* ix, const int32_t* iy, Py_ssize_t nI,
                        int nt) except -1 nogil:
    """d_weight of a _wgs_dw_ok geometry on the small-plane Winograd's transforms: per group of
    nI images the tiles' V[k] (C x T, the input's as the forward's) and D[k] (O x T: A dY
    A^T of dy's tiles), dU[k] (+)= D[k] V[k]^T (16 products; work items: k and a row
    group; the groups added in image order), then dw = G^T dU G.  Each output is the same
    sums whatever the threads."""
    cdef Py_ssize_t nti = ((g.OH + 1) // 2) * ((g.OW + 1) // 2), npad = (nti + 15) // 16 * 16
    cdef Py_ssize_t O = g.O, Cn = g.C, ps = g.OH * g.OW
    cdef Py_ssize_t n0, n1, T, it, k, r0, r1, n
    cdef Py_ssize_t nrg = 1 if nt <= 2 else (8 * nt + 15) // 16
    cdef int failed = 0
    n0 = 0
    while n0 < g.N:
        n1 = n0 + nI if n0 + nI < g.N else g.N
        T = (n1 - n0) * nti
        _wgs_tiles_in(x, g, n0, n1, ix, V, nt)
        for it in prange((n1 - n0) * O, schedule="static", num_threads=nt):
            k = it // (n1 - n0)     # channel-major: each row of D[k] written in order
            n = it - k * (n1 - n0)
            fnn_wgs_dout(dy + (n0 + n) * O * ps + k * ps, ps, iy, nti, npad,
                         D + k * T + n * nti, O * T)
        for it in prange(16 * nrg, schedule="dynamic", chunksize=1, num_threads=nt):
            k = it // nrg
            r0 = _wgs_edge(O, nrg, it - k * nrg)
            r1 = _wgs_edge(O, nrg, it - k * nrg + 1)
            if r1 > r0 and fnn_sgemm_z(0, 1, r1 - r0, Cn, T, 1, D + k * O * T + r0 * T, T,
                                       V + k * Cn * T, T, 0 if n0 == 0 else 1,
                                       dU + k * O * Cn + r0 * Cn, Cn, NULL) != 0:
                fnn_flag_set(&failed)
        if failed:
            _raise_nomem(fnn_sgz_buffer_floats(), sizeof(float))
        n0 = n1
    for it in prange((O + 15) // 16, schedule="static", num_threads=nt):
        fnn_wgs_wgrad_out(dU, O * Cn, Cn, it * 16, O if it * 16 + 16 > O else it * 16 + 16, dw)
    return 0


cdef cnp.ndarray _wgs_wgrad(cnp.ndarray x, cnp.ndarray dy, Geo* g, int nt):
    """_wgs_wgrad_run with its buffers -> d_weight (O, C, 3, 3) float32."""
    cdef Py_ssize_t nti = ((g.OH + 1) // 2) * ((g.OW + 1) // 2), nI = _wgs_images(g)
    cdef cnp.ndarray ix, iy, io
    ix, iy, io = _wgs_tables(g)
    cdef cnp.ndarray dw = np.empty((g.O, g.C, 3, 3), dtype=np.float32)
    cdef cnp.ndarray dU = np.empty(16 * g.O * g.C, dtype=np.float32)
    cdef cnp.ndarray V = np.empty(16 * g.C * nI * nti, dtype=np.float32)
    cdef cnp.ndarray D = np.empty(16 * g.O * nI * nti, dtype=np.float32)
    cdef const float* px = <const float*>_data(x, _xsize(g), F32)
    cdef const float* pdy = <const float*>_data(dy, _ysize(g), F32)
    cdef float* pdw = <float*>_data(dw, 9 * g.O * g.C, F32)
    cdef float* pu = <float*>_data(dU, 16 * g.O * g.C, F32)
    cdef float* pv = <float*>_data(V, 16 * g.C * nI * nti, F32)
    cdef float* pd = <float*>_data(D, 16 * g.O * nI * nti, F32)
    cdef const int32_t* pix = <const int32_t*>_data(ix, cnp.PyArray_SIZE(ix), I32)
    cdef const int32_t* piy = <const int32_t*>_data(iy, cnp.PyArray_SIZE(iy), I32)
    with nogil:
        _wgs_wgrad_run(px, pdy, pdw, g, pu, pv, pd, pix, piy, nI, nt)
    return dw


cdef int _fwd_gemm(const real* x, const real* w, const real* wr, const real* b, real* y,
                   Geo* g, int nt, int nt_all) except -1 nogil:
    cdef Py_ssize_t n, csize = g.C * g.kh * g.kw * _tile_rows(g) * g.OW
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * g.OH * g.OW
    cdef Py_ssize_t We = g.OW + g.dw * (g.kw - 1), Rr = _row_tile(g), R = _tile_rows(g)
    cdef Py_ssize_t ntile = (g.OH + R - 1) // R, it, r0
    cdef bint rows = _rowcol_ok(g) and not _is_1x1(g)
    cdef real* col = NULL
    cdef int failed = 0, gfail = 0
    if rows:
        csize = g.C * g.kh * Rr * We + g.O * Rr * We
    if (real is float and _sgz_on and not rows and not _is_1x1(g) and g.N < nt_all
            and ntile > 1 and g.O // g.G >= 24 and g.Cg * g.kh * g.kw >= 16):
        # fewer images than threads: the images' row tiles (im2col and GEMM each) over the
        # threads -- a tile's outputs are computed as in the image loop, so the same bits.
        # Only where the products run on the own float32 kernel (BLAS would thread inside)
        with parallel(num_threads=nt_all):
            col = <real*>fnn_alloc(csize * sizeof(real) + 64, 1)
            if col == NULL:
                fnn_flag_set(&failed)
            for it in prange(g.N * ntile, schedule="dynamic", chunksize=1):
                if col == NULL:
                    continue
                n = it // ntile
                r0 = (it % ntile) * R
                if _fwd_tile(x + n * xs, w, b, y + n * ys, col, g, r0,
                             r0 + R if r0 + R < g.OH else g.OH):
                    fnn_flag_set(&gfail)
            free(col)
        if failed:
            _raise_nomem(csize * sizeof(real) + 64, 1)
        if gfail:
            _raise_gemm_nomem()
        return 0
    if nt > 1:
        with parallel(num_threads=nt):
            col = <real*>fnn_alloc(csize * sizeof(real) + 64, 1)
            if col == NULL:
                fnn_flag_set(&failed)
            for n in prange(g.N, schedule="dynamic", chunksize=1):
                if col == NULL:
                    continue
                if rows:
                    if _fwd_image_rows(x + n * xs, wr, b, y + n * ys, col, g):
                        fnn_flag_set(&gfail)
                elif _fwd_image(x + n * xs, w, b, y + n * ys, col, g):
                    fnn_flag_set(&gfail)
            free(col)
        if failed:
            _raise_nomem(csize * sizeof(real) + 64, 1)
    else:
        col = <real*>_alloc(csize * sizeof(real) + 64, 1)
        for n in range(g.N):
            if rows:
                gfail = _fwd_image_rows(x + n * xs, wr, b, y + n * ys, col, g)
            else:
                gfail = _fwd_image(x + n * xs, w, b, y + n * ys, col, g)
            if gfail:
                break
        free(col)
    if gfail:
        _raise_gemm_nomem()
    return 0


cdef int _bwd_chunk(const real* x, const real* w, const real* gy, real* dx, real* dw_part,
                    Py_ssize_t n0, Py_ssize_t n1, real* col, Geo* g) noexcept nogil:
    """Images [n0, n1): dx for each (unless dx is NULL), and their d_weight summed into
    dw_part (in image and tile order; unless dw_part is NULL: conv_transpose2d's forward
    needs d_input alone)."""
    cdef Py_ssize_t P = g.OH * g.OW, Og = g.O // g.G, Kg = g.Cg * g.kh * g.kw, gi, n
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * P
    cdef Py_ssize_t R = _tile_rows(g), r0, r1, T
    cdef const real* dyn
    cdef real beta
    cdef bint own = real is float and _sgz_on
    cdef int bw, bx
    for n in range(n0, n1):
        dyn = gy + n * ys
        if _is_1x1(g):
            beta = 0 if n == n0 else 1
            bw = _gemm_blocks_small(own, g.N, Og, Kg, P)
            bx = _gemm_blocks_small(own, g.N, Kg, P, Og)
            for gi in range(g.G):
                if dw_part != NULL:
                    if _gemm_cols(False, True, <int>Og, <int>Kg, <int>P, <real>1, dyn + gi * Og * P,
                                  <int>P, x + n * xs + gi * Kg * P, <int>P, beta,
                                  dw_part + gi * Og * Kg, <int>Kg, bw):
                        return -1
                if dx != NULL:
                    if _gemm_cols(True, False, <int>Kg, <int>P, <int>Og, <real>1, w + gi * Og * Kg,
                                  <int>Kg, dyn + gi * Og * P, <int>P, <real>0,
                                  dx + n * xs + gi * Kg * P, <int>P, bx):
                        return -1
            continue
        if dx != NULL:
            memset(dx + n * xs, 0, xs * sizeof(real))
        r0 = 0
        while r0 < g.OH:
            r1 = r0 + R if r0 + R < g.OH else g.OH
            T = (r1 - r0) * g.OW
            beta = 0 if (n == n0 and r0 == 0) else 1
            bw = _gemm_blocks_small(own, g.N, Og, Kg, T)
            bx = _gemm_blocks_small(own, g.N, Kg, T, Og)
            if dw_part != NULL:
                _im2col(x + n * xs, col, g, r0, r1)
                for gi in range(g.G):
                    if _gemm_cols(False, True, <int>Og, <int>Kg, <int>T, <real>1,
                                  dyn + gi * Og * P + r0 * g.OW, <int>P, col + gi * Kg * T, <int>T,
                                  beta, dw_part + gi * Og * Kg, <int>Kg, bw):
                        return -1
            if dx == NULL:
                r0 = r1
                continue
            for gi in range(g.G):
                if _gemm_cols(True, False, <int>Kg, <int>T, <int>Og, <real>1, w + gi * Og * Kg,
                              <int>Kg, dyn + gi * Og * P + r0 * g.OW, <int>P, <real>0,
                              col + gi * Kg * T, <int>T, bx):
                    return -1
            _col2im(col, dx + n * xs, g, r0, r1)
            r0 = r1
    return 0


cdef inline bint _wgrad_rows_ok(Geo* g, real* dx) noexcept nogil:
    """d_weight alone of a one-row output (conv1d's (N, C, 1, L) view) with unit column
    stride: by column tap from the padded input row, as the forward's row im2col."""
    return dx == NULL and g.OH == 1 and _rowcol_ok(g) and not _is_1x1(g)


cdef inline bint _wgrad_direct_ok(Geo* g) noexcept nogil:
    """conv1d's d_weight on the direct kernel (float32, AVX-512 builds): one kernel row,
    groups 1, input channels a multiple of 16, output channels of 4, up to 64 taps."""
    return (g.direct and _rows_direct_beats_gemm() and FNN_HAVE_CVW != 0 and g.G == 1
            and g.kh == 1 and g.C % 16 == 0 and g.O % 4 == 0 and g.kw <= 64)


cdef int _wgrad_rows_chunk(const real* x, const real* gy, real* dw_part, Py_ssize_t n0,
                           Py_ssize_t n1, real* buf, Geo* g) noexcept nogil:
    """Images [n0, n1), one output row each: for every column tap j,
    dW[:, :, :, j] += dy_n (Og x OW) @ Rt_n[:, j*dW : j*dW + OW]^T, Rt the padded input rows
    (C*kH x We) -- kW GEMMs with inner dimension OW instead of one over a kW times larger
    im2col matrix (its packing is what the time went to).  The taps are summed in
    buf's (kW, O, Cg*kH) layout (image order) and moved into dw_part's (O, Cg, kH, kW)."""
    cdef Py_ssize_t Og = g.O // g.G, Kr = g.Cg * g.kh, We = g.OW + g.dw * (g.kw - 1)
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * g.OW, n, gi, j, o, k
    cdef real* Rt = buf
    cdef real* acc = buf + g.C * g.kh * We
    cdef Py_ssize_t aoff[64]
    cdef Py_ssize_t boff[64]
    if real is float:
        if _wgrad_direct_ok(g):
            # AVX-512: the direct kernel on the transposed padded row (fnn_cvw_run)
            for j in range(g.kw):
                aoff[j] = 0
                boff[j] = j * g.dw * g.C
            memset(acc, 0, g.kw * g.O * Kr * sizeof(float))
            for n in range(n0, n1):
                fnn_cvw_transpose(x + n * xs, Rt, g.C, g.W, We, g.pl)
                fnn_cvw_run(gy + n * ys, g.OW, 0, aoff, Rt, g.C, 0, boff, g.kw, 1, g.OW,
                            g.O, g.C, acc)
            for o in range(g.O):
                for k in range(Kr):
                    for j in range(g.kw):
                        dw_part[(o * Kr + k) * g.kw + j] = acc[(j * g.O + o) * Kr + k]
            return 0
    cdef int bw = _gemm_blocks_small(real is float and _sgz_on, g.N, Og, Kr, g.OW)
    for n in range(n0, n1):
        _rowcol(x + n * xs, Rt, g, 0, 1)
        for j in range(g.kw):
            for gi in range(g.G):
                if _gemm_cols(False, True, <int>Og, <int>Kr, <int>g.OW, <real>1,
                              gy + n * ys + gi * Og * g.OW, <int>g.OW, Rt + gi * Kr * We + j * g.dw,
                              <int>We, <real>(0 if n == n0 else 1), acc + (j * g.O + gi * Og) * Kr,
                              <int>Kr, bw):
                    return -1
    for o in range(g.O):
        for k in range(Kr):
            for j in range(g.kw):
                dw_part[(o * Kr + k) * g.kw + j] = acc[(j * g.O + o) * Kr + k]
    return 0


cdef inline bint _wgrad_taps_ok(Geo* g, real* dx) noexcept nogil:
    """d_weight alone of another stride-1 conv2d (not 1x1, more than one output row) on the
    direct d_weight kernel (float32, AVX-512 builds): groups 1, input channels of 16,
    output channels of 4, up to 64 taps, the padded image within _ROW_PLANE_MAX."""
    cdef Py_ssize_t We = g.OW + g.dw * (g.kw - 1), PR = g.OH + g.dh * (g.kh - 1)
    return (dx == NULL and g.direct and FNN_HAVE_CVW != 0 and g.G == 1 and g.sh == 1
            and g.sw == 1 and not _is_1x1(g) and g.OH > 1 and g.C % 16 == 0
            and g.O % 4 == 0 and g.kh * g.kw <= 64 and g.C * PR * We <= _ROW_PLANE_MAX)


cdef inline Py_ssize_t _wgrad_taps_size(Geo* g) noexcept nogil:
    cdef Py_ssize_t We = g.OW + g.dw * (g.kw - 1), PR = g.OH + g.dh * (g.kh - 1)
    return 2 * g.C * PR * We + 64 + g.kh * g.kw * g.O * g.C


cdef void _wgrad_taps_chunk(const real* x, const real* gy, real* dw_part, Py_ssize_t n0,
                            Py_ssize_t n1, real* buf, Geo* g) noexcept nogil:
    """Images [n0, n1): _wgrad_taps_rows over all output channels."""
    if real is float:
        _wgrad_taps_rows(x, gy, dw_part, n0, n1, 0, g.O, buf, g)


cdef void _wgrad_taps_rows(const float* x, const float* gy, float* dw_part, Py_ssize_t n0,
                           Py_ssize_t n1, Py_ssize_t o0, Py_ssize_t o1, float* buf,
                           Geo* g) noexcept nogil:
    """Images [n0, n1), output channels [o0, o1): each image zero-padded (C x PR*We),
    transposed to (PR*We) x C, and fnn_cvw_run sums dy's rows o0 .. o1 (broadcast) against
    it for every tap (i, j) -- a shift by i*dH*We + j*dW positions; the taps' sums (kH*kW,
    o1 - o0, C) land in dw_part's rows [o0, o1) (O, C, kH, kW).  A weight's sum does not
    depend on the rows run with it."""
    cdef Py_ssize_t We = g.OW + g.dw * (g.kw - 1), PR = g.OH + g.dh * (g.kh - 1)
    cdef Py_ssize_t nt = g.kh * g.kw, xs = g.C * g.H * g.W, ys = g.O * g.OH * g.OW
    cdef Py_ssize_t n, i, j, o, c, P = PR * We, M = o1 - o0
    cdef Py_ssize_t aoff[64]
    cdef Py_ssize_t boff[64]
    cdef float* xp = buf
    cdef float* xt = buf + g.C * P + 32
    cdef float* acc = xt + P * g.C + 32
    for i in range(g.kh):
        for j in range(g.kw):
            aoff[i * g.kw + j] = 0
            boff[i * g.kw + j] = (i * g.dh * We + j * g.dw) * g.C
    memset(acc, 0, nt * M * g.C * sizeof(float))
    for n in range(n0, n1):
        fnn_cv3_pad_tile(x + n * xs, xp, g.C, g.H, g.W, We, PR, -g.pt, g.pl)
        fnn_cvw_transpose(xp, xt, g.C, P, P, 0)
        fnn_cvw_run(gy + n * ys + o0 * g.OH * g.OW, g.OH * g.OW, g.OW, aoff, xt, g.C,
                    We * g.C, boff, nt, g.OH, g.OW, M, g.C, acc)
    for o in range(M):
        for c in range(g.C):
            for i in range(nt):
                dw_part[((o0 + o) * g.C + c) * nt + i] = acc[(i * M + o) * g.C + c]


cdef int _wgrad_taps_groups(const float* x, const float* gy, float* dw_part, Py_ssize_t nch,
                            Py_ssize_t per, Geo* g, int nt, Py_ssize_t ng) except -1 nogil:
    """_wgrad_taps_rows with fewer image chunks than threads (a batch of one): work items
    (chunk, output-channel group), groups in multiples of 4 (_bound4; fnn_cvw_run's row
    blocks); each item pads and transposes its chunk's images itself (C x PR*We floats
    each, small beside its product)."""
    cdef Py_ssize_t csize = _wgrad_taps_size(g), wsz = g.O * g.C * g.kh * g.kw
    cdef Py_ssize_t it, ch, k, n0, n1
    cdef float* buf = NULL
    cdef int failed = 0
    with nogil, parallel(num_threads=nt):
        buf = <float*>fnn_alloc(csize * sizeof(float) + 64, 1)
        if buf == NULL:
            fnn_flag_set(&failed)
        for it in prange(nch * ng, schedule="dynamic", chunksize=1):
            if buf == NULL:
                continue
            ch = it // ng
            k = it % ng
            n0 = ch * per
            n1 = n0 + per if n0 + per < g.N else g.N
            _wgrad_taps_rows(x, gy, dw_part + ch * wsz, n0, n1, _bound4(g.O, ng, k),
                             _bound4(g.O, ng, k + 1), buf, g)
        free(buf)
    if failed:
        _raise_nomem(csize * sizeof(float) + 64, 1)
    return 0


cdef enum:
    _CH_BWD = 0        # conv2d backward: _bwd_chunk (d_input and/or d_weight)
    _CH_WROWS = 1      # conv1d's d_weight alone by column tap: _wgrad_rows_chunk
    _CH_TBWD = 2       # conv_transpose2d backward, one pass: _tbwd_chunk
    _CH_WTAPS = 3      # stride-1 conv2d's d_weight alone, direct: _wgrad_taps_chunk


cdef inline int _run_chunk(int mode, const real* x, const real* w, const real* gy, real* dx,
                           real* dw, Py_ssize_t n0, Py_ssize_t n1, real* col,
                           Geo* g) noexcept nogil:
    """-> 0, or -1 when a GEMM could not get its work buffer."""
    if mode == _CH_WROWS:
        return _wgrad_rows_chunk(x, gy, dw, n0, n1, col, g)
    elif mode == _CH_WTAPS:
        _wgrad_taps_chunk(x, gy, dw, n0, n1, col, g)
        return 0
    elif mode == _CH_TBWD:
        return _tbwd_chunk(x, w, gy, dx, dw, n0, n1, col, g)
    return _bwd_chunk(x, w, gy, dx, dw, n0, n1, col, g)


cdef int _chunked(int mode, const real* x, const real* w, const real* gy, real* dx,
                  real* dw_part, Py_ssize_t nch, Py_ssize_t per, Geo* g,
                  int nt) except -1 nogil:
    """The image-chunk driver of the GEMM backwards: chunk ch (images ch*per ..) runs
    ``mode``'s kernel into d_weight partial ch (added in chunk order by the caller), each
    thread with its own column buffer (checked allocation: MemoryError, never NULL)."""
    cdef Py_ssize_t ch, n0, n1, csize = g.C * g.kh * g.kw * _tile_rows(g) * g.OW
    cdef Py_ssize_t wsz = g.O * g.Cg * g.kh * g.kw
    cdef real* col = NULL
    cdef real* dw
    cdef int failed = 0, gfail = 0
    if mode == _CH_WROWS:
        csize = g.C * g.kh * (g.OW + g.dw * (g.kw - 1)) + g.kw * g.O * g.Cg * g.kh
    elif mode == _CH_TBWD:
        csize = _tbwd_col_size(g)
    elif mode == _CH_WTAPS:
        csize = _wgrad_taps_size(g)
    if nt > 1:
        with parallel(num_threads=nt):
            col = <real*>fnn_alloc(csize * sizeof(real) + 64, 1)
            if col == NULL:
                fnn_flag_set(&failed)
            for ch in prange(nch, schedule="dynamic", chunksize=1):
                if col == NULL:
                    continue
                n0 = ch * per
                n1 = n0 + per
                if n1 > g.N:
                    n1 = g.N
                dw = dw_part + ch * wsz if dw_part != NULL else NULL
                if _run_chunk(mode, x, w, gy, dx, dw, n0, n1, col, g):
                    fnn_flag_set(&gfail)
            free(col)
        if failed:
            _raise_nomem(csize * sizeof(real) + 64, 1)
    else:
        col = <real*>_alloc(csize * sizeof(real) + 64, 1)
        for ch in range(nch):
            n0 = ch * per
            n1 = n0 + per
            if n1 > g.N:
                n1 = g.N
            if _run_chunk(mode, x, w, gy, dx, dw_part + ch * wsz if dw_part != NULL else NULL,
                          n0, n1, col, g):
                gfail = 1
                break
        free(col)
    if gfail:
        _raise_gemm_nomem()
    return 0


cdef int _bwd_gemm(const real* x, const real* w, const real* gy, real* dx, real* dw_part,
                   Py_ssize_t nch, Py_ssize_t per, Geo* g, int nt) except -1 nogil:
    cdef int mode = _CH_WROWS if dw_part != NULL and _wgrad_rows_ok(g, dx) else _CH_BWD
    if real is float:
        if mode == _CH_BWD and dw_part != NULL and _wgrad_taps_ok(g, dx):
            mode = _CH_WTAPS
    return _chunked(mode, x, w, gy, dx, dw_part, nch, per, g, nt)


# ---------------------------------------------------------------- depthwise
cdef inline void _pad_plane(real* dst, Py_ssize_t rows, Py_ssize_t cols, const real* src,
                            Py_ssize_t H, Py_ssize_t W, Py_ssize_t top, Py_ssize_t left) noexcept nogil:
    if real is float:
        fnn_pad_plane_f(dst, rows, cols, src, H, W, top, left)
    else:
        fnn_pad_plane_d(dst, rows, cols, src, H, W, top, left)


cdef inline void _dw_xpad_dims(Geo* g, Py_ssize_t* rows, Py_ssize_t* cols) noexcept nogil:
    """The part of the zero-padded input plane the windows read."""
    rows[0] = (g.OH - 1) * g.sh + g.dh * (g.kh - 1) + 1
    cols[0] = (g.OW - 1) * g.sw + g.dw * (g.kw - 1) + 1


cdef void _dw_fwd_plane(const real* x, const real* w, real bias, real* y, real* xp,
                        Geo* g) noexcept nogil:
    """One output plane from one input plane (x, y point at the planes; w at kh*kw taps),
    via the zero-padded copy xp of the input plane."""
    cdef Py_ssize_t oh, Hx, Wx
    _dw_xpad_dims(g, &Hx, &Wx)
    _pad_plane(xp, Hx, Wx, x, g.H, g.W, g.pt, g.pl)
    for oh in range(g.OH):
        if real is float:
            fnn_dw_fwd_row_f(xp + oh * g.sh * Wx, Wx, w, bias, y + oh * g.OW, g.OW, g.kh, g.kw,
                             g.sw, g.dh, g.dw)
        else:
            fnn_dw_fwd_row_d(xp + oh * g.sh * Wx, Wx, w, bias, y + oh * g.OW, g.OW, g.kh, g.kw,
                             g.sw, g.dh, g.dw)


cdef int _dw_fwd(const real* x, const real* w, const real* b, real* y, Geo* g, int nt) except -1 nogil:
    cdef Py_ssize_t u, n, o, mult = g.O // g.C, K = g.kh * g.kw, Hx, Wx
    cdef Py_ssize_t xs = g.H * g.W, ys = g.OH * g.OW
    cdef real* xp = NULL
    cdef int failed = 0
    _dw_xpad_dims(g, &Hx, &Wx)
    with nogil, parallel(num_threads=nt):
        xp = <real*>fnn_alloc(Hx * Wx + 16, sizeof(real))
        if xp == NULL:
            fnn_flag_set(&failed)
        for u in prange(g.N * g.O, schedule="static"):
            if xp == NULL:
                continue
            n = u // g.O
            o = u % g.O
            _dw_fwd_plane(x + (n * g.C + o // mult) * xs, w + o * K, b[o] if b != NULL else 0,
                          y + u * ys, xp, g)
        free(xp)
    if failed:
        _raise_nomem(Hx * Wx + 16, sizeof(real))
    return 0


cdef void _dw_bwd_plane(const real* x, const real* w, const real* gy, real* dx,
                        double* dwp, Geo* g) noexcept nogil:
    """One (output plane -> input plane) pair: dx += W^T gy, dwp[tap] += <gy, x tap>."""
    cdef Py_ssize_t oh, ow, i, j, ih, off, o0, o1, OW = g.OW, sw = g.sw
    cdef real wv
    cdef const real* gr
    cdef real* dr
    cdef const real* xr
    for oh in range(g.OH):
        gr = gy + oh * OW
        for i in range(g.kh):
            ih = oh * g.sh - g.pt + i * g.dh
            if ih < 0 or ih >= g.H:
                continue
            for j in range(g.kw):
                off = j * g.dw - g.pl
                _ow_range(off, sw, g.W, OW, &o0, &o1)
                if o0 >= o1:
                    continue
                wv = w[i * g.kw + j]
                dr = dx + ih * g.W + off
                xr = x + ih * g.W + off
                if sw == 1:
                    for ow in range(o0, o1):
                        dr[ow] += wv * gr[ow]
                else:
                    for ow in range(o0, o1):
                        dr[ow * sw] += wv * gr[ow]
                dwp[i * g.kw + j] += _dot(gr + o0, xr + o0 * sw, o1 - o0, sw)


cdef void _dw_bwd_s1(const real* x, const real* w, const real* gy, real* dx, double* dwp,
                     double* dbp, real* xp, real* gp, double* acc, Geo* g, Py_ssize_t n,
                     Py_ssize_t c) noexcept nogil:
    """3x3, stride 1, dilation 1, input plane (n, c): d_input as a correlation of the
    zero-padded gy with the flipped taps (each dx row written once, in registers), and
    every output plane's d_weight / d_bias partials from the padded input, one pass."""
    cdef Py_ssize_t m, o, oh, ih, t, k, mult = g.O // g.C, K = g.kh * g.kw, Hx, Wx
    cdef Py_ssize_t Hg = g.H + g.dh * (g.kh - 1), Wg = g.W + g.dw * (g.kw - 1)
    cdef const real* gyo
    cdef const real* wo
    cdef real* dxp = dx + (n * g.C + c) * g.H * g.W
    _dw_xpad_dims(g, &Hx, &Wx)
    _pad_plane(xp, Hx, Wx, x + (n * g.C + c) * g.H * g.W, g.H, g.W, g.pt, g.pl)
    for m in range(mult):
        o = c * mult + m
        gyo = gy + (n * g.O + o) * g.OH * g.OW
        wo = w + o * K
        _pad_plane(gp, Hg, Wg, gyo, g.OH, g.OW, g.dh * (g.kh - 1) - g.pt, g.dw * (g.kw - 1) - g.pl)
        for ih in range(g.H):
            if real is float:
                fnn_dw_dx_row_f(gp + ih * Wg, Wg, wo, dxp + ih * g.W, g.W, m > 0)
            else:
                fnn_dw_dx_row_d(gp + ih * Wg, Wg, wo, dxp + ih * g.W, g.W, m > 0)
        memset(acc, 0, (K + 1) * 8 * sizeof(double))
        if real is float:
            fnn_dw_wgrad_f(gyo, xp, Wx, g.OH, g.OW, acc)
        else:
            fnn_dw_wgrad_d(gyo, xp, Wx, g.OH, g.OW, acc)
        for t in range(K):
            dwp[(n * g.O + o) * K + t] = _tree8(acc + t * 8)
        if dbp != NULL:
            dbp[n * g.O + o] = _tree8(acc + K * 8)


cdef inline double _tree8(const double* a) noexcept nogil:
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))


cdef int _dw_bwd(const real* x, const real* w, const real* gy, real* dx, double* dwp,
                 double* dbp, Geo* g, int nt) except -1 nogil:
    """dwp: (N, O, kh*kw) partials, dbp: (N, O) partials or NULL."""
    cdef Py_ssize_t u, n, c, m, o, mult = g.O // g.C, K = g.kh * g.kw, Hx, Wx
    cdef Py_ssize_t xs = g.H * g.W, ys = g.OH * g.OW
    cdef Py_ssize_t Hg = g.H + g.dh * (g.kh - 1), Wg = g.W + g.dw * (g.kw - 1)
    # the unrolled 3x3 kernels; other stride-1 kernels were slower through the padded
    # planes than the tap-by-tap scatter below (5x5: 19 vs 13 ms at 16x64x28x28)
    cdef bint s1 = (g.sh == 1 and g.sw == 1 and g.kh == 3 and g.kw == 3 and g.dh == 1
                    and g.dw == 1)
    cdef real* xp = NULL
    cdef real* gp = NULL
    cdef double* acc = NULL
    cdef int failed = 0
    _dw_xpad_dims(g, &Hx, &Wx)
    if s1:
        with nogil, parallel(num_threads=nt):
            xp = <real*>fnn_alloc(Hx * Wx + 16, sizeof(real))
            gp = <real*>fnn_alloc(Hg * Wg + 16, sizeof(real))
            acc = <double*>fnn_alloc((K + 1) * 8, sizeof(double))
            if xp == NULL or gp == NULL or acc == NULL:
                fnn_flag_set(&failed)
            for u in prange(g.N * g.C, schedule="static"):
                if xp != NULL and gp != NULL and acc != NULL:
                    _dw_bwd_s1(x, w, gy, dx, dwp, dbp, xp, gp, acc, g, u // g.C, u % g.C)
            free(xp)
            free(gp)
            free(acc)
        if failed:
            _raise_nomem(Hx * Wx + Hg * Wg + 32, sizeof(double))
        return 0
    for u in prange(g.N * g.C, nogil=True, schedule="static", num_threads=nt):
        n = u // g.C
        c = u % g.C
        memset(dx + u * xs, 0, xs * sizeof(real))
        for m in range(mult):
            o = c * mult + m
            _dw_bwd_plane(x + u * xs, w + o * K, gy + (n * g.O + o) * ys, dx + u * xs,
                          dwp + (n * g.O + o) * K, g)
            if dbp != NULL:
                dbp[n * g.O + o] = _sum(gy + (n * g.O + o) * ys, ys)
    return 0


cdef void _bias_part(const real* gy, double* dbp, Py_ssize_t units, Py_ssize_t ys, int nt) noexcept nogil:
    cdef Py_ssize_t u
    for u in prange(units, nogil=True, schedule="static", num_threads=nt):
        dbp[u] = _sum(gy + u * ys, ys)


# ---------------------------------------------------------------- Python entry points
cdef Geo _geo(tuple xs, tuple ws, tuple stride, tuple padding, tuple dilation,
              Py_ssize_t groups):
    """conv2d's geometry for an input of shape xs and a weight of shape ws.  The tuples'
    lengths are checked (this module indexes them unchecked): a wrong one is a ValueError,
    not a read past the tuple."""
    cdef Geo g
    if (len(xs) != 4 or len(ws) != 4 or len(stride) != 2 or len(padding) != 4
            or len(dilation) != 2):
        raise ValueError(f"conv kernels: shapes {xs} and {ws} must be 4-D, stride and "
                         f"dilation pairs and padding (top, bottom, left, right); got "
                         f"stride {stride}, padding {padding}, dilation {dilation}")
    g.N = xs[0]; g.C = xs[1]; g.H = xs[2]; g.W = xs[3]
    g.O = ws[0]; g.Cg = ws[1]; g.kh = ws[2]; g.kw = ws[3]
    g.sh = stride[0]; g.sw = stride[1]
    g.pt = padding[0]; g.pl = padding[2]
    g.dh = dilation[0]; g.dw = dilation[1]
    g.G = groups
    g.direct = _DIRECT
    g.OH = (g.H + padding[0] + padding[1] - g.dh * (g.kh - 1) - 1) // g.sh + 1
    g.OW = (g.W + padding[2] + padding[3] - g.dw * (g.kw - 1) - 1) // g.sw + 1
    return g


cdef inline bint _depthwise(Geo* g) noexcept nogil:
    return g.Cg == 1 and g.G == g.C


# One body per kernel call for float and double (fused ``real``, the tag z picks it):
# the callers dispatch with ``if f32: _x_run(<float>0, ...) else: _x_run(<double>0, ...)``.
cdef _dw_fwd_run(real z, cnp.ndarray x, cnp.ndarray weight, void* pb, cnp.ndarray y, Geo* g,
                 int nt):
    cdef const real* px = _typed(x, _xsize(g), z)
    cdef const real* pw = _typed(weight, _wsize(g), z)
    cdef real* py = _typed(y, _ysize(g), z)
    with nogil:
        _dw_fwd(px, pw, <const real*>pb, py, g, nt)


cdef _fwd_gemm_run(real z, cnp.ndarray x, cnp.ndarray weight, cnp.ndarray wr, void* pb,
                   cnp.ndarray y, Geo* g, int nt, int nt_all):
    cdef const real* px = _typed(x, _xsize(g), z)
    cdef const real* pw = _typed(weight, _wsize(g), z)
    cdef const real* pwr = _typed(wr, _wsize(g), z)
    cdef real* py = _typed(y, _ysize(g), z)
    with nogil:
        _fwd_gemm(px, pw, pwr, <const real*>pb, py, g, nt, nt_all)


cdef _dw_bwd_run(real z, cnp.ndarray x, cnp.ndarray weight, cnp.ndarray dy, cnp.ndarray dx,
                 cnp.ndarray part, double* pdb, Geo* g, int nt):
    cdef const real* px = _typed(x, _xsize(g), z)
    cdef const real* pw = _typed(weight, _wsize(g), z)
    cdef const real* pdy = _typed(dy, _ysize(g), z)
    cdef real* pdx = _typed(dx, _xsize(g), z)
    cdef double* pp = <double*>_data(part, g.N * g.O * g.kh * g.kw, F64)
    with nogil:
        _dw_bwd(px, pw, pdy, pdx, pp, pdb, g, nt)


cdef _bias_part_run(real z, cnp.ndarray dy, double* pdb, Py_ssize_t NO, Py_ssize_t ys, int nt):
    cdef const real* pdy = _typed(dy, NO * ys, z)
    with nogil:
        _bias_part(pdy, pdb, NO, ys, nt)


cdef _tbwd_run(real z, cnp.ndarray dy, cnp.ndarray weight, cnp.ndarray x, cnp.ndarray dx,
               cnp.ndarray part, Py_ssize_t nch, Py_ssize_t per, Geo* g, int nt):
    """conv_transpose2d's fused backward: dy is the convolution's input (g's x), x its
    output gradient (g's y)."""
    cdef const real* pdy = _typed(dy, _xsize(g), z)
    cdef const real* pw = _typed(weight, _wsize(g), z)
    cdef const real* px = _typed(x, _ysize(g), z)
    cdef real* pdx = _typed(dx, _ysize(g), z) if dx is not None else NULL
    cdef real* pp = _typed(part, nch * _wsize(g), z)
    with nogil:
        _chunked(_CH_TBWD, pdy, pw, px, pdx, pp, nch, per, g, nt)


cdef _bwd_gemm_run(real z, cnp.ndarray x, cnp.ndarray weight, cnp.ndarray dy, object dx_or_none,
                   object part_or_none, Py_ssize_t nch, Py_ssize_t per, Geo* g, int nt):
    # d_input alone reads no input (the caller may pass dy in x's place)
    cdef const real* px = _typed(x, 0 if part_or_none is None else _xsize(g), z)
    cdef const real* pw = _typed(weight, _wsize(g), z)
    cdef const real* pdy = _typed(dy, _ysize(g), z)
    cdef int T = F32 if real is float else F64
    cdef real* pdx = <real*>_data_or_null(dx_or_none, _xsize(g), T)
    cdef real* pp = <real*>_data_or_null(part_or_none, nch * _wsize(g), T)
    with nogil:
        _bwd_gemm(px, pw, pdy, pdx, pp, nch, per, g, nt)


def _blas_single():
    from fastnn._threads import single_threaded_blas
    return single_threaded_blas()


def _no_context():
    import contextlib
    return contextlib.nullcontext()


def conv2d(cnp.ndarray x, cnp.ndarray weight, object bias, tuple stride, tuple padding,
           tuple dilation, Py_ssize_t groups):
    """conv2d(x, weight, bias, (sH, sW), (top, bottom, left, right), (dH, dW), groups)
    -> (y, saved).  x (N, C, H, W), weight (O, C/groups, kH, kW), bias (O,) or None;
    all C-contiguous, one dtype."""
    with _blas_single():   # every BLAS call one thread: the same bits at any thread count
        return _conv2d_body(x, weight, bias, stride, padding, dilation, groups)


def _conv2d_body(cnp.ndarray x, cnp.ndarray weight, object bias, tuple stride, tuple padding,
                 tuple dilation, Py_ssize_t groups):
    """conv2d's work (its BLAS calls on one thread each)."""
    cdef Geo g = _geo((<object>x).shape, (<object>weight).shape, stride, padding, dilation, groups)
    cdef cnp.ndarray y = np.empty((g.N, g.O, g.OH, g.OW), dtype=x.dtype)
    cdef bint f32 = x.dtype == np.float32
    cdef void* pb = _data_or_null(bias, g.O, F32 if f32 else F64)
    cdef Py_ssize_t flops = g.N * g.O * g.OH * g.OW * g.Cg * g.kh * g.kw
    cdef int nt, nt_all
    if g.N * g.O * g.OH * g.OW == 0:
        y[...] = 0
    elif _depthwise(&g):
        nt = _threads_for(flops, 1 << 16)
        if f32:
            _dw_fwd_run(<float>0, x, weight, pb, y, &g, nt)
        else:
            _dw_fwd_run(<double>0, x, weight, pb, y, &g, nt)
    else:
        nt_all = _threads_for(flops, 1 << 18)
        nt = nt_all if nt_all < g.N else <int>g.N
        if nt > 1:
            with _blas_single():
                _conv_fwd_call(x, weight, pb, y, &g, nt, nt_all, f32)
        else:
            _conv_fwd_call(x, weight, pb, y, &g, nt, nt_all, f32)
    return y, (x, weight, bias is not None, stride, padding, dilation, groups)


cdef cnp.ndarray _pack_cv3(cnp.ndarray weight, Py_ssize_t O, Py_ssize_t C):
    """The 3x3 kernel's packing: _pack_direct's over the 9 taps."""
    return _pack_direct((<object>weight).reshape(O, C, 9))


cdef _cv3_fwd_call(cnp.ndarray x, cnp.ndarray weight, WSrc* src, void* pb, cnp.ndarray y,
                   Geo* g, int nt_all):
    """The direct 3x3 forward (_fwd_cv3) of a _cv3_ok geometry.  AVX-512 builds read the
    weight in place as src says (fnn_cvd_run_raw); other builds pack the (O, C, 3, 3)
    weight (weight; src.w must be its data, not flipped) for the kernel, by blocks of 6
    then 4 output channels: block [o0, o0 + m) holds w[o0 + r, c, i, j] at (c, i*3 + j,
    r)."""
    cdef Py_ssize_t ng = _ogroups(g.N, g.O, nt_all)
    cdef int team = <int>(g.N * ng if g.N * ng < nt_all else nt_all)
    cdef cnp.ndarray ap
    cdef WSrc packed
    cdef const float* px = <const float*>_data(x, _xsize(g), F32)
    cdef float* py = <float*>_data(y, _ysize(g), F32)
    if FNN_HAVE_CVD_RAW:
        with nogil:
            _fwd_cv3(px, src, <const float*>pb, py, g, team, ng)
        return
    ap = _pack_cv3(weight, g.O, g.C)
    packed.w = <const float*>_data(ap, _wsize(g), F32)
    packed.rs = 0
    with nogil:
        _fwd_cv3(px, &packed, <const float*>pb, py, g, team, ng)


cdef _conv_fwd_padded(cnp.ndarray x, cnp.ndarray weight, void* pb, cnp.ndarray y, Geo* g,
                      Geo* g4, int nt, int nt_all):
    """A 3x3 stride-1 float32 forward with fewer than 16 output channels, not a multiple of
    4 (an RGB output layer; d_input of a 3-channel stem): the weight (and bias) padded
    with zero filters to g4.O channels, the direct 3x3 kernel (not Winograd: its input
    transform is per input channel, too much for 4 outputs), the first g.O channels
    kept.  The GEMM path ran it as a 3-row product (one image 64 -> 3 channels at 224 x
    224: 4.5 ms, on OpenBLAS's threads)."""
    cdef cnp.ndarray w4 = np.zeros((g4.O, g.C, 3, 3), dtype=np.float32)
    cdef cnp.ndarray b4 = np.zeros(g4.O, dtype=np.float32)
    cdef cnp.ndarray y4 = np.empty((g.N, g4.O, g.OH, g.OW), dtype=np.float32)
    cdef WSrc src
    w4[:g.O] = weight
    if pb != NULL:
        memcpy(_data(b4, g.O, F32), pb, g.O * sizeof(float))
    src.w = <const float*>_data(w4, g4.O * g.C * 9, F32)
    src.rs = g.C * 9
    src.cs = 9
    src.ts = 1
    src.flip = 0
    _cv3_fwd_call(x, w4, &src, _data(b4, g4.O, F32) if pb != NULL else NULL, y4, g4, nt_all)
    (<object>y)[...] = (<object>y4)[:, :g.O]


cdef _conv_fwd_call(cnp.ndarray x, cnp.ndarray weight, void* pb, cnp.ndarray y, Geo* g, int nt,
                    int nt_all, bint f32):
    """The forward on the kernel the geometry takes.  nt: threads over images (at most N);
    nt_all: the threads the work is worth -- the 3x3 kernels give fewer images than that
    output-channel groups too (a batch of one on every core)."""
    cdef cnp.ndarray ap
    cdef const float* px
    cdef const float* pa
    cdef const float* pz
    cdef float* py
    cdef Py_ssize_t ng
    cdef int team
    cdef WSrc src
    cdef DPlan d
    if f32 and _wg_fwd_ok(g):
        src.w = <const float*>_data(weight, _wsize(g), F32)
        src.rs = g.C * 9
        src.cs = 9
        src.ts = 1
        src.flip = 0
        _wg_fwd_call(x, &src, pb, y, g, nt_all)
        return
    if f32 and _wgs_ok(g) and cnp.PyArray_IS_C_CONTIGUOUS(weight):
        _wgs_call(x, weight, False, pb, y, g, nt_all)
        return
    if f32 and _imgs_fwd_ok(g) and cnp.PyArray_IS_C_CONTIGUOUS(weight):
        _imgs_fwd_call(x, weight, pb, y, g, nt_all)
        return
    if f32 and _cv3_ok(g):
        src.w = <const float*>_data(weight, _wsize(g), F32)
        src.rs = g.C * 9
        src.cs = 9
        src.ts = 1
        src.flip = 0
        _cv3_fwd_call(x, weight, &src, pb, y, g, nt_all)
        return
    cdef Geo g4 = g[0]
    g4.O = (g.O + 3) // 4 * 4
    if f32 and g.O % 4 != 0 and g.O < 16 and _cv3_ok(&g4):
        _conv_fwd_padded(x, weight, pb, y, g, &g4, nt, nt_all)
        return
    if f32 and _cig_ok(g) and cnp.PyArray_IS_C_CONTIGUOUS(weight):
        _cig_fwd(x, weight, pb, y, g)
        return
    if f32 and _rows_direct_ok(g):
        _rows_fwd_direct(x, weight, pb, y, g)
        return
    if f32 and _taps_direct_ok(g):
        _taps_fwd_direct(x, weight, pb, y, g)
        return
    if f32 and _strided_direct_ok(g):
        plan = _tdx_plan(weight, g, &d)
        if plan is not None:
            ap, toff, runs, zeros = plan    # zeros: d.zeros' array, alive while d is used
            _run_direct(x, ap, toff, runs, pb, y, &d,
                        g.N * g.O * g.OH * g.OW * g.C * g.kh * g.kw)
            return
    # weights by column tap for the row-im2col path: wr[j, o, c*kH + i] = w[o, c, i, j]
    cdef cnp.ndarray wr = np.ascontiguousarray(
        (<object>weight).transpose(3, 0, 1, 2).reshape(g.kw, g.O, g.Cg * g.kh))
    if f32:
        _fwd_gemm_run(<float>0, x, weight, wr, pb, y, g, nt, nt_all)
    else:
        _fwd_gemm_run(<double>0, x, weight, wr, pb, y, g, nt, nt_all)


cdef Py_ssize_t _chunks(Geo* g, Py_ssize_t* per):
    """Fixed image chunks for the d_weight partials: a function of the shapes only
    (never of the thread count), at most 8, and at most ~64 MiB of partials; -> their
    count, *per images each (the last may have fewer)."""
    cdef Py_ssize_t wsz = g.O * g.Cg * g.kh * g.kw * 8
    cdef Py_ssize_t nch = g.N if g.N < 8 else 8
    cdef Py_ssize_t cap = (64 << 20) // (wsz if wsz > 0 else 1)
    if nch > cap:
        nch = cap
    if nch < 1:
        nch = 1
    per[0] = (g.N + nch - 1) // nch
    return (g.N + per[0] - 1) // per[0] if per[0] > 0 else 1


def conv2d_backward(cnp.ndarray dy, tuple saved, bint weight_grad=True, bint bias_grad=True):
    """-> (d_input, d_weight, d_bias or None).  dy (N, O, OH, OW) C-contiguous.
    ``weight_grad`` / ``bias_grad`` False: that gradient is not computed (a frozen
    parameter) and comes back None."""
    with _blas_single():   # every BLAS call one thread: the same bits at any thread count
        return _conv2d_backward_body(dy, saved, weight_grad, bias_grad)


def _conv2d_backward_body(cnp.ndarray dy, tuple saved, bint weight_grad=True, bint bias_grad=True):
    """conv2d_backward's work (its BLAS calls on one thread each)."""
    cdef cnp.ndarray x = saved[0]
    return _grads(x, (<object>x).shape, saved[1], dy, saved[3], saved[4], saved[5], saved[6],
                  True, weight_grad, saved[2] and bias_grad)


cdef tuple _grads(object x_or_none, tuple x_shape, cnp.ndarray weight, cnp.ndarray dy,
                  tuple stride, tuple padding, tuple dilation, Py_ssize_t groups, bint want_dx,
                  bint want_dw, bint has_bias):
    """conv2d's gradients -> (d_input or None, d_weight or None, d_bias or None).  The input
    (x_or_none) is needed only for d_weight; conv_transpose2d runs d_input alone (its
    forward) and d_weight alone (with the activations' roles swapped)."""
    cdef Geo g = _geo(x_shape, (<object>weight).shape, stride, padding, dilation, groups)
    cdef cnp.ndarray x
    cdef cnp.ndarray dx = None
    cdef cnp.ndarray dw = None
    cdef cnp.ndarray db = None
    cdef cnp.ndarray dbp = None
    cdef cnp.ndarray part
    cdef Py_ssize_t ys = g.OH * g.OW, K = g.kh * g.kw, nch, per
    cdef Py_ssize_t flops = g.N * g.O * g.OH * g.OW * g.Cg * g.kh * g.kw, ng
    cdef int nt, nt_all, team
    cdef bint f32 = dy.dtype == np.float32, tdx
    cdef double* pdb = NULL
    cdef const float* px
    cdef const float* pdy
    cdef float* ppart
    cdef float* pdw
    cdef float* pw
    cdef float* pdx
    wg_dw = None
    if want_dx or _depthwise(&g):
        dx = np.empty(x_shape, dtype=dy.dtype)
    # d_input alone reads no input: anything of the right dtype stands in for it (the
    # depthwise kernel computes both gradients, so it gets zeros)
    if x_or_none is not None:
        x = x_or_none
    elif _depthwise(&g) and flops:
        x = np.zeros(x_shape, dtype=dy.dtype)
    else:
        x = dy
    if has_bias:
        dbp = np.zeros((g.N, g.O), dtype=np.float64)
        pdb = <double*>_data(dbp, g.N * g.O, F64)
    if flops == 0:
        if dx is not None:
            dx[...] = 0
        dw = np.zeros_like(weight)
    elif _depthwise(&g):
        nt = _threads_for(flops, 1 << 16)
        part = np.zeros((g.N, g.O, K), dtype=np.float64)
        if f32:
            _dw_bwd_run(<float>0, x, weight, dy, dx, part, pdb, &g, nt)
        else:
            _dw_bwd_run(<double>0, x, weight, dy, dx, part, pdb, &g, nt)
        dw = _sum_parts(part).reshape((<object>weight).shape).astype(dy.dtype)
        pdb = NULL   # already filled
    else:
        nch = _chunks(&g, &per)
        part = np.empty((nch,) + (<object>weight).shape, dtype=dy.dtype) if want_dw else None
        tdx = _dx_as_conv(&g, padding)
        if want_dx and f32 and _dx_1x1_imgs(dy, weight, dx, &g, flops):
            tdx = True
        elif tdx and want_dx:
            _dx_by_conv(dy, weight, dx, &g, padding, dilation, groups, flops, f32)
        elif want_dx and f32 and _sdx_ok(&g) and cnp.PyArray_IS_C_CONTIGUOUS(weight):
            # strided: column tiles of W^T dy on the own GEMM, scattered back
            nt_all = _threads_for(flops, 1 << 18)
            pw = <float*>_data(weight, _wsize(&g), F32)
            pdy = <const float*>_data(dy, _ysize(&g), F32)
            pdx = <float*>_data(dx, _xsize(&g), F32)
            with _blas_single():
                with nogil:
                    _sdx_run(pw, pdy, pdx, &g, nt_all)
            tdx = True
        elif (want_dx and f32 and _strided_direct_ok(&g) and _tdx_plan_ok(&g)
                and _tconv_direct_ok(&g)):
            # strided: d_input is the transposed convolution of dy, on its direct kernel
            _tconv_fwd_direct(dy, weight, NULL, dx, &g, padding)
            tdx = True
        nt = _threads_for(flops, 1 << 18)
        if nt > nch:
            nt = <int>nch
        # the direct d_weight keeps 8 lanes per weight per thread: not for huge layers
        if not want_dw and tdx:
            pass
        elif want_dw and f32 and _strided_direct_ok(&g) and _tdx_plan_ok(&g) and _twgrad_ok(&g):
            wg_dw = _strided_wgrad(x, dy, &g, nch, per)
        elif want_dw and f32 and tdx and _wgs_dw_ok(&g):
            wg_dw = _wgs_wgrad(x, dy, &g, _threads_for(flops, 1 << 18))
        elif want_dw and f32 and tdx and _wgemm_first(&g, nch):
            wg_dw = _wgrad_gemm(x, dy, &g, nch, per)
        elif want_dw and f32 and tdx and _wg_wgrad_ok(&g, nch):
            nt_all = _threads_for(flops, 1 << 18)
            if 16 * g.C * g.O * 4 >= _WG_ONE_CHUNK:
                # big partials: one chunk of all images (a function of the shapes, so the
                # bits do not depend on the threads), the threads on output-channel
                # groups whose partials the L2 holds
                nch = 1
                per = g.N
                ng = _wg_l2_groups(g.C, g.O, nt_all)
            else:
                # fewer image chunks than threads: output-channel groups too
                ng = _wgroups(nch, g.O, nt_all)
            team = <int>(nch * ng if nch * ng < nt_all else nt_all)
            part = np.empty((nch, 16 * g.C * g.O), dtype=np.float32)   # zeroed by _wgrad_wg
            px = <const float*>_data(x, _xsize(&g), F32)
            pdy = <const float*>_data(dy, _ysize(&g), F32)
            ppart = <float*>_data(part, nch * 16 * g.C * g.O, F32)
            if nch == 1:    # each work item writes its group's d_weight
                wg_dw = np.empty((<object>weight).shape, dtype=np.float32)
                pdw = <float*>_data(wg_dw, _wsize(&g), F32)
            else:
                pdw = NULL
            with nogil:
                _wgrad_wg(px, pdy, ppart, nch, per, &g, team, ng, pdw)
            if nch > 1:
                wg_dw = _unpack_wg_grad(part, g.O, g.C, ng)
        elif want_dw and f32 and tdx and _cv3_ok(&g) and g.O * g.C * 72 * 4 <= (16 << 20):
            px = <const float*>_data(x, _xsize(&g), F32)
            pdy = <const float*>_data(dy, _ysize(&g), F32)
            ppart = <float*>_data(part, nch * _wsize(&g), F32)
            with nogil:
                _wgrad_cv3(px, pdy, ppart, nch, per, &g, nt)
        elif (want_dw and f32 and tdx and _wgrad_taps_ok(&g, <float*>NULL)
                and _ogroups(nch, g.O, _threads_for(flops, 1 << 18)) > 1):
            # fewer image chunks than threads: output-channel groups too
            nt_all = _threads_for(flops, 1 << 18)
            ng = _ogroups(nch, g.O, nt_all)
            px = <const float*>_data(x, _xsize(&g), F32)
            pdy = <const float*>_data(dy, _ysize(&g), F32)
            ppart = <float*>_data(part, nch * _wsize(&g), F32)
            with nogil:
                _wgrad_taps_groups(px, pdy, ppart, nch, per, &g,
                                   <int>(nch * ng if nch * ng < nt_all else nt_all), ng)
        elif nt > 1:
            with _blas_single():
                _conv_bwd_call(x, weight, dy, None if tdx else dx, part, nch, per, &g, nt, f32)
        else:
            _conv_bwd_call(x, weight, dy, None if tdx else dx, part, nch, per, &g, nt, f32)
        if wg_dw is not None:
            dw = wg_dw
        elif want_dw:
            dw = part[0] if nch == 1 else _sum_parts(part).astype(dy.dtype)
    if has_bias:
        db = _bias_grad(dy) if pdb != NULL else _sum_parts(dbp).astype(dy.dtype)
    return (dx if want_dx else None), (dw if want_dw else None), db


cdef cnp.ndarray _bias_grad(cnp.ndarray dy):
    """d_bias of an (N, O, ...) output gradient: per-(n, o) sums in double, added in n order."""
    cdef Py_ssize_t N = dy.shape[0], O = dy.shape[1]
    cdef Py_ssize_t ys = cnp.PyArray_SIZE(dy) // (N * O) if N * O else 0
    cdef cnp.ndarray dbp = np.zeros((N, O), dtype=np.float64)
    cdef double* pdb = <double*>_data(dbp, N * O, F64)
    cdef int nt = _threads_for(N * O * ys, 1 << 15)
    if cnp.PyArray_TYPE(dy) == cnp.NPY_FLOAT:
        _bias_part_run(<float>0, dy, pdb, N * O, ys, nt)
    else:
        _bias_part_run(<double>0, dy, pdb, N * O, ys, nt)
    return _sum_parts(dbp).astype(dy.dtype)


def conv_transpose2d(cnp.ndarray x, cnp.ndarray weight, object bias, tuple stride, tuple padding,
                     tuple out_hw, tuple dilation, Py_ssize_t groups):
    """conv_transpose2d(x, weight, bias, stride, (top, bottom, left, right), (OH, OW), dilation,
    groups) -> (y, saved).  x (N, Cin, H, W), weight (Cin, Cout/groups, kH, kW): y is the
    d_input of the conv2d (weight, padding) over an (N, Cout, OH, OW) input whose output
    has x's shape -- conv2d's backward kernels, no GEMM loop of its own."""
    with _blas_single():   # every BLAS call one thread: the same bits at any thread count
        return _conv_transpose2d_body(x, weight, bias, stride, padding, out_hw, dilation, groups)


def _conv_transpose2d_body(cnp.ndarray x, cnp.ndarray weight, object bias, tuple stride,
                           tuple padding, tuple out_hw, tuple dilation, Py_ssize_t groups):
    """conv_transpose2d's work (its BLAS calls on one thread each)."""
    cdef tuple y_shape = (x.shape[0], weight.shape[1] * groups) + tuple(out_hw)
    cdef Geo g = _geo(y_shape, (<object>weight).shape, stride, padding, dilation, groups)
    cdef cnp.ndarray yd
    saved = (x, weight, bias is not None, stride, padding, dilation, groups)
    if (x.dtype == np.float32 and g.N * g.O * g.OH * g.OW * g.C * g.kh * g.kw > 0
            and _tconv_direct_ok(&g)):
        yd = np.empty(y_shape, dtype=np.float32)
        _tconv_fwd_direct(x, weight, _data_or_null(bias, g.C, F32), yd, &g, padding)
        return yd, saved
    y = _grads(None, y_shape, weight, x, stride, padding, dilation, groups, True, False, False)[0]
    if bias is not None:
        y += (<object>bias).reshape(1, -1, 1, 1)
    return y, saved


_FUSED_TBWD = True


def _set_tbwd_limits(Py_ssize_t tile_elems, Py_ssize_t planes_max):
    """Tests: the fused transposed backward's column tile size and phase-plane limit."""
    global _TBWD_ELEMS, _TBWD_PLANES_MAX
    _TBWD_ELEMS = tile_elems
    _TBWD_PLANES_MAX = planes_max
_DIRECT = True      # the direct (tap-list) kernels where they apply; tests compare both paths


def conv_transpose2d_backward(cnp.ndarray dy, tuple saved, bint weight_grad=True,
                              bint bias_grad=True):
    """-> (d_input, d_weight, d_bias or None): d_input is conv2d(dy) (the forward kernels),
    d_weight conv2d's weight gradient with input dy and output gradient x (the flags as
    conv2d_backward's).  Where the
    forward would run on im2col tiles anyway (strided columns), both come from one pass
    that builds each tile of dy's columns once (_tbwd): from dy's phase planes (one
    deinterleave per image, then a contiguous copy per channel, tap and row; whole-image
    tiles up to 2 MiB, so d_weight's GEMM sums over OH*OW positions per call)."""
    with _blas_single():   # every BLAS call one thread: the same bits at any thread count
        return _conv_transpose2d_backward_body(dy, saved, weight_grad, bias_grad)


def _conv_transpose2d_backward_body(cnp.ndarray dy, tuple saved, bint weight_grad=True,
                                    bint bias_grad=True):
    """conv_transpose2d_backward's work (its BLAS calls on one thread each)."""
    cdef cnp.ndarray x = saved[0], weight = saved[1]
    cdef Geo g = _geo((<object>dy).shape, (<object>weight).shape, saved[3], saved[4], saved[5],
                      saved[6])
    cdef bint want_db = saved[2] and bias_grad
    if (weight_grad and _FUSED_TBWD and not _depthwise(&g) and not _rowcol_ok(&g)
            and not _is_1x1(&g) and g.N * g.O * g.OH * g.OW * g.Cg * g.kh * g.kw > 0):
        dx, dw, db = _tbwd(dy, weight, x, &g, want_db)
    else:
        dx = conv2d(dy, weight, None, saved[3], saved[4], saved[5], saved[6])[0]
        dw = (_grads(dy, (<object>dy).shape, weight, x, saved[3], saved[4], saved[5],
                     saved[6], False, True, False)[1] if weight_grad else None)
        db = None
    if want_db and db is None:
        db = _bias_grad(dy)
    return dx, dw, db


cdef inline Py_ssize_t _fdiv(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """floor(a / b) for b > 0 (this module divides the C way, truncating)."""
    cdef Py_ssize_t q = a // b
    if q * b > a:
        q -= 1
    return q


cdef inline void _phase_dims(Geo* g, Py_ssize_t* mlo, Py_ssize_t* nlo, Py_ssize_t* Hp,
                             Py_ssize_t* Wp) noexcept nogil:
    """The phase planes of the input the fused transposed backward reads (_phase_planes):
    tap row i reads input row sh*(oh + m_i) + a_i with i*dh - pt = sh*m_i + a_i (0 <= a_i
    < sh), i.e. row oh + m_i - mlo of phase a_i's plane; likewise for columns.  Shapes only."""
    mlo[0] = _fdiv(-g.pt, g.sh)
    nlo[0] = _fdiv(-g.pl, g.sw)
    Hp[0] = g.OH + _fdiv((g.kh - 1) * g.dh - g.pt, g.sh) - mlo[0]
    Wp[0] = g.OW + _fdiv((g.kw - 1) * g.dw - g.pl, g.sw) - nlo[0]


cdef inline void _phase_planes(const real* z, real* pl, Geo* g, bint phase_major) noexcept nogil:
    _phase_planes_c(z, pl, g, phase_major, 0, g.C)


cdef void _phase_planes_c(const real* z, real* pl, Geo* g, bint phase_major, Py_ssize_t c0,
                          Py_ssize_t c1) noexcept nogil:
    """pl[c, a, b, u, v] = z[c, sh*(u + mlo) + a, sw*(v + nlo) + b], zero outside z: the
    input (one image) split by row phase a and column phase b (sh*sw planes per channel,
    each Hp x Wp, zero-padded), so every tap of a strided convolution reads a contiguous
    row segment of one plane -- no strided gather or bounds test per column tile.
    phase_major: the planes in (a, b, c) order instead (the direct kernel's channel groups
    by phase, _tdx_direct).  Channels [c0, c1) only."""
    cdef Py_ssize_t mlo, nlo, Hp, Wp, c, a, b, u, h, v0, v1
    cdef real* d
    _phase_dims(g, &mlo, &nlo, &Hp, &Wp)
    for c in range(c0, c1):
        for a in range(g.sh):
            for b in range(g.sw):
                if phase_major:
                    d = pl + ((a * g.sw + b) * g.C + c) * Hp * Wp
                else:
                    d = pl + ((c * g.sh + a) * g.sw + b) * Hp * Wp
                # columns v with 0 <= sw*(v + nlo) + b < W
                v0 = -nlo if nlo < 0 else 0
                v1 = (g.W - b + g.sw - 1) // g.sw - nlo
                if v1 > Wp:
                    v1 = Wp
                if v1 < v0:
                    v1 = v0
                for u in range(Hp):
                    h = g.sh * (u + mlo) + a
                    if h < 0 or h >= g.H or v0 >= v1:
                        memset(d, 0, Wp * sizeof(real))
                    elif real is float:
                        fnn_im2col_row_f(d, z + (c * g.H + h) * g.W + g.sw * nlo + b, Wp, v0, v1, g.sw)
                    else:
                        fnn_im2col_row_d(d, z + (c * g.H + h) * g.W + g.sw * nlo + b, Wp, v0, v1, g.sw)
                    d += Wp


cdef void _phase_col(const real* pl, real* col, Geo* g, Py_ssize_t r0,
                     Py_ssize_t r1) noexcept nogil:
    """The im2col tile of output rows [r0, r1) (as _im2col) from the phase planes: each
    (channel, tap, row) is one contiguous copy of OW values."""
    cdef Py_ssize_t mlo, nlo, Hp, Wp, c, i, j, q, ow, ei, ej, mi, mj, ai, bj
    cdef Py_ssize_t OW = g.OW, T = (r1 - r0) * g.OW
    cdef real* d
    cdef const real* s
    _phase_dims(g, &mlo, &nlo, &Hp, &Wp)
    for c in range(g.C):
        for i in range(g.kh):
            ei = i * g.dh - g.pt
            mi = _fdiv(ei, g.sh)
            ai = ei - mi * g.sh
            for j in range(g.kw):
                ej = j * g.dw - g.pl
                mj = _fdiv(ej, g.sw)
                bj = ej - mj * g.sw
                d = col + ((c * g.kh + i) * g.kw + j) * T
                s = (pl + ((c * g.sh + ai) * g.sw + bj) * Hp * Wp + (r0 + mi - mlo) * Wp
                     + (mj - nlo))
                for q in range(r1 - r0):
                    for ow in range(OW):
                        d[ow] = s[ow]
                    d += OW
                    s += Wp


cdef inline Py_ssize_t _tbwd_planes(Geo* g) noexcept nogil:
    """Elements of one image's phase planes, 0 where over the limit (then _im2col)."""
    cdef Py_ssize_t mlo, nlo, Hp, Wp, n
    _phase_dims(g, &mlo, &nlo, &Hp, &Wp)
    n = g.C * g.sh * g.sw * Hp * Wp
    return n if n <= _TBWD_PLANES_MAX else 0


cdef inline Py_ssize_t _tbwd_col_size(Geo* g) noexcept nogil:
    """Scratch of _tbwd_chunk: one column tile, then the phase planes of one image."""
    return g.C * g.kh * g.kw * _tbwd_rows(g) * g.OW + _tbwd_planes(g)


cdef int _tbwd_chunk(const real* z, const real* w, const real* gx, real* y, real* dw_part,
                     Py_ssize_t n0, Py_ssize_t n1, real* col, Geo* g) noexcept nogil:
    """Images [n0, n1) of conv2d(z) = y and its d_weight for output gradient gx, sharing
    each im2col tile of z: y_tile = W @ col, dW += gx_tile @ col^T.  The tiles come from
    the image's phase planes (built once per image, after the tile in col's scratch)."""
    cdef Py_ssize_t P = g.OH * g.OW, Og = g.O // g.G, Kg = g.Cg * g.kh * g.kw, gi, n
    cdef Py_ssize_t zs = g.C * g.H * g.W, ys = g.O * P
    cdef Py_ssize_t R = _tbwd_rows(g), r0, r1, T
    cdef real* pl = col + g.C * g.kh * g.kw * R * g.OW
    cdef bint planes = _tbwd_planes(g) > 0
    for n in range(n0, n1):
        if planes:
            _phase_planes(z + n * zs, pl, g, False)
        r0 = 0
        while r0 < g.OH:
            r1 = r0 + R if r0 + R < g.OH else g.OH
            T = (r1 - r0) * g.OW
            if planes:
                _phase_col(pl, col, g, r0, r1)
            else:
                _im2col(z + n * zs, col, g, r0, r1)
            for gi in range(g.G):
                if y != NULL:
                    if gemm(False, False, <int>Og, <int>T, <int>Kg, <real>1, w + gi * Og * Kg,
                            <int>Kg, col + gi * Kg * T, <int>T, <real>0,
                            y + n * ys + gi * Og * P + r0 * g.OW, <int>P):
                        return -1
                if gemm(False, True, <int>Og, <int>Kg, <int>T, <real>1,
                        gx + n * ys + gi * Og * P + r0 * g.OW, <int>P, col + gi * Kg * T, <int>T,
                        <real>(0 if (n == n0 and r0 == 0) else 1), dw_part + gi * Og * Kg, <int>Kg):
                    return -1
            r0 = r1
    return 0


cdef bint _tdx_plan_ok(Geo* g):
    """Where _tdx_plan gives a plan (the strided direct conv2d)."""
    cdef Py_ssize_t mlo, nlo, Hp, Wp
    _phase_dims(g, &mlo, &nlo, &Hp, &Wp)
    return (g.direct and FNN_HAVE_CVW != 0 and g.G == 1 and g.O >= 4 and g.O % 4 == 0
            and (g.sh > 1 or g.sw > 1) and g.N * g.O * g.OH * g.OW > 0
            and g.C * g.sh * g.sw * Hp * Wp <= _TBWD_PLANES_MAX)


cdef object _tdx_plan(cnp.ndarray weight, Geo* g, DPlan* d):
    """A strided conv2d (g) on the direct kernel: conv_transpose2d's d_input (the conv2d
    of dy) and the strided conv2d's forward (float32, AVX-512 builds -- on the AVX2 tiles
    the im2col passes measured faster --, groups 1, output channels a multiple of 4).  The
    input is split into sh*sw phase planes per image (_phase_planes, phase-major), so
    every tap reads one plane at a fixed offset: a stride-1 implicit GEMM over K =
    C*kh*kw, no column tile.  With the same number of taps in every phase (a 4x4 kernel at
    stride 2), each phase is a channel group of C planes with its own taps; otherwise (3x3
    at stride 2: 1, 2, 2 and 4 taps) one group of C channels whose kh*kw tap offsets carry
    their phase's plane offset.  Fills d, returns (packed weights, tap offsets, run table,
    zeros), or None where it does not apply."""
    cdef Py_ssize_t mlo, nlo, Hp, Wp, a, b, nt = -1, reach = 0
    cdef bint grouped = True
    cdef cnp.ndarray ta
    if not _tdx_plan_ok(g):
        return None
    rows = _phase_taps(g.kh, g.dh, g.pt, g.sh)
    cols = _phase_taps(g.kw, g.dw, g.pl, g.sw)
    for a in range(g.sh):
        for b in range(g.sw):
            if nt < 0:
                nt = len(rows[a]) * len(cols[b])
            elif nt != len(rows[a]) * len(cols[b]):
                grouped = False
    _phase_dims(g, &mlo, &nlo, &Hp, &Wp)
    w = <object>weight     # (O, C, kh, kw)
    toff = []
    if grouped and nt > 0:
        wds = []
        for a in range(g.sh):
            for b in range(g.sw):
                taps = [(i, mi, j, mj) for (i, mi) in rows[a] for (j, mj) in cols[b]]
                for (i, mi, j, mj) in taps:
                    toff.append((mi - mlo) * Wp + (mj - nlo))
                wds.append(np.stack([w[:, :, i, j] for (i, mi, j, mj) in taps], axis=-1))
        reach = max(toff)
        d.Ct = g.C * g.sh * g.sw; d.cg = g.C
        ap = _pack_direct(np.concatenate(wds, axis=1))      # (O, phases*C, nt)
    else:
        # tap (i, j) reads phase (a_i, b_j)'s plane of its channel at row m_i - mlo,
        # column m_j - nlo (i*dh - pt = sh*m_i + a_i, likewise for columns)
        nt = g.kh * g.kw
        ta = np.empty(nt, dtype=np.intp)
        reach = _phase_tap_offsets(g, <Py_ssize_t*>_data(ta, nt, INTP))
        toff = ta
        d.Ct = g.C; d.cg = g.C
        if FNN_HAVE_CVD_RAW and cnp.PyArray_IS_C_CONTIGUOUS(weight):
            ap = None    # the kernel reads the weight in place: (O, C, taps), taps in order
        else:
            ap = _pack_direct(w.reshape(g.O, g.C, nt))
    d.N = g.N; d.Cs = g.C; d.Hs = g.H; d.Ws = g.W
    d.top = 0; d.left = 0; d.PR = Hp; d.We = Wp
    d.Cx = g.C * g.sh * g.sw
    d.O = g.O; d.OH = g.OH; d.OW = g.OW; d.Sh = 1; d.Sw = 1
    d.nrun = 1
    d.ldc = (g.OH * Wp + 15) // 16 * 16
    d.slack = _slack_rows(reach, Wp)
    d.yout = False
    d.pg = g
    d.wr = NULL
    if ap is None:
        d.wr = <const float*>_data(weight, g.O * g.C * nt, F32)
        d.ars = g.C * nt
        d.acs = nt
        ap = np.zeros(1, dtype=np.float32)
    zeros = np.zeros(d.O, dtype=np.float32)
    d.zeros = <const float*>_data(zeros, d.O, F32)
    return (ap, np.asarray(toff, dtype=np.intp),
            np.asarray([[0, 0, nt, g.OH, g.OW, 0, 0, 0]], dtype=np.intp), zeros)


cdef bint _twgrad_ok(Geo* g) noexcept nogil:
    """conv_transpose2d's d_weight on the direct kernel (AVX-512 builds, float32, groups 1;
    the kernel's vector columns are x's channels (g.O, a multiple of 16), its broadcast
    rows dy's (g.C, a multiple of 4); one image's phase planes within the limit)."""
    return (g.direct and FNN_HAVE_CVW != 0 and g.G == 1 and g.O % 16 == 0 and g.C % 4 == 0
            and g.kh * g.kw <= 64 and _tbwd_planes(g) > 0)


cdef Py_ssize_t _phase_tap_offsets(Geo* g, Py_ssize_t* off) noexcept nogil:
    """off[i*kw + j]: where tap (i, j) reads channel 0's phase planes (phase-major, C planes
    of Hp x Wp per phase, _phase_planes): phase (a_i, b_j)'s plane shifted by (m_i - mlo,
    m_j - nlo) (see _phase_dims).  -> the largest shift within a plane (the taps' reach)."""
    cdef Py_ssize_t mlo, nlo, Hp, Wp, i, j, ei, ej, mi, mj, reach = 0
    _phase_dims(g, &mlo, &nlo, &Hp, &Wp)
    for i in range(g.kh):
        ei = i * g.dh - g.pt
        mi = _fdiv(ei, g.sh)
        for j in range(g.kw):
            ej = j * g.dw - g.pl
            mj = _fdiv(ej, g.sw)
            off[i * g.kw + j] = (((ei - mi * g.sh) * g.sw + ej - mj * g.sw) * g.C * Hp
                                 * Wp + (mi - mlo) * Wp + (mj - nlo))
            if (mi - mlo) * Wp + mj - nlo > reach:
                reach = (mi - mlo) * Wp + mj - nlo
    return reach


cdef void _twgrad_offsets(Geo* g, Py_ssize_t* aoff, Py_ssize_t* boff) noexcept nogil:
    """Tap t of the direct d_weight reads the input's phase planes at aoff[t]
    (_phase_tap_offsets); dy's positions at boff[t] = 0."""
    cdef Py_ssize_t t
    _phase_tap_offsets(g, aoff)
    for t in range(g.kh * g.kw):
        boff[t] = 0


cdef inline void _twgrad_image(const float* pl, const float* gx, float* xt, float* acc,
                               const Py_ssize_t* aoff, const Py_ssize_t* boff,
                               Geo* g) noexcept nogil:
    """acc[i, j, c, o] += sum_{oh, ow} plane_{phase(i, j)}[c, oh + m_i - mlo, ow + m_j - nlo]
    * gx[o, oh, ow] for one image (pl: its phase planes, phase-major; xt: scratch for gx
    transposed to positions x channels)."""
    cdef Py_ssize_t mlo, nlo, Hp, Wp, P = g.OH * g.OW
    _phase_dims(g, &mlo, &nlo, &Hp, &Wp)
    fnn_cvw_transpose(gx, xt, g.O, P, P, 0)
    fnn_cvw_run(pl, Hp * Wp, Wp, aoff, xt, g.O, g.OW * g.O, boff, g.kh * g.kw, g.OH, g.OW,
                g.C, g.O, acc)


cdef int _swgrad(const float* x, const float* gy, float* part, Py_ssize_t nch,
                 Py_ssize_t per, Geo* g, int nt, Py_ssize_t ng) except -1 nogil:
    """A strided conv2d's d_weight on the direct d_weight kernel over the input's phase
    planes (as conv_transpose2d's, _twgrad_image): work items (fixed image chunk ch,
    output-channel group k = [o0, o1), _wbound) over nt threads.  The item's partial is
    part[ch] from kh*kw*C*o0 on, in (tap, c, o - o0) order (the caller puts the chunk sum
    in the weight's order).  A weight's sum runs over its chunk's images and positions in
    order, whatever the group: the same bits at any thread count."""
    cdef Py_ssize_t mlo, nlo, Hp, Wp, P = g.OH * g.OW, KK = g.kh * g.kw
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * P, wsz = g.O * g.C * KK
    cdef Py_ssize_t psz, it, ch, k, o0, o1, og, n, n0, n1, ogm = 0
    cdef Py_ssize_t aoff[64]
    cdef Py_ssize_t boff[64]
    cdef float* buf = NULL
    cdef float* acc
    cdef int failed = 0
    _phase_dims(g, &mlo, &nlo, &Hp, &Wp)
    _twgrad_offsets(g, aoff, boff)
    psz = g.C * g.sh * g.sw * Hp * Wp + 64
    for k in range(ng):
        if _wbound(g.O, ng, k + 1) - _wbound(g.O, ng, k) > ogm:
            ogm = _wbound(g.O, ng, k + 1) - _wbound(g.O, ng, k)
    with nogil, parallel(num_threads=nt):
        buf = <float*>fnn_alloc(psz + P * ogm + 64, sizeof(float))
        if buf == NULL:
            fnn_flag_set(&failed)
        for it in prange(nch * ng, schedule="dynamic", chunksize=1):
            if buf == NULL:
                continue
            ch = it // ng
            k = it % ng
            o0 = _wbound(g.O, ng, k)
            o1 = _wbound(g.O, ng, k + 1)
            og = o1 - o0
            n0 = ch * per
            n1 = n0 + per if n0 + per < g.N else g.N
            acc = part + ch * wsz + KK * g.C * o0
            memset(acc, 0, KK * g.C * og * sizeof(float))
            for n in range(n0, n1):
                _phase_planes(x + n * xs, buf, g, True)
                fnn_cvw_transpose(gy + n * ys + o0 * P, buf + psz, og, P, P, 0)
                fnn_cvw_run(buf, Hp * Wp, Wp, aoff, buf + psz, og, g.OW * og, boff, KK,
                            g.OH, g.OW, g.C, og, acc)
        free(buf)
    if failed:
        _raise_nomem(psz + P * ogm + 64, sizeof(float))
    return 0


cdef inline Py_ssize_t _cbound(Py_ssize_t C, Py_ssize_t ng, Py_ssize_t k) noexcept nogil:
    """Start of input-channel group k of ng (k = ng: C)."""
    return C * k // ng


cdef int _swgrad_gemm(const float* x, const float* gy, float* part, Py_ssize_t nch,
                      Py_ssize_t per, Geo* g, int nt, Py_ssize_t ng, Py_ssize_t ldo,
                      Py_ssize_t nI) except -1 nogil:
    """A strided conv2d's d_weight as GEMMs on the own float32 kernel: work items (fixed
    image chunk ch, group k), per image and tile of R output rows (_SDX_TILE, shapes
    only), col = im2col(x) (C*kh*kw x T), and either
      tr False: part[ch][o0:o1] += dy[o0:o1, tile] col^T (groups of output channels
        [o0, o1); col^T packed as B, C*kh*kw columns), part[ch] in the weight's order; or
      ldo > 0: part[ch][c0*kh*kw:c1*kh*kw] += col dy[:, tile]^T (groups of input
        channels [c0, c1), whose rows alone the item's im2col builds; dy^T packed as B, O
        columns), part[ch] in (c, i, j, o) order, its rows ldo >= O apart.
    Both sum each weight over k = the tile's positions in the GEMM's fixed k blocks: the
    same products in the same order, so the same bits either way.  nI > 1 (whole images a
    tile: small planes, _imgs_per): a tile is nI images of the chunk side by side (their
    im2col, and dy's rows copied next to each other into dyc), so the GEMMs are nI times
    deeper and part is read and written once per nI images.  A weight's sum runs over
    the chunk's images and tiles in order: the same bits at any thread count."""
    cdef Py_ssize_t KK = g.kh * g.kw, K = g.C * KK, P = g.OH * g.OW
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * P
    cdef Py_ssize_t R = _sdx_rows(g), it, ch, k, n, n0, n1, m, m1, o
    cdef Py_ssize_t o0, o1, r0, r1, T
    cdef Py_ssize_t csz = K * R * g.OW if K * R * g.OW > K * nI * P else K * nI * P
    cdef float* col = NULL
    cdef float* dyc
    cdef float beta
    cdef int failed = 0, gfail = 0
    cdef bint tr = ldo > 0
    if nI > 1:
        csz = csz + g.O * nI * P
    with nogil, parallel(num_threads=nt):
        col = <float*>fnn_alloc(csz + 64, sizeof(float))
        if col == NULL:
            fnn_flag_set(&failed)
        for it in prange(nch * ng, schedule="dynamic", chunksize=1):
            if col == NULL:
                continue
            ch = it // ng
            k = it % ng
            if tr:
                o0 = _cbound(g.C, ng, k)
                o1 = _cbound(g.C, ng, k + 1)
            else:
                o0 = _obound(g.O, ng, k)
                o1 = _obound(g.O, ng, k + 1)
            if o1 <= o0:
                continue
            n0 = ch * per
            n1 = n0 + per if n0 + per < g.N else g.N
            if nI > 1:
                dyc = col + csz - g.O * nI * P
                m = n0
                while m < n1:
                    m1 = m + nI if m + nI < n1 else n1
                    T = (m1 - m) * P
                    beta = 0 if m == n0 else 1
                    for n in range(m, m1):
                        for o in range(0 if tr else o0, g.O if tr else o1):
                            memcpy(dyc + o * T + (n - m) * P, gy + n * ys + o * P,
                                   P * sizeof(float))
                        _im2col_c(x + n * xs, col + (n - m) * P, g, 0, g.OH,
                                  o0 if tr else 0, o1 if tr else g.C, T)
                    if tr:
                        if gemm(False, True, <int>((o1 - o0) * KK), <int>g.O, <int>T, <float>1,
                                col, <int>T, dyc, <int>T, beta,
                                part + ch * ldo * K + o0 * KK * ldo, <int>ldo):
                            fnn_flag_set(&gfail)
                    else:
                        if gemm(False, True, <int>(o1 - o0), <int>K, <int>T, <float>1,
                                dyc + o0 * T, <int>T, col, <int>T, beta,
                                part + ch * g.O * K + o0 * K, <int>K):
                            fnn_flag_set(&gfail)
                    m = m1
                continue
            for n in range(n0, n1):
                r0 = 0
                while r0 < g.OH:
                    r1 = r0 + R if r0 + R < g.OH else g.OH
                    T = (r1 - r0) * g.OW
                    beta = 0 if (n == n0 and r0 == 0) else 1
                    if tr:
                        _im2col_c(x + n * xs, col, g, r0, r1, o0, o1, T)
                        if gemm(False, True, <int>((o1 - o0) * KK), <int>g.O, <int>T, <float>1,
                                col, <int>T, gy + n * ys + r0 * g.OW, <int>P, beta,
                                part + ch * ldo * K + o0 * KK * ldo, <int>ldo):
                            fnn_flag_set(&gfail)
                    else:
                        _im2col(x + n * xs, col, g, r0, r1)
                        if gemm(False, True, <int>(o1 - o0), <int>K, <int>T, <float>1,
                                gy + n * ys + o0 * P + r0 * g.OW, <int>P, col, <int>T, beta,
                                part + ch * g.O * K + o0 * K, <int>K):
                            fnn_flag_set(&gfail)
                    r0 = r1
        free(col)
    if failed:
        _raise_nomem(csz + 64, sizeof(float))
    if gfail:
        _raise_gemm_nomem()
    return 0


cdef bint _swg_tr(Geo* g):
    """The strided d_weight's GEMMs as im2col x dy^T (_swgrad_gemm, ldo > 0): few output
    channels (32 to 64; fewer go to BLAS) beside im2col's rows, e.g. conv_transpose2d's
    backward (its input's channels).  There dy x im2col^T had 6 row tiles of 12, the last
    of 4, and packed im2col's C*kh*kw columns for each image; the other way packs dy's O.
    With more output channels it ran slower: its part (C*kh*kw x O, written per image) and
    im2col (read in place, 12 row streams) outgrow the L2 (1 x 256 x 28 x 28 -> 512: 4.2
    vs 3.3 ms, one thread)."""
    return _SWG_TR and 32 <= g.O <= 64 and g.C * g.kh * g.kw > g.O


cdef bint _wgemm_ok(Geo* g):
    """d_weight as GEMMs of dy and im2col tiles on the own float32 kernel (_wgrad_gemm):
    AVX-512 builds, groups 1, more than one tap (or a 1x1 reading no padding), >= 16
    output channels."""
    return (_SWG_GEMM and FNN_HAVE_CIG != 0 and _sgz_on and g.direct and g.G == 1
            and (g.kh * g.kw > 1 or _is_plain_1x1(g)) and g.O >= 16
            and g.N * g.C * g.OH * g.OW > 0)


cdef bint _wgemm_first(Geo* g, Py_ssize_t nch):
    """A stride-1 d_weight as GEMMs (_wgrad_gemm) rather than on its direct kernels, where
    those run slow on wide layers:
    * Winograd's (3x3; its 16 x C x O partials of 2 MiB or more take one chunk of all
      images) with few 2 x 2 tiles in that chunk (<= 100: the depth of its transform-domain
      products), or with partials over 8 MiB (L2-sized output-channel groups, each of which
      transforms the whole input again).  1 x 256 x 14 x 14 -> 256: 1.43 -> 1.11 ms; 1 x 512
      x 14 x 14 -> 512: 9.1 -> 3.8 ms (2 threads); at 4 images (196 tiles) Winograd's is
      8% faster.
    * the others' (the 7 x 7 planes' 3x3, other kernels) with a weight of 2 MiB or more:
      the tap-list d_weight keeps the whole weight's sums per thread, the im2col path's
      tiles are two output rows.  2 x 512 x 7 x 7 -> 512: 10.2 -> 2.2 ms."""
    cdef Py_ssize_t wb
    if not (_WGEMM and _wgemm_ok(g)):
        return False
    if _wg_wgrad_ok(g, nch):
        wb = 16 * g.C * g.O * 4
        if wb > (8 << 20):
            return True
        return wb >= _WG_ONE_CHUNK and g.N * ((g.OH + 1) // 2) * ((g.OW + 1) // 2) <= 100
    return _wsize(g) * 4 >= _WG_ONE_CHUNK


def _fwd_on_winograd(tuple x_shape, tuple w_shape, tuple padding):
    """Tests and the bench: whether a float32 conv2d's forward (stride 1, groups 1,
    dilation 1, padding (top, bottom, left, right)) runs on Winograd F(2x2, 3x3)."""
    cdef Geo g = _geo(x_shape, w_shape, (1, 1), padding, (1, 1), 1)
    return bool(g.N * g.O * g.OH * g.OW > 0 and (_wg_fwd_ok(&g) or _wgs_ok(&g)))


def _wgrad_route(tuple x_shape, tuple w_shape, tuple stride, tuple padding):
    """Tests and the bench: the kernel a float32 conv2d's d_weight (groups 1, dilation 1,
    padding (top, bottom, left, right)) runs on -- "gemm" (_wgrad_gemm, stride 1),
    "winograd", or "other"."""
    cdef Geo g = _geo(x_shape, w_shape, stride, padding, (1, 1), 1)
    cdef Py_ssize_t per, nch = _chunks(&g, &per)
    if not _dx_as_conv(&g, padding) or g.N * g.O * g.OH * g.OW * g.C * g.kh * g.kw == 0:
        return "other"
    if _wgs_dw_ok(&g):
        return "winograd"
    if _wgemm_first(&g, nch):
        return "gemm"
    return "winograd" if _wg_wgrad_ok(&g, nch) else "other"


cdef cnp.ndarray _strided_wgrad(cnp.ndarray x, cnp.ndarray dy, Geo* g, Py_ssize_t nch,
                                Py_ssize_t per):
    """A strided conv2d's d_weight (float32, _twgrad_ok): as GEMMs (_wgrad_gemm) where
    _sdx_ok, else on the direct d_weight kernel over the input's phase planes (_swgrad),
    the threads on the fixed image chunks and (fewer chunks than threads) output-channel
    groups; the chunks' partials added in order."""
    if _SWG_GEMM and _sdx_ok(g):
        return _wgrad_gemm(x, dy, g, nch, per)
    cdef Py_ssize_t flops = g.N * g.O * g.OH * g.OW * g.C * g.kh * g.kw
    cdef int nt_all = _threads_for(flops, 1 << 18)
    cdef Py_ssize_t ng = _groups(nch, g.O, nt_all, 16)
    cdef cnp.ndarray part = np.empty((nch, _wsize(g)), dtype=np.float32)   # zeroed by _swgrad
    cdef const float* px = <const float*>_data(x, _xsize(g), F32)
    cdef const float* pdy = <const float*>_data(dy, _ysize(g), F32)
    cdef float* ppart = <float*>_data(part, nch * _wsize(g), F32)
    with nogil:
        _swgrad(px, pdy, ppart, nch, per, g, <int>(nch * ng if nch * ng < nt_all else nt_all),
                ng)
    return _swgrad_unpack(part[0] if nch == 1 else _sum_parts(part).astype(np.float32), g, ng,
                          (g.O, g.C, g.kh, g.kw))


cdef cnp.ndarray _wgrad_gemm(cnp.ndarray x, cnp.ndarray dy, Geo* g, Py_ssize_t nch,
                             Py_ssize_t per):
    """A conv2d's d_weight (float32, _wgemm_ok) as GEMMs of dy and im2col tiles
    (_swgrad_gemm), the threads on the fixed image chunks and (fewer chunks than threads)
    channel groups; the chunks' partials added in order.  Partials of 2 MiB or more: one
    chunk of all images (as the Winograd d_weight; a function of the shapes)."""
    cdef Py_ssize_t flops = g.N * g.O * g.OH * g.OW * g.C * g.kh * g.kw
    cdef int nt_all = _threads_for(flops, 1 << 18)
    cdef bint tr = _swg_tr(g)
    cdef Py_ssize_t ng, ldo = g.O if tr else 0
    if _wsize(g) * 4 >= _WG_ONE_CHUNK:
        nch = 1
        per = g.N
    cdef cnp.ndarray part = np.empty((nch, _wsize(g)), dtype=np.float32)
    cdef const float* px = <const float*>_data(x, _xsize(g), F32)
    cdef const float* pdy = <const float*>_data(dy, _ysize(g), F32)
    cdef float* ppart = <float*>_data(part, nch * _wsize(g), F32)
    # tr: groups of >= 24 rows and O >= 32 columns, so every group's GEMM runs on the own
    # kernel, as gemm routes them, and the bits do not depend on the groups
    ng = (_groups(nch, g.C, nt_all, max(8, (24 + g.kh * g.kw - 1) // (g.kh * g.kw)))
          if tr else _groups(nch, g.O, nt_all, 24))
    # small planes: several images a GEMM (whole images a tile)
    cdef Py_ssize_t nI = _imgs_per(g) if _IMGS and _sdx_rows(g) >= g.OH else 1
    with _blas_single():
        with nogil:
            _swgrad_gemm(px, pdy, ppart, nch, per, g,
                         <int>(nch * ng if nch * ng < nt_all else nt_all), ng, ldo, nI)
    dws = part[0] if nch == 1 else _sum_parts(part).astype(np.float32)
    if tr:
        return np.ascontiguousarray(dws.reshape(g.C * g.kh * g.kw, g.O).T).reshape(
            g.O, g.C, g.kh, g.kw)
    return dws.reshape(g.O, g.C, g.kh, g.kw)


# the strided backward's column tiles (_sdx_run, _swgrad_gemm): output rows such that all
# C*kh*kw rows of a tile stay within this many floats (4 MiB a thread; shapes only, so the
# same tiles at any thread count).  Whole images at ResNet's sizes (14 x 14 outputs of 256
# channels: 2304 x 196), so a GEMM's packing of the weight or of its d_weight block is
# done once an image, not once every two output rows as on the im2col path's 256 KiB tiles
cdef Py_ssize_t _SDX_TILE = 1 << 20


cdef inline Py_ssize_t _sdx_rows(Geo* g) noexcept nogil:
    """Output rows per column tile of the strided backward (_SDX_TILE; at least 1)."""
    cdef Py_ssize_t r = _SDX_TILE // (g.C * g.kh * g.kw * g.OW if g.OW > 0 else 1)
    if r < 1:
        r = 1
    return r if r < g.OH else g.OH


cdef bint _sdx_ok(Geo* g):
    """A strided conv2d's d_input as column tiles of W^T dy on the own float32 kernel (its
    transposed-A form: AVX-512 builds), scattered back by col2im, the threads on images
    and (fewer images than threads) channel groups: groups 1, a kernel of more than one
    tap.  The tap-list kernel ran the transposed convolution's phases at 140 GFLOP/s on 2
    cores (1 x 512 -> 256 channels, 14 x 14 -> 28 x 28)."""
    return (_SDX and FNN_HAVE_CIG != 0 and _sgz_on and FNN_SGZ_TRANS_A and g.direct
            and g.G == 1 and (g.sh > 1 or g.sw > 1) and g.kh * g.kw > 1 and g.O >= 16
            and g.N * g.C * g.OH * g.OW > 0)


cdef int _sdx_run(const float* w, const float* gy, float* dx, Geo* g, int nt) except -1 nogil:
    """dx of every image: per work item (image, channel group [c0, c1)), per tile of R
    output rows, col = W[:, c0*KK:c1*KK]^T dy[:, rows] (one GEMM of depth O), then col2im
    into dx's channels [c0, c1) (zeroed first).  A dx value's sum runs over the tiles in
    order, its (i, j) taps in order: the tiles depend on the shapes only and the groups
    only split channels, so the bits do not depend on the thread count."""
    cdef Py_ssize_t KK = g.kh * g.kw, K = g.C * KK, P = g.OH * g.OW
    cdef Py_ssize_t xs = g.C * g.H * g.W, ys = g.O * P
    cdef Py_ssize_t R = _sdx_rows(g), ng = 1, it, n, k
    cdef Py_ssize_t c0, c1, r0, r1, T
    cdef float* col = NULL
    cdef int failed = 0, gfail = 0
    if g.N < nt:
        ng = (nt + g.N - 1) // g.N
        if ng > g.C // 4:
            ng = g.C // 4 if g.C >= 8 else 1
    with nogil, parallel(num_threads=nt):
        col = <float*>fnn_alloc(K * R * g.OW + 64, sizeof(float))
        if col == NULL:
            fnn_flag_set(&failed)
        for it in prange(g.N * ng, schedule="dynamic", chunksize=1):
            if col == NULL:
                continue
            n = it // ng
            k = it % ng
            c0 = g.C * k // ng
            c1 = g.C * (k + 1) // ng
            if c0 >= c1:
                continue
            memset(dx + n * xs + c0 * g.H * g.W, 0, (c1 - c0) * g.H * g.W * sizeof(float))
            r0 = 0
            while r0 < g.OH:
                r1 = r0 + R if r0 + R < g.OH else g.OH
                T = (r1 - r0) * g.OW
                if gemm(True, False, <int>((c1 - c0) * KK), <int>T, <int>g.O, <float>1,
                        w + c0 * KK, <int>K, gy + n * ys + r0 * g.OW, <int>P, <float>0, col,
                        <int>T):
                    fnn_flag_set(&gfail)
                _col2im_c(col, dx + n * xs, g, r0, r1, c0, c1)
                r0 = r1
        free(col)
    if failed:
        _raise_nomem(K * R * g.OW + 64, sizeof(float))
    if gfail:
        _raise_gemm_nomem()
    return 0


cdef cnp.ndarray _swgrad_unpack(cnp.ndarray acc, Geo* g, Py_ssize_t ng, object wshape):
    """_swgrad's summed float32 partial (per group k, (tap, c, o - o0)) in the weight's
    (O, C, kh, kw) order: a C loop over the output channels (NumPy's transposes of the
    groups took ~1 ms a call at 512 x 256 x 3 x 3)."""
    cdef Py_ssize_t k, ob, o0, o1, og, c, t, r, KK = g.kh * g.kw, C = g.C
    cdef cnp.ndarray dw = np.empty(wshape, dtype=np.float32)
    cdef const float* pa = <const float*>_data(acc, g.O * C * KK, F32)
    cdef float* pd = <float*>_data(dw, g.O * C * KK, F32)
    cdef const float* src
    cdef float* dst
    cdef int nt = _threads_for(g.O * C * KK, 1 << 17)
    with nogil:
        for k in range(ng):
            o0 = _wbound(g.O, ng, k)
            o1 = _wbound(g.O, ng, k + 1)
            og = o1 - o0
            # blocks of 16 output channels (the groups are multiples of 16): per channel c
            # and tap, one 64-byte row of the partial to 16 filters
            for ob in prange(o0, o1, 16, schedule="static", num_threads=nt):
                for c in range(C):
                    src = pa + KK * C * o0 + c * og + (ob - o0)
                    dst = pd + (ob * C + c) * KK
                    for t in range(KK):
                        for r in range(16):
                            dst[r * C * KK + t] = src[t * C * og + r]
    return dw


cdef int _tboth(const float* z, const float* gx, float* y, float* part, const float* ap,
                const Py_ssize_t* toff, const Py_ssize_t* runs, DPlan* d, Py_ssize_t nch,
                Py_ssize_t per, Geo* g, int nt, double* dbp) except -1 nogil:
    """conv_transpose2d's backward with both gradients on the direct kernels, sharing each
    image's phase planes: per fixed chunk of images (partial ch of d_weight, added in chunk
    order by the caller), per image: the planes and d_input (_direct_image), then d_weight
    (_twgrad_image) from the same planes.  part[ch] is left in the accumulator's
    (kh*kw, C, O) order.  dbp (N x C float64, or NULL): the per-(image, channel) sums of
    z, as _bias_part takes them (d_bias, summed while the image is in cache)."""
    cdef Py_ssize_t ch, n, n0, n1, c, P = g.OH * g.OW, KK = g.kh * g.kw
    cdef Py_ssize_t zs = g.C * g.H * g.W, ys = g.O * P, wsz = g.O * g.C * KK
    cdef Py_ssize_t xsz = (d.Cx * d.PR + d.slack) * d.We + 64, csz = d.O * d.ldc + 64
    cdef Py_ssize_t tsz = P * g.O + KK * g.C * g.O + 64
    cdef Py_ssize_t aoff[64]
    cdef Py_ssize_t boff[64]
    cdef float* buf = NULL
    cdef int failed = 0
    _twgrad_offsets(g, aoff, boff)
    with nogil, parallel(num_threads=nt):
        buf = <float*>fnn_alloc(xsz + csz + tsz, sizeof(float))
        if buf == NULL:
            fnn_flag_set(&failed)
        else:   # the over-read past the last plane: finite values, never used
            memset(buf + d.Cx * d.PR * d.We, 0, (d.slack * d.We + 64) * sizeof(float))
        for ch in prange(nch, schedule="dynamic", chunksize=1):
            if buf == NULL:
                continue
            n0 = ch * per
            n1 = n0 + per
            if n1 > g.N:
                n1 = g.N
            memset(buf + xsz + csz + P * g.O, 0, KK * g.C * g.O * sizeof(float))
            for n in range(n0, n1):
                _direct_image(z + n * zs, ap, toff, runs, NULL, y + n * ys, buf, buf + xsz, d)
                if dbp != NULL:
                    for c in range(g.C):
                        dbp[n * g.C + c] = _sum(z + n * zs + c * g.H * g.W, g.H * g.W)
                _twgrad_image(buf, gx + n * ys, buf + xsz + csz, buf + xsz + csz + P * g.O,
                              aoff, boff, g)
            # the chunk's partial in the accumulator's (tap, c, o) order: one
            # contiguous copy (the caller puts the sum in the weight's order once)
            memcpy(part + ch * wsz, buf + xsz + csz + P * g.O, wsz * sizeof(float))
        free(buf)
    if failed:
        _raise_nomem(xsz + csz + tsz, sizeof(float))
    return 0


cdef tuple _tbwd(cnp.ndarray dy, cnp.ndarray weight, cnp.ndarray x, Geo* g, bint want_db):
    """(conv2d(dy, weight), d_weight, d_bias or None) of conv_transpose2d in one pass (fixed
    image chunks, partials added in chunk order, as conv2d_backward).  d_bias comes from
    the fused direct pass only (want_db); None otherwise (the caller takes _bias_grad)."""
    cdef Py_ssize_t per, nch = _chunks(g, &per)
    cdef cnp.ndarray dx = np.empty((g.N, g.O, g.OH, g.OW), dtype=dy.dtype)
    cdef cnp.ndarray part = np.empty((nch,) + (<object>weight).shape, dtype=dy.dtype)
    cdef const float* pz
    cdef const float* pgx
    cdef float* pdx
    cdef float* pp
    cdef const float* pa
    cdef const Py_ssize_t* pt
    cdef const Py_ssize_t* pr
    cdef double* pdbp = NULL
    cdef int nt = _threads_for(g.N * g.O * g.OH * g.OW * g.Cg * g.kh * g.kw, 1 << 18)
    if nt > nch:
        nt = <int>nch
    cdef bint f32 = dy.dtype == np.float32
    cdef cnp.ndarray dxg = dx
    cdef cnp.ndarray ap, toff, runs
    cdef DPlan d
    if f32 and _cig_ok(g) and _twgrad_ok(g) and cnp.PyArray_IS_C_CONTIGUOUS(weight):
        # d_input: the strided conv2d of dy as an implicit GEMM; d_weight on the direct
        # d_weight kernel over dy's phase planes
        _cig_fwd(dy, weight, NULL, dx, g)
        return dx, _strided_wgrad(dy, x, g, nch, per), None
    plan = _tdx_plan(weight, g, &d) if f32 else None
    if plan is not None:
        ap, toff, runs, zeros = plan    # zeros: d.zeros' array, alive while d is used
        if _twgrad_ok(g):
            # both on the direct kernels, one pass sharing each image's phase planes
            pz = <const float*>_data(dy, _xsize(g), F32)
            pgx = <const float*>_data(x, _ysize(g), F32)
            pdx = <float*>_data(dx, _ysize(g), F32)
            pp = <float*>_data(part, nch * _wsize(g), F32)
            pa = <const float*>_data(ap, cnp.PyArray_SIZE(ap), F32)
            pt = <const Py_ssize_t*>_data(toff, cnp.PyArray_SIZE(toff), INTP)
            pr = <const Py_ssize_t*>_data(runs, _RUN, INTP)
            dbp = np.zeros((g.N, g.C), dtype=np.float64) if want_db else None
            if want_db:
                pdbp = <double*>_data(dbp, g.N * g.C, F64)
            with nogil:
                _tboth(pz, pgx, pdx, pp, pa, pt, pr, &d, nch, per, g, nt, pdbp)
            # the summed partials, (kh*kw, C, O), in the weight's (O, C, kh, kw) order
            dws = part[0] if nch == 1 else _sum_parts(part)
            dws = dws.reshape(g.kh * g.kw, g.C, g.O).transpose(2, 1, 0)
            return (dx, np.ascontiguousarray(dws.reshape((<object>weight).shape), dtype=dy.dtype),
                    _sum_parts(dbp).astype(dy.dtype) if want_db else None)
        # d_input on the direct kernel; d_weight alone on the fused pass
        _run_direct(dy, ap, toff, runs, NULL, dx, &d, g.N * g.O * g.OH * g.OW * g.C * g.kh * g.kw)
        dxg = None
    with _blas_single() if nt > 1 else _no_context():
        if f32:
            _tbwd_run(<float>0, dy, weight, x, dxg, part, nch, per, g, nt)
        else:
            _tbwd_run(<double>0, dy, weight, x, dxg, part, nch, per, g, nt)
    return dx, (part[0] if nch == 1 else _sum_parts(part).astype(dy.dtype)), None


cdef bint _dx_as_conv(Geo* g, tuple padding):
    """Stride 1 (not 1x1): d_input is the convolution of dy with the flipped, transposed
    weights and padding dilation*(k-1) - padding, which must be >= 0 on every side."""
    cdef Py_ssize_t eh = g.dh * (g.kh - 1), ew = g.dw * (g.kw - 1)
    return (g.sh == 1 and g.sw == 1 and not _is_1x1(g) and padding[0] <= eh
            and padding[1] <= eh and padding[2] <= ew and padding[3] <= ew)


cdef bint _dx_1x1_imgs(cnp.ndarray dy, cnp.ndarray weight, cnp.ndarray dx, Geo* g,
                       Py_ssize_t flops):
    """A plain 1x1 conv2d's d_input (_is_plain_1x1), W^T dy, over small planes (_imgs_fwd_ok
    of the 1x1 conv with C outputs): W transposed once (a C loop in 16 x 16 tiles) and the
    images' positions side by side (_imgs_fwd); strided, scattered onto the positions the
    forward read (zeros elsewhere).  -> whether it ran."""
    cdef Geo t
    cdef cnp.ndarray wt
    cdef const float* pw
    cdef float* pwt
    cdef Py_ssize_t ob, nob = (g.O + 15) // 16
    cdef int ntw
    cdef cnp.ndarray dsm
    if not (_is_plain_1x1(g) and g.G == 1 and cnp.PyArray_IS_C_CONTIGUOUS(weight)):
        return False
    t = _geo((<object>dy).shape, (g.C, g.O, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1)
    if not _imgs_fwd_ok(&t):
        return False
    wt = np.empty((g.C, g.O, 1, 1), dtype=np.float32)
    pw = <const float*>_data(weight, g.O * g.C, F32)
    pwt = <float*>_data(wt, g.O * g.C, F32)
    ntw = _threads_for(g.O * g.C, 1 << 17)
    with nogil:
        for ob in prange(nob, schedule="static", num_threads=ntw):
            fnn_flip_transpose_oct(pw, g.O, g.C, 1, ob * 16,
                                   g.O if ob * 16 + 16 > g.O else ob * 16 + 16, pwt)
    if g.sh == 1 and g.sw == 1:
        _imgs_fwd_call(dy, wt, NULL, dx, &t, _threads_for(flops, 1 << 18))
        return True
    # strided: the positions read get W^T dy, the others 0
    dsm = np.empty((g.N, g.C, g.OH, g.OW), dtype=np.float32)
    _imgs_fwd_call(dy, wt, NULL, dsm, &t, _threads_for(flops, 1 << 18))
    dx[...] = 0
    dx[:, :, ::g.sh, ::g.sw] = dsm
    return True


cdef _dx_by_conv(cnp.ndarray dy, cnp.ndarray weight, cnp.ndarray dx, Geo* g, tuple padding,
                 tuple dilation, Py_ssize_t groups, Py_ssize_t flops, bint f32):
    """dx = conv2d(dy, wt) through the forward kernels (row im2col + GEMM), where
    wt[g*Cg + c, o, i, j] = w[g*Og + o, c, kh-1-i, kw-1-j]."""
    cdef Py_ssize_t Og = g.O // g.G, eh = g.dh * (g.kh - 1), ew = g.dw * (g.kw - 1)
    cdef Geo t
    cdef int nt
    cdef cnp.ndarray wt
    cdef Py_ssize_t ob, nob = (g.O + 15) // 16, T = g.kh * g.kw
    cdef const float* pw
    cdef float* pwt
    cdef int ntw
    cdef int nt_all = _threads_for(flops, 1 << 18)
    cdef WSrc src
    t = _geo((<object>dy).shape, (g.C, Og, g.kh, g.kw), (1, 1),
             (eh - padding[0], eh - padding[1], ew - padding[2], ew - padding[3]),
             dilation, groups)
    if (g.G == 1 and f32 and cnp.PyArray_IS_C_CONTIGUOUS(weight) and _wg_fwd_ok(&t)):
        # Winograd reads the flipped, transposed filters from the weight itself
        src.w = <const float*>_data(weight, g.O * g.C * T, F32)
        src.rs = 9
        src.cs = g.C * 9
        src.ts = -1
        src.flip = 1
        _wg_fwd_call(dy, &src, NULL, dx, &t, nt_all)
        return
    if g.G == 1 and f32 and cnp.PyArray_IS_C_CONTIGUOUS(weight) and _wgs_ok(&t):
        # small planes on Winograd: the weight's flipped filters, transposed in the GEMMs
        _wgs_call(dy, weight, True, NULL, dx, &t, nt_all)
        return
    if (FNN_HAVE_CVD_RAW and g.G == 1 and f32 and cnp.PyArray_IS_C_CONTIGUOUS(weight)
            and _cv3_ok(&t) and not (_imgs_fwd_ok(&t) and t.N >= 4)):
        # (small planes of >= 4 images: the flipped weight copied below for _imgs_fwd; at
        # 2 images the copy weighed more than the GEMM won: 2 x 512 x 7 x 7 2.17 vs 2.52 ms)
        # the direct 3x3 kernel reads the flipped, transposed filters in place: rows are
        # the weight's input channels, channels its output channels, taps from the last
        src.w = <const float*>_data(weight, g.O * g.C * T, F32) + (T - 1)
        src.rs = T
        src.cs = g.C * T
        src.ts = -1
        src.flip = 1
        _cv3_fwd_call(dy, weight, &src, NULL, dx, &t, nt_all)
        return
    if g.G == 1 and weight.dtype == np.float32 and cnp.PyArray_IS_C_CONTIGUOUS(weight):
        # a C loop in 16 x 16 filter tiles (NumPy's flip and transpose: ~2 ms at 512 x 512
        # x 3 x 3), tiles of output channels over the threads
        wt = np.empty((g.C, g.O, g.kh, g.kw), dtype=np.float32)
        pw = <const float*>_data(weight, g.O * g.C * T, F32)
        pwt = <float*>_data(wt, g.O * g.C * T, F32)
        ntw = _threads_for(g.O * g.C * T, 1 << 17)
        with nogil:
            for ob in prange(nob, schedule="static", num_threads=ntw):
                fnn_flip_transpose_oct(pw, g.O, g.C, T, ob * 16,
                                       g.O if ob * 16 + 16 > g.O else ob * 16 + 16, pwt)
    else:
        wt = np.ascontiguousarray(
            (<object>weight).reshape(g.G, Og, g.Cg, g.kh, g.kw)[:, :, :, ::-1, ::-1]
            .transpose(0, 2, 1, 3, 4).reshape(g.C, Og, g.kh, g.kw))
    nt = nt_all if nt_all < t.N else <int>t.N
    if nt > 1:
        with _blas_single():
            _conv_fwd_call(dy, wt, NULL, dx, &t, nt, nt_all, f32)
    else:
        _conv_fwd_call(dy, wt, NULL, dx, &t, nt, nt_all, f32)


cdef _conv_bwd_call(cnp.ndarray x, cnp.ndarray weight, cnp.ndarray dy, object dx_or_none,
                    object part_or_none, Py_ssize_t nch, Py_ssize_t per, Geo* g, int nt, bint f32):
    if f32:
        _bwd_gemm_run(<float>0, x, weight, dy, dx_or_none, part_or_none, nch, per, g, nt)
    else:
        _bwd_gemm_run(<double>0, x, weight, dy, dx_or_none, part_or_none, nch, per, g, nt)


cdef cnp.ndarray _sum_parts(cnp.ndarray part):
    """Sum over axis 0 in double, in index order (np.add.reduce on axis 0 adds rows in
    order, elementwise, so it is deterministic)."""
    if part.shape[0] == 0:
        return np.zeros((<object>part).shape[1:], dtype=np.float64)
    cdef cnp.ndarray acc = np.array(part[0], dtype=np.float64)
    cdef Py_ssize_t i
    for i in range(1, part.shape[0]):
        acc += part[i]
    return acc
