/* cpu — which SIMD instruction sets this CPU and OS can run.
 *
 * A feature counts only when CPUID reports it AND the OS saves its register state (XGETBV:
 * XMM|YMM for AVX*, plus opmask|ZMM_Hi256|Hi16_ZMM for AVX-512). Detected once, cached; safe to
 * call from any thread. The env var PH_CPU_DISABLE="avx512,bf16,..." masks features off, so
 * fallbacks can be tested on a machine that has them.
 */
#ifndef PH_BASE_CPU_H
#define PH_BASE_CPU_H

#include "pagedhybrid.h"

/* Cached ph_cpu_detect() result. */
const ph_cpu_features *cpu_features(void);

/* Detects without the cache, masking the features named in disable_list (same syntax as
 * PH_CPU_DISABLE; NULL or "" masks nothing). For tests of the masking itself. */
ph_cpu_features cpu_detect_uncached(const char *disable_list);

/* Writes a short space-separated list of usable features ("avx2 fma avx512f ..."). */
const char *cpu_features_string(const ph_cpu_features *f, char *buf, unsigned long buf_bytes);

#endif /* PH_BASE_CPU_H */
