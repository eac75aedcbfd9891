/* cpu — CPUID + XGETBV feature detection, cached once per process. See cpu.h.
 *
 * A feature is reported only when CPUID has the bit and the OS has enabled the register state
 * in XCR0, because an OS (or hypervisor) that does not save ZMM registers makes AVX-512 code
 * fault or silently corrupt state even though CPUID lists it. The result is normalized so that
 * kernel dispatch can rely on a tier order: every AVX-512 sub-feature implies avx512f, and
 * avx512f implies avx2, fma and f16c (no real CPU breaks this; a VM that hides AVX2 but shows
 * AVX-512 gets the AVX2 tier's fallbacks, never a half-supported one). The same normalization
 * runs after PH_CPU_DISABLE masking, so "avx2" in the list also turns AVX-512 off.
 */
#include "base/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CPU_X86 1
#else
#define CPU_X86 0
#endif

#if CPU_X86
/* XCR0 state components: bit 1 SSE (XMM), bit 2 AVX (upper YMM), bits 5-7 AVX-512 (opmask,
 * upper halves of ZMM0-15, ZMM16-31). */
#define XCR0_AVX    0x06u
#define XCR0_AVX512 0xe6u

static unsigned long long read_xcr0(void) {
  unsigned int lo, hi;
  /* xgetbv by opcode bytes would work with older assemblers too, but every toolchain we build
   * with knows the mnemonic. ecx = 0 selects XCR0. */
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((unsigned long long)hi << 32) | lo;
}

static ph_cpu_features detect_raw(void) {
  ph_cpu_features f;
  memset(&f, 0, sizeof f);
  unsigned int a, b, c, d;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return f;
  unsigned int ecx1 = c;
  int osxsave = (ecx1 >> 27) & 1u;
  int avx = (ecx1 >> 28) & 1u;
  if (!osxsave || !avx) return f; /* without OSXSAVE xgetbv itself would fault */
  unsigned long long xcr0 = read_xcr0();
  int os_avx = (xcr0 & XCR0_AVX) == XCR0_AVX;
  int os_avx512 = (xcr0 & XCR0_AVX512) == XCR0_AVX512;
  if (!os_avx) return f;

  f.fma = (ecx1 >> 12) & 1u;
  f.f16c = (ecx1 >> 29) & 1u;

  unsigned int max_leaf = __get_cpuid_max(0, NULL);
  if (max_leaf < 7) return f;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  unsigned int max_subleaf7 = a;
  unsigned int ebx7 = b, ecx7 = c;
  f.avx2 = (ebx7 >> 5) & 1u;
  if (os_avx512) {
    f.avx512f = (ebx7 >> 16) & 1u;
    f.avx512bw = (ebx7 >> 30) & 1u;
    f.avx512vl = (ebx7 >> 31) & 1u;
    f.avx512_vnni = (ecx7 >> 11) & 1u;
    if (max_subleaf7 >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = (a >> 5) & 1u;
  }
  return f;
}
#else
static ph_cpu_features detect_raw(void) {
  ph_cpu_features f;
  memset(&f, 0, sizeof f);
  return f;
}
#endif

/* Enforces the tier order described at the top of the file. */
static void normalize(ph_cpu_features *f) {
  if (!f->avx2 || !f->fma || !f->f16c) f->avx512f = 0;
  if (!f->avx512f) {
    f->avx512bw = 0;
    f->avx512vl = 0;
    f->avx512_vnni = 0;
    f->avx512_bf16 = 0;
  }
}

/* Compares the token [s, s+n) with a name, ignoring nothing: tokens are already trimmed. */
static int token_is(const char *s, size_t n, const char *name) {
  return strlen(name) == n && memcmp(s, name, n) == 0;
}

static int is_space(char ch) { return ch == ' ' || ch == '\t'; }

/* Clears the features named in a comma list. Unknown names are ignored rather than rejected:
 * the variable is a testing aid, and a typo must not change behaviour beyond the typo. */
static void apply_disable(ph_cpu_features *f, const char *list) {
  if (!list) return;
  const char *p = list;
  while (*p) {
    while (*p == ',' || is_space(*p)) p++;
    const char *start = p;
    while (*p && *p != ',') p++;
    const char *end = p;
    while (end > start && is_space(end[-1])) end--;
    size_t n = (size_t)(end - start);
    if (n == 0) continue;
    if (token_is(start, n, "avx2"))
      f->avx2 = 0;
    else if (token_is(start, n, "fma"))
      f->fma = 0;
    else if (token_is(start, n, "f16c"))
      f->f16c = 0;
    else if (token_is(start, n, "avx512") || token_is(start, n, "avx512f"))
      f->avx512f = 0;
    else if (token_is(start, n, "avx512bw"))
      f->avx512bw = 0;
    else if (token_is(start, n, "avx512vl"))
      f->avx512vl = 0;
    else if (token_is(start, n, "vnni") || token_is(start, n, "avx512_vnni"))
      f->avx512_vnni = 0;
    else if (token_is(start, n, "bf16") || token_is(start, n, "avx512_bf16"))
      f->avx512_bf16 = 0;
  }
}

ph_cpu_features cpu_detect_uncached(const char *disable_list) {
  ph_cpu_features f = detect_raw();
  normalize(&f);
  apply_disable(&f, disable_list);
  normalize(&f);
  return f;
}

ph_cpu_features ph_cpu_detect(void) { return cpu_detect_uncached(getenv("PH_CPU_DISABLE")); }

static pthread_once_t cached_once = PTHREAD_ONCE_INIT;
static ph_cpu_features cached;

static void detect_once(void) { cached = ph_cpu_detect(); }

const ph_cpu_features *cpu_features(void) {
  /* pthread_once gives the happens-before edge every later reader needs. */
  pthread_once(&cached_once, detect_once);
  return &cached;
}

const char *cpu_features_string(const ph_cpu_features *f, char *buf, unsigned long buf_bytes) {
  if (!buf || buf_bytes == 0) return buf;
  buf[0] = '\0';
  if (!f) return buf;
  const struct {
    int on;
    const char *name;
  } names[] = {
      {f->avx2, "avx2"},
      {f->fma, "fma"},
      {f->f16c, "f16c"},
      {f->avx512f, "avx512f"},
      {f->avx512bw, "avx512bw"},
      {f->avx512vl, "avx512vl"},
      {f->avx512_vnni, "avx512_vnni"},
      {f->avx512_bf16, "avx512_bf16"},
  };
  size_t pos = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!names[i].on) continue;
    /* Whole names only: a truncated list must not name a feature that is not there. */
    size_t need = strlen(names[i].name) + (pos ? 1 : 0);
    if (pos + need + 1 > buf_bytes) break;
    if (pos) buf[pos++] = ' ';
    memcpy(buf + pos, names[i].name, strlen(names[i].name));
    pos += strlen(names[i].name);
    buf[pos] = '\0';
  }
  return buf;
}
