/* Philox4x32-10 counter-based generator; the same layout as fastnn/_random.py
 * (key = seed halves, counter = (block lo, block hi, offset lo, offset hi),
 *  block = i / 4, lane = i % 4, uniform = (r >> 8) * 2^-24).
 * Pure function of (seed, offset, i): identical masks at any thread count. */
#ifndef FNN_PHILOX_H
#define FNN_PHILOX_H
#include <stdint.h>

typedef struct { uint32_t v[4]; } fnn_philox_out;

static inline fnn_philox_out fnn_philox4x32(uint64_t block, uint64_t offset, uint64_t seed) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32);
    uint32_t c2 = (uint32_t)offset, c3 = (uint32_t)(offset >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; ++r) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    fnn_philox_out o = {{c0, c1, c2, c3}};
    return o;
}

/* uniform in [0, 1) with 24 random bits: exact in float and double */
static inline float fnn_u24_to_float(uint32_t r) { return (float)(r >> 8) * (1.0f / 16777216.0f); }

#endif
