/* The CPU's cache sizes, for kernels that size their blocks to a cache level: Linux's
 * sysfs entries of cpu0 (the kernel's reading of the CPU's cache topology), else glibc's
 * sysconf.  sysfs comes first because sysconf can be wrong in a VM: on a Zen 3 VM it said
 * 256 MiB for a 32 MiB L3 (sysfs: 32768K).  Each call reads the files: callers cache the
 * answer (once per module), outside their parallel regions or with an atomic store. */
#ifndef FNN_CACHE_H
#define FNN_CACHE_H
#include <stddef.h>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#if defined(__linux__)
#include <stdio.h>
#include <string.h>
/* cpu0's data or unified cache of this level in bytes (level 0: the largest level's),
 * from sysfs; 0 where unknown */
static inline ptrdiff_t fnn_cache_bytes_sysfs(int want) {
    ptrdiff_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; ++i) {
        char path[96], buf[64];
        int level = 0;
        long size = 0;
        char unit = 0;
        FILE* f;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if ((f = fopen(path, "r")) == NULL) break;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        if (want > 0 && level != want) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if ((f = fopen(path, "r")) == NULL) continue;
        buf[0] = 0;
        if (fgets(buf, sizeof buf, f) == NULL) buf[0] = 0;
        fclose(f);
        if (strncmp(buf, "Instruction", 11) == 0) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if ((f = fopen(path, "r")) == NULL) continue;
        if (fscanf(f, "%ld%c", &size, &unit) < 1) size = 0;
        fclose(f);
        if (size <= 0) continue;
        ptrdiff_t n = (ptrdiff_t)size * (unit == 'K' || unit == 'k' ? (ptrdiff_t)1 << 10
                                         : unit == 'M' || unit == 'm' ? (ptrdiff_t)1 << 20
                                         : unit == 'G' || unit == 'g' ? (ptrdiff_t)1 << 30 : 1);
        if (level > best_level || (level == best_level && n > best)) {
            best_level = level;
            best = n;
        }
    }
    return best;
}
#else
static inline ptrdiff_t fnn_cache_bytes_sysfs(int want) { (void)want; return 0; }
#endif

/* cpu0's data or unified cache of this level (2 or 3; 0: the last level) in bytes, from
 * sysfs, else sysconf; 0 where neither says */
static inline ptrdiff_t fnn_cache_bytes(int level) {
    ptrdiff_t n = fnn_cache_bytes_sysfs(level);
    if (n <= 0) {
        long s = -1;
#if defined(_SC_LEVEL2_CACHE_SIZE)
        if (level == 2) s = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
#if defined(_SC_LEVEL3_CACHE_SIZE)
        if (level == 3 || level == 0) s = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
        n = s > 0 ? (ptrdiff_t)s : 0;
    }
    return n;
}
#endif
