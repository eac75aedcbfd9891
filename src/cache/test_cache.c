/* test_cache — block pool, block tables, KV page buffers and the fixed-state slot pool. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/block_pool.h"
#include "cache/hybrid_cache.h"
#include "cache/kv_buffers.h"
#include "cache/state_pool.h"
#include "check.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) { /* xorshift64*, uniform enough for op selection */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32) % n;
}

/* ---- block pool ------------------------------------------------------------------------------ */

static void test_pool_basics(void) {
  diag d;
  block_pool *p = NULL;
  CHECK_STATUS(block_pool_create(0, &p, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(block_pool_create(5, &p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_free_count(p), 4);
  int32_t ids[4] = {0};
  CHECK_STATUS(block_pool_alloc_n(p, 2, ids, &d), PH_OK, d.msg);
  CHECK_EQ_INT(ids[0], 1); /* ascending at start, never the null block */
  CHECK_EQ_INT(ids[1], 2);
  CHECK_STATUS(block_pool_decref_n(p, 1, &ids[0], &d), PH_OK, d.msg);
  int32_t more[3] = {0};
  CHECK_STATUS(block_pool_alloc_n(p, 3, more, &d), PH_OK, d.msg);
  CHECK_EQ_INT(more[0], 1); /* LIFO: the freed id (a committed page) is handed out first */
  CHECK_EQ_INT(more[1], 3);
  CHECK_EQ_INT(more[2], 4);
  CHECK_EQ_INT(block_pool_free_count(p), 0);
  /* double free and bad ids name the id, change nothing */
  int32_t twice[2] = {3, 3};
  CHECK_STATUS(block_pool_decref_n(p, 2, twice, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "block id 3");
  CHECK_CONTAINS(d.msg, "double free");
  CHECK_EQ_INT(block_pool_refcount(p, 3), 1);
  int32_t null_id = 0, big = 5;
  CHECK_STATUS(block_pool_decref_n(p, 1, &null_id, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "null block");
  CHECK_STATUS(block_pool_decref_n(p, 1, &big, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "block id 5");
  CHECK_STATUS(block_pool_incref_n(p, 1, &null_id, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* shared blocks come back only at refcount 0 */
  CHECK_STATUS(block_pool_incref_n(p, 1, &more[0], &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_refcount(p, more[0]), 2);
  CHECK_STATUS(block_pool_decref_n(p, 1, &more[0], &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_free_count(p), 0);
  CHECK_STATUS(block_pool_decref_n(p, 1, &more[0], &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_free_count(p), 1);
  CHECK_STATUS(block_pool_incref_n(p, 1, &more[0], &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "free");
  block_pool_free(p);
  block_pool_free(NULL);
}

/* Freed ids are handed out again before untouched ones: KV pages are committed lazily, so a pool
 * that walked through every id (a FIFO queue did) made each short request touch a new page:
 * ~9 KB of resident memory per request of `run` on the tiny model, up to the whole budget. */
static void test_pool_reuses_freed(void) {
  diag d;
  block_pool *p = NULL;
  CHECK_STATUS(block_pool_create(1000, &p, &d), PH_OK, d.msg);
  int32_t max_id = 0;
  for (int round = 0; round < 5000; round++) {
    int32_t ids[3];
    const int32_t n = 1 + round % 3;
    CHECK_STATUS(block_pool_alloc_n(p, n, ids, &d), PH_OK, d.msg);
    for (int32_t i = 0; i < n; i++) max_id = ids[i] > max_id ? ids[i] : max_id;
    CHECK_STATUS(block_pool_decref_n(p, n, ids, &d), PH_OK, d.msg);
  }
  CHECK_EQ_INT(max_id, 3); /* never more ids than were held at once */
  /* a released table's ids come back in their order */
  int32_t a[3], b[3];
  CHECK_STATUS(block_pool_alloc_n(p, 3, a, &d), PH_OK, d.msg);
  CHECK_STATUS(block_pool_decref_n(p, 3, a, &d), PH_OK, d.msg);
  CHECK_STATUS(block_pool_alloc_n(p, 3, b, &d), PH_OK, d.msg);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(b[i], a[i]);
  block_pool_free(p);
}

static void test_all_or_nothing(void) {
  diag d;
  block_pool *p = NULL;
  CHECK_STATUS(block_pool_create(9, &p, &d), PH_OK, d.msg); /* 8 usable */
  int32_t ids[16];
  memset(ids, 0x7f, sizeof ids);
  CHECK_STATUS(block_pool_alloc_n(p, 6, ids, &d), PH_OK, d.msg);
  int32_t probe[4] = {-7, -7, -7, -7};
  CHECK_STATUS(block_pool_alloc_n(p, 3, probe, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, "3 blocks requested, 2 free");
  CHECK_EQ_INT(probe[0], -7); /* untouched */
  CHECK_EQ_INT(block_pool_free_count(p), 2);
  /* block tables: reserve fails whole, the table keeps what it had */
  block_table bt;
  block_table_init(&bt);
  CHECK_STATUS(block_table_reserve(&bt, p, 16, 16, &d), PH_OK, d.msg); /* 1 block */
  CHECK_EQ_INT(bt.n_blocks, 1);
  CHECK_STATUS(block_table_reserve(&bt, p, 16 * 3, 16, &d), PH_ERR_LIMIT, d.msg);
  CHECK_EQ_INT(bt.n_blocks, 1);
  CHECK_EQ_INT(block_pool_free_count(p), 1);
  CHECK_STATUS(block_table_reserve(&bt, p, 17, 16, &d), PH_OK, d.msg); /* just the missing one */
  CHECK_EQ_INT(bt.n_blocks, 2);
  CHECK_EQ_INT(block_pool_free_count(p), 0);
  CHECK_STATUS(block_table_reserve(&bt, p, 20, 16, &d), PH_OK, d.msg); /* nothing missing */
  CHECK_STATUS(block_table_release(&bt, p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(bt.n_blocks, 0);
  CHECK_STATUS(block_pool_decref_n(p, 6, ids, &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_free_count(p), 8);
  CHECK_EQ_INT(block_table_blocks_for(0, 16), 0);
  CHECK_EQ_INT(block_table_blocks_for(1, 16), 1);
  CHECK_EQ_INT(block_table_blocks_for(-1, 16), -1);
  CHECK_EQ_INT(block_table_blocks_for(INT64_MAX, 16), -1); /* no overflow to a small count */
  CHECK_EQ_INT(block_table_blocks_for(INT64_MAX - 3, (int32_t)1 << 30), -1);
  CHECK_STATUS(block_table_reserve(&bt, p, 5, 0, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  block_pool_free(p);
}

static void test_pack_rows(void) {
  diag d;
  block_pool *p = NULL;
  CHECK_STATUS(block_pool_create(32, &p, &d), PH_OK, d.msg);
  block_table a, b, c;
  block_table_init(&a);
  block_table_init(&b);
  block_table_init(&c);
  CHECK_STATUS(block_table_reserve(&a, p, 9, 4, &d), PH_OK, d.msg);   /* 3 blocks: 1 2 3 */
  CHECK_STATUS(block_table_reserve(&b, p, 4, 4, &d), PH_OK, d.msg);   /* 1 block: 4 */
  CHECK_STATUS(block_table_share(&c, p, 2, a.ids, &d), PH_OK, d.msg); /* prefix 1 2 */
  CHECK_STATUS(block_table_reserve(&c, p, 10, 4, &d), PH_OK, d.msg);  /* + 5 */
  CHECK_EQ_INT(block_pool_refcount(p, 1), 2);
  const block_table *rows[3] = {&a, &b, &c};
  CHECK_EQ_INT(block_tables_max_blocks(rows, 3), 3);
  int32_t out[3 * 4];
  CHECK_STATUS(block_tables_pack(rows, 3, 4, out, &d), PH_OK, d.msg);
  const int32_t want[12] = {1, 2, 3, 0, 4, 0, 0, 0, 1, 2, 5, 0};
  for (int i = 0; i < 12; i++) CHECK_EQ_INT(out[i], want[i]);
  CHECK_STATUS(block_tables_pack(rows, 3, 2, out, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, "row 0");
  CHECK_STATUS(block_table_release(&a, p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_refcount(p, 1), 1); /* still held by c */
  CHECK_STATUS(block_table_release(&b, p, &d), PH_OK, d.msg);
  CHECK_STATUS(block_table_release(&c, p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_free_count(p), 31);
  block_pool_free(p);
}

#define R_TABLES 12
#define R_LOOSE  64

/* Recounts every holder and compares with the pool; returns 1 when consistent. */
static int pool_consistent(const block_pool *p, const block_table *t, const int32_t *loose,
                           int n_loose) {
  int32_t n = block_pool_n_blocks(p);
  int32_t *count = calloc((size_t)n, sizeof *count);
  int ok = 1;
  for (int i = 0; i < R_TABLES; i++)
    for (int32_t j = 0; j < t[i].n_blocks; j++) {
      int32_t id = t[i].ids[j];
      if (id <= 0 || id >= n)
        ok = 0; /* null block never handed out */
      else
        count[id]++;
    }
  for (int i = 0; i < n_loose; i++) count[loose[i]]++;
  int32_t used = 0;
  for (int32_t id = 1; id < n; id++) {
    if (count[id] != block_pool_refcount(p, id)) ok = 0;
    used += count[id] > 0;
  }
  for (int i = 0; i < R_TABLES; i++) /* no block twice within one table */
    for (int32_t j = 0; j < t[i].n_blocks; j++)
      for (int32_t k = j + 1; k < t[i].n_blocks; k++)
        if (t[i].ids[j] == t[i].ids[k]) ok = 0;
  if (block_pool_refcount(p, 0) != 0) ok = 0;
  if (used != block_pool_used_count(p)) ok = 0;
  if (block_pool_free_count(p) + block_pool_used_count(p) != n - 1) ok = 0;
  free(count);
  return ok;
}

static void test_randomized_accounting(void) {
  diag d;
  block_pool *p = NULL;
  const int32_t n_blocks = 97, bs = 8;
  CHECK_STATUS(block_pool_create(n_blocks, &p, &d), PH_OK, d.msg);
  block_table t[R_TABLES];
  int64_t tokens[R_TABLES] = {0};
  for (int i = 0; i < R_TABLES; i++) block_table_init(&t[i]);
  int32_t loose[R_LOOSE];
  int n_loose = 0, bad = 0, ops = 0, limits = 0;
  for (int step = 0; step < 20000; step++) {
    int i = (int)rnd(R_TABLES);
    uint32_t op = rnd(6);
    ph_status s = PH_OK;
    if (op == 0 || op == 1) { /* append tokens */
      int64_t want = tokens[i] + 1 + rnd(40);
      int32_t before_free = block_pool_free_count(p), before_n = t[i].n_blocks;
      s = block_table_reserve(&t[i], p, want, bs, &d);
      if (s == PH_OK) {
        tokens[i] = want;
        if (block_pool_free_count(p) != before_free - (t[i].n_blocks - before_n)) bad++;
      } else {
        limits++;
        if (s != PH_ERR_LIMIT || t[i].n_blocks != before_n ||
            block_pool_free_count(p) != before_free)
          bad++;
      }
    } else if (op == 2) { /* request finishes */
      if (block_table_release(&t[i], p, &d) != PH_OK) bad++;
      tokens[i] = 0;
    } else if (op == 3) { /* prefix sharing into an empty table */
      int j = (int)rnd(R_TABLES);
      if (j != i && t[i].n_blocks == 0 && t[j].n_blocks > 0) {
        int32_t share = 1 + (int32_t)rnd((uint32_t)t[j].n_blocks);
        if (block_table_share(&t[i], p, share, t[j].ids, &d) != PH_OK) bad++;
        tokens[i] = (int64_t)share * bs;
      }
    } else if (op == 4) { /* raw alloc/incref of loose holders */
      int32_t n = 1 + (int32_t)rnd(4);
      if (n_loose + n <= R_LOOSE) {
        s = block_pool_alloc_n(p, n, loose + n_loose, &d);
        if (s == PH_OK)
          n_loose += n;
        else if (s != PH_ERR_LIMIT)
          bad++;
      }
      if (n_loose > 0 && n_loose < R_LOOSE) {
        int32_t id = loose[rnd((uint32_t)n_loose)];
        if (block_pool_incref_n(p, 1, &id, &d) != PH_OK)
          bad++;
        else
          loose[n_loose++] = id;
      }
    } else if (n_loose > 0) { /* decref a loose holder; sometimes try a bad one first */
      int k = (int)rnd((uint32_t)n_loose);
      int32_t bogus[2] = {loose[k], (int32_t)(rnd(2) ? 0 : n_blocks)};
      if (block_pool_decref_n(p, 2, bogus, &d) != PH_ERR_INVALID_ARGUMENT) bad++;
      if (block_pool_decref_n(p, 1, &loose[k], &d) != PH_OK) bad++;
      loose[k] = loose[--n_loose];
    }
    ops++;
    if (!pool_consistent(p, t, loose, n_loose)) {
      bad++;
      break;
    }
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(limits > 0); /* the pool was under pressure */
  for (int i = 0; i < R_TABLES; i++) CHECK_STATUS(block_table_release(&t[i], p, &d), PH_OK, d.msg);
  CHECK_STATUS(block_pool_decref_n(p, n_loose, loose, &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_free_count(p), n_blocks - 1); /* everything came back */
  CHECK_EQ_INT(block_pool_used_count(p), 0);
  CHECK_EQ_INT(ops, 20000);
  /* the queue holds each free id exactly once */
  int32_t all[96];
  CHECK_STATUS(block_pool_alloc_n(p, n_blocks - 1, all, &d), PH_OK, d.msg);
  uint8_t seen[97] = {0};
  int dup = 0;
  for (int i = 0; i < n_blocks - 1; i++) {
    if (all[i] <= 0 || all[i] >= n_blocks || seen[all[i]])
      dup++;
    else
      seen[all[i]] = 1;
  }
  CHECK_EQ_INT(dup, 0);
  block_pool_free(p);
}

/* ---- KV buffers ------------------------------------------------------------------------------ */

static void test_kv_qwen35_27b(void) {
  diag d;
  int32_t full[16];
  for (int i = 0; i < 16; i++) full[i] = 4 * i + 3; /* every 4th layer of 64 */
  kv_geometry g = {.n_full = 16,
                   .full_layers = full,
                   .n_kv_heads = 4,
                   .head_size = 256,
                   .block_size = 256,
                   .n_blocks = 1000,
                   .dtype = PH_DTYPE_BF16};
  const int64_t per_block = 16LL * 2 * 256 * 4 * 256 * 2;
  CHECK_EQ_INT(kv_geometry_bytes_per_block(&g), per_block);
  CHECK_EQ_INT(kv_geometry_total_bytes(&g), per_block * 1000);
  g.n_blocks = 3;
  kv_buffers *kv = NULL;
  CHECK_STATUS(kv_buffers_create(&g, &kv, &d), PH_OK, d.msg);
  if (!kv) return;
  CHECK_EQ_INT(kv_buffers_bytes(kv), per_block * 3);
  CHECK_EQ_INT(kv_buffers_bytes_per_block(kv), per_block);
  tensor k, v, k2;
  CHECK_STATUS(kv_buffers_key(kv, 63, &k, &d), PH_OK, d.msg);
  CHECK_STATUS(kv_buffers_value(kv, 63, &v, &d), PH_OK, d.msg);
  CHECK_STATUS(kv_buffers_key(kv, 63, &k2, &d), PH_OK, d.msg);
  CHECK(k.data == k2.data); /* past and present bind the same buffer */
  CHECK(k.data != v.data);
  CHECK_EQ_INT(((uintptr_t)k.data) % KV_BUFFERS_ALIGN, 0);
  CHECK_EQ_INT(((uintptr_t)v.data) % KV_BUFFERS_ALIGN, 0);
  CHECK_EQ_INT(k.dtype, PH_DTYPE_BF16);
  CHECK_EQ_INT(k.rank, 4);
  CHECK_EQ_INT(k.dims[0], 3);
  CHECK_EQ_INT(k.dims[1], 256);
  CHECK_EQ_INT(k.dims[2], 4);
  CHECK_EQ_INT(k.dims[3], 256);
  const shape ks = shape_make(k.rank, k.dims);
  CHECK_EQ_INT(shape_bytes(&ks, k.dtype), per_block * 3 / 32);
  CHECK_EQ_INT(((const uint16_t *)k.data)[3 * 256 * 4 * 256 - 1], 0); /* zeroed */
  CHECK_STATUS(kv_buffers_key(kv, 0, &k, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "layer 0");
  kv_buffers_free(kv);
  kv_buffers_free(NULL);
  g.dtype = PH_DTYPE_I32;
  CHECK_STATUS(kv_buffers_create(&g, &kv, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_EQ_INT(kv_geometry_bytes_per_block(&g), -1);
  g.dtype = PH_DTYPE_F32;
  full[1] = full[0];
  CHECK_STATUS(kv_buffers_create(&g, &kv, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "full_layers[1]");
}

/* ---- state pool ------------------------------------------------------------------------------ */

static const int32_t lin_layers[3] = {0, 1, 2};

static state_geometry small_state(int32_t max_slots) {
  state_geometry g = {.n_linear = 3,
                      .linear_layers = lin_layers,
                      .conv_dim = 2 * 2 * 4 + 2 * 4, /* 2*Hk*Dk + Hv*Dv, Hk=2 Dk=4 Hv=2 Dv=4 */
                      .conv_kernel = 4,
                      .n_v_heads = 2,
                      .head_v = 4,
                      .head_k = 4,
                      .io_dtype = PH_DTYPE_BF16,
                      .max_slots = max_slots};
  return g;
}

/* Fills a slot of every layer with a recognisable pattern (value = tag + layer). */
static void stamp(state_pool *p, int32_t slot, float tag) {
  diag d;
  for (int l = 0; l < 3; l++) {
    tensor c, r;
    if (state_pool_slot_conv(p, l, slot, &c, &d) != PH_OK) return;
    if (state_pool_slot_recurrent(p, l, slot, &r, &d) != PH_OK) return;
    uint16_t *cp = c.data;
    for (int64_t i = 0; i < tensor_numel(&c); i++) cp[i] = (uint16_t)(tag + (float)l);
    float *rp = r.data;
    for (int64_t i = 0; i < tensor_numel(&r); i++) rp[i] = tag + (float)l;
  }
}

static void test_state_alloc_zeroes(void) {
  diag d;
  state_geometry g = small_state(4);
  const int64_t slot_bytes = 3 * (24LL * 3 * 2 + 2 * 4 * 4 * 4);
  CHECK_EQ_INT(state_geometry_slot_bytes(&g), slot_bytes);
  state_pool *p = NULL;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  CHECK_EQ_INT(state_pool_slot_bytes(p), slot_bytes);
  int32_t s0, s1, s2;
  CHECK_STATUS(state_pool_alloc(p, &s0, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_alloc(p, &s1, &d), PH_OK, d.msg);
  CHECK_EQ_INT(s0, 0);
  CHECK_EQ_INT(s1, 1);
  stamp(p, 0, 7.0f);
  CHECK_STATUS(state_pool_release(p, 0, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_release(p, 0, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "slot 0 is already free");
  CHECK_STATUS(state_pool_alloc(p, &s2, &d), PH_OK, d.msg);
  CHECK_EQ_INT(s2, 0); /* lowest free */
  int nonzero = 0;
  for (int l = 0; l < 3; l++) {
    tensor c, r;
    CHECK_STATUS(state_pool_slot_conv(p, l, 0, &c, &d), PH_OK, d.msg);
    CHECK_STATUS(state_pool_slot_recurrent(p, l, 0, &r, &d), PH_OK, d.msg);
    CHECK_EQ_INT(c.dims[0], 24);
    CHECK_EQ_INT(c.dims[1], 3);
    CHECK_EQ_INT(r.dims[0], 2);
    for (int64_t i = 0; i < tensor_numel(&c); i++) nonzero += ((uint16_t *)c.data)[i] != 0;
    for (int64_t i = 0; i < tensor_numel(&r); i++) nonzero += ((float *)r.data)[i] != 0.0f;
  }
  CHECK_EQ_INT(nonzero, 0);
  CHECK_STATUS(state_pool_alloc(p, &s2, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_alloc(p, &s2, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_alloc(p, &s2, &d), PH_ERR_LIMIT, d.msg);
  CHECK_EQ_INT(state_pool_bytes_moved(p), 0);
  state_pool_free(p);
  state_pool_free(NULL);
}

static void test_state_slice_zero_copy(void) {
  diag d;
  state_geometry g = small_state(6);
  state_pool *p = NULL;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  int32_t s;
  for (int i = 0; i < 5; i++) CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  for (int32_t i = 0; i < 5; i++) stamp(p, i, 100.0f * (float)i);
  const int32_t slots[3] = {1, 2, 3};
  CHECK_STATUS(state_pool_bind(p, slots, 3, &d), PH_OK, d.msg);
  CHECK(state_pool_bound_is_slice(p));
  tensor c, r, one;
  CHECK_STATUS(state_pool_bound_conv(p, 2, &c, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_bound_recurrent(p, 2, &r, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_slot_recurrent(p, 2, 1, &one, &d), PH_OK, d.msg);
  CHECK(r.data == one.data); /* the view is the slot buffer itself */
  CHECK_EQ_INT(c.dims[0], 3);
  CHECK_EQ_INT(c.dims[1], 24);
  CHECK_EQ_INT(c.dims[2], 3);
  CHECK_EQ_INT(c.dtype, PH_DTYPE_BF16);
  CHECK_EQ_INT(r.dtype, PH_DTYPE_F32);
  CHECK_EQ_INT(r.dims[0], 3);
  CHECK_EQ_INT(r.dims[1], 2);
  CHECK_EQ_INT(r.dims[2], 4);
  CHECK_EQ_INT(r.dims[3], 4);
  CHECK_NEAR(((float *)r.data)[32 * 2], 302.0f, 0); /* batch row 2 = slot 3, layer 2 */
  ((float *)r.data)[0] = -1.0f;                     /* a write lands in slot 1 directly */
  CHECK_STATUS(state_pool_bind(p, slots, 3, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_release(p, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_NEAR(((float *)one.data)[0], -1.0f, 0);
  CHECK_EQ_INT(state_pool_bytes_moved(p), 0);
  CHECK_STATUS(state_pool_bound_conv(p, 2, &c, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_unbind(p, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  const int32_t dup[2] = {2, 2}, freed[1] = {5};
  CHECK_STATUS(state_pool_bind(p, dup, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_bind(p, freed, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "slot 5");
  state_pool_free(p);
}

static void test_state_gather_counts_bytes(void) {
  diag d;
  state_geometry g = small_state(6);
  state_pool *p = NULL;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  int32_t s;
  for (int i = 0; i < 6; i++) CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  for (int32_t i = 0; i < 6; i++) stamp(p, i, 100.0f * (float)i);
  const int64_t slot_bytes = state_pool_slot_bytes(p);
  const int32_t slots[3] = {4, 0, 2};
  CHECK(!state_pool_slots_are_slice(slots, 3));
  CHECK_STATUS(state_pool_bind(p, slots, 3, &d), PH_OK, d.msg);
  CHECK(!state_pool_bound_is_slice(p));
  CHECK_EQ_INT(state_pool_bytes_moved(p), 3 * slot_bytes); /* gather */
  tensor r;
  CHECK_STATUS(state_pool_bound_recurrent(p, 1, &r, &d), PH_OK, d.msg);
  float *rp = r.data;
  CHECK_NEAR(rp[0], 401.0f, 0);
  CHECK_NEAR(rp[32], 1.0f, 0);
  CHECK_NEAR(rp[64], 201.0f, 0);
  rp[32] = 55.0f; /* row 1 -> slot 0 after scatter */
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(state_pool_bytes_moved(p), 6 * slot_bytes); /* + scatter */
  tensor one;
  CHECK_STATUS(state_pool_slot_recurrent(p, 1, 0, &one, &d), PH_OK, d.msg);
  CHECK_NEAR(((float *)one.data)[0], 55.0f, 0);
  /* slot_order makes the same batch ascending; still not a slice (holes), but 0 1 2 is */
  int32_t order[3];
  state_pool_slot_order(slots, 3, order);
  CHECK_EQ_INT(order[0], 1);
  CHECK_EQ_INT(order[1], 2);
  CHECK_EQ_INT(order[2], 0);
  state_pool_reset_bytes_moved(p);
  CHECK_EQ_INT(state_pool_bytes_moved(p), 0);
  state_pool_free(p);
}

static void test_state_compaction(void) {
  diag d;
  state_geometry g = small_state(6);
  state_pool *p = NULL;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  int32_t s;
  for (int i = 0; i < 5; i++) CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  for (int32_t i = 0; i < 5; i++) stamp(p, i, 100.0f * (float)i);
  state_move moves[4];
  int32_t n_moves = -1;
  CHECK_STATUS(state_pool_compact(p, moves, 4, &n_moves, &d), PH_OK, d.msg);
  CHECK_EQ_INT(n_moves, 0);                                 /* already a prefix */
  CHECK_STATUS(state_pool_release(p, 1, &d), PH_OK, d.msg); /* a request finishes */
  CHECK_STATUS(state_pool_compact(p, moves, 4, &n_moves, &d), PH_OK, d.msg);
  CHECK_EQ_INT(n_moves, 1);
  CHECK_EQ_INT(moves[0].from, 4);
  CHECK_EQ_INT(moves[0].to, 1);
  CHECK_EQ_INT(state_pool_bytes_moved(p), state_pool_slot_bytes(p)); /* one slot, once */
  tensor one;
  CHECK_STATUS(state_pool_slot_recurrent(p, 0, 1, &one, &d), PH_OK, d.msg);
  CHECK_NEAR(((float *)one.data)[5], 400.0f, 0);
  CHECK(!state_pool_slot_in_use(p, 4));
  /* now every live slot is a prefix: a step over all of them binds with 0 bytes */
  state_pool_reset_bytes_moved(p);
  const int32_t all[4] = {0, 1, 2, 3};
  CHECK(state_pool_slots_are_slice(all, 4));
  CHECK_STATUS(state_pool_bind(p, all, 4, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_compact(p, moves, 4, &n_moves, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(state_pool_bytes_moved(p), 0);
  state_pool_free(p);
}

/* ---- double-banked state: speculative steps (state_geometry.banks 2) ------------------------- */

static state_geometry banked_state(int32_t max_slots) {
  state_geometry g = small_state(max_slots);
  g.banks = 2;
  return g;
}

/* Counts the elements of one slot's rows (published, or the inactive bank when staged) in every
 * layer that differ from stamp's pattern for tag (value = tag + layer). */
static int rows_differ(const state_pool *p, int32_t slot, int staged, float tag) {
  diag d;
  int bad = 0;
  for (int l = 0; l < 3; l++) {
    tensor c, r;
    ph_status s1 = staged ? state_pool_slot_conv_staged(p, l, slot, &c, &d)
                          : state_pool_slot_conv(p, l, slot, &c, &d);
    ph_status s2 = staged ? state_pool_slot_recurrent_staged(p, l, slot, &r, &d)
                          : state_pool_slot_recurrent(p, l, slot, &r, &d);
    if (s1 != PH_OK || s2 != PH_OK) return -1;
    for (int64_t i = 0; i < tensor_numel(&c); i++)
      bad += ((const uint16_t *)c.data)[i] != (uint16_t)(tag + (float)l);
    for (int64_t i = 0; i < tensor_numel(&r); i++)
      bad += ((const float *)r.data)[i] != tag + (float)l;
  }
  return bad;
}

/* Counts the nonzero elements of one slot's published rows in every layer. */
static int rows_nonzero(const state_pool *p, int32_t slot) {
  diag d;
  int bad = 0;
  for (int l = 0; l < 3; l++) {
    tensor c, r;
    if (state_pool_slot_conv(p, l, slot, &c, &d) != PH_OK) return -1;
    if (state_pool_slot_recurrent(p, l, slot, &r, &d) != PH_OK) return -1;
    for (int64_t i = 0; i < tensor_numel(&c); i++) bad += ((const uint16_t *)c.data)[i] != 0;
    for (int64_t i = 0; i < tensor_numel(&r); i++) bad += ((const float *)r.data)[i] != 0.0f;
  }
  return bad;
}

/* Writes tag + row + layer (stamp's pattern for tag + row) into row b of every layer's present
 * (output) views of the bound step, as the step's op would. */
static void write_present(state_pool *p, int32_t b, float tag) {
  diag d;
  for (int l = 0; l < 3; l++) {
    tensor c, r;
    if (state_pool_bound_conv_out(p, l, &c, &d) != PH_OK) return;
    if (state_pool_bound_recurrent_out(p, l, &r, &d) != PH_OK) return;
    const int64_t cn = tensor_numel(&c) / c.dims[0], rn = tensor_numel(&r) / r.dims[0];
    for (int64_t i = 0; i < cn; i++) ((uint16_t *)c.data)[b * cn + i] = (uint16_t)(tag + (float)l);
    for (int64_t i = 0; i < rn; i++) ((float *)r.data)[b * rn + i] = tag + (float)l;
  }
}

/* The first element of row b of layer 1's past (input) recurrent view. */
static float past_at(const state_pool *p, int32_t b) {
  diag d;
  tensor r;
  if (state_pool_bound_recurrent(p, 1, &r, &d) != PH_OK) return -1e30f;
  return ((const float *)r.data)[b * 32];
}

static void test_bank_sizes(void) {
  diag d;
  state_geometry g1 = small_state(4), g2 = banked_state(4);
  const int64_t slot_bytes = 3 * (24LL * 3 * 2 + 2 * 4 * 4 * 4);
  CHECK_EQ_INT(state_geometry_slot_bytes(&g2), slot_bytes); /* one bank: what a move copies */
  CHECK_EQ_INT(state_geometry_slot_cost(&g1), slot_bytes);
  CHECK_EQ_INT(state_geometry_slot_cost(&g2), 2 * slot_bytes); /* memory: both banks */
  state_pool *p1 = NULL, *p2 = NULL;
  CHECK_STATUS(state_pool_create(&g1, &p1, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_create(&g2, &p2, &d), PH_OK, d.msg);
  if (!p1 || !p2) return;
  CHECK_EQ_INT(state_pool_banks(p1), 1);
  CHECK_EQ_INT(state_pool_banks(p2), 2);
  CHECK_EQ_INT(state_pool_bytes(p2), 2 * state_pool_bytes(p1));
  CHECK_EQ_INT(state_pool_slot_bytes(p2), slot_bytes);
  CHECK_EQ_INT(state_pool_slot_cost(p2), 2 * slot_bytes);
  CHECK_EQ_INT(state_pool_slot_cost(p1), slot_bytes);
  state_pool_free(p1);
  state_pool_free(p2);
}

/* A speculative step reads the published rows and writes only the inactive bank; publish flips;
 * the next speculative step writes the other bank. All of it a slice: 0 bytes moved. */
static void test_bank_spec_step(void) {
  diag d;
  state_geometry g = banked_state(4);
  state_pool *p = NULL;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  int32_t s;
  for (int i = 0; i < 4; i++) CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  for (int32_t i = 0; i < 4; i++) stamp(p, i, 100.0f * (float)i);
  for (int32_t i = 0; i < 4; i++) CHECK_EQ_INT(state_pool_slot_bank(p, i), 0);
  const int32_t slots[3] = {0, 1, 2};
  const uint8_t all[3] = {1, 1, 1};
  for (int round = 0; round < 2; round++) {
    const float tag = round == 0 ? 500.0f : 700.0f;
    CHECK_STATUS(state_pool_bind_spec(p, slots, all, 3, &d), PH_OK, d.msg);
    CHECK(state_pool_bound_is_slice(p));
    tensor past, out, pub, inactive;
    CHECK_STATUS(state_pool_bound_recurrent(p, 2, &past, &d), PH_OK, d.msg);
    CHECK_STATUS(state_pool_bound_recurrent_out(p, 2, &out, &d), PH_OK, d.msg);
    CHECK_STATUS(state_pool_slot_recurrent(p, 2, 0, &pub, &d), PH_OK, d.msg);
    CHECK_STATUS(state_pool_slot_recurrent_staged(p, 2, 0, &inactive, &d), PH_OK, d.msg);
    CHECK(past.data == pub.data);     /* past: the published slice */
    CHECK(out.data == inactive.data); /* present: the other bank's slice, no copy */
    CHECK(out.data != past.data);
    CHECK_EQ_INT(out.dims[0], 3);
    for (int32_t b = 0; b < 3; b++) write_present(p, b, tag + (float)b);
    for (int32_t b = 0; b < 3; b++)
      CHECK_NEAR(past_at(p, b), (round == 0 ? 100.0f * (float)b : 500.0f + (float)b) + 1, 0);
    CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
    CHECK_EQ_INT(state_pool_bytes_moved(p), 0);
    for (int32_t b = 0; b < 3; b++) {
      /* the published rows are what they were; the step's state waits in the inactive bank */
      CHECK_EQ_INT(rows_differ(p, b, 0, round == 0 ? 100.0f * (float)b : 500.0f + (float)b), 0);
      CHECK_EQ_INT(rows_differ(p, b, 1, tag + (float)b), 0);
    }
    for (int32_t b = 0; b < 3; b++) CHECK_STATUS(state_pool_publish(p, b, &d), PH_OK, d.msg);
    for (int32_t b = 0; b < 3; b++) {
      CHECK_EQ_INT(state_pool_slot_bank(p, b), round == 0 ? 1 : 0);
      CHECK_EQ_INT(rows_differ(p, b, 0, tag + (float)b), 0); /* now published */
      CHECK_EQ_INT(rows_differ(p, b, 1, round == 0 ? 100.0f * (float)b : 500.0f + (float)b), 0);
    }
  }
  CHECK_EQ_INT(rows_differ(p, 3, 0, 300.0f), 0); /* not in the step */
  CHECK_EQ_INT(state_pool_slot_bank(p, 3), 0);
  CHECK_EQ_INT(state_pool_bytes_moved(p), 0);
  state_pool_free(p);
}

/* No speculative row: in place, as with one bank. Mixed, or slots that are not a slice: staged,
 * every byte counted, speculative rows to the inactive bank and the others in place. */
static void test_bank_staged_cases(void) {
  diag d;
  state_geometry g = banked_state(4);
  state_pool *p = NULL;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  int32_t s;
  for (int i = 0; i < 4; i++) CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  for (int32_t i = 0; i < 4; i++) stamp(p, i, 100.0f * (float)i);
  const int64_t slot_bytes = state_pool_slot_bytes(p);
  const int32_t slots[3] = {0, 1, 2};
  /* no speculative row (spec given, all 0): present is the past slice, written in place */
  const uint8_t none[3] = {0, 0, 0};
  CHECK_STATUS(state_pool_bind_spec(p, slots, none, 3, &d), PH_OK, d.msg);
  CHECK(state_pool_bound_is_slice(p));
  tensor past, out, pub, inactive;
  CHECK_STATUS(state_pool_bound_conv(p, 0, &past, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_bound_conv_out(p, 0, &out, &d), PH_OK, d.msg);
  CHECK(past.data == out.data);
  write_present(p, 1, 150.0f);
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(state_pool_bytes_moved(p), 0);
  CHECK_EQ_INT(rows_differ(p, 1, 0, 150.0f), 0);
  stamp(p, 1, 100.0f);
  /* mixed, a slice: past in place, present staged and scattered at unbind (B slots) */
  const uint8_t mixed[3] = {1, 0, 1};
  CHECK_STATUS(state_pool_bind_spec(p, slots, mixed, 3, &d), PH_OK, d.msg);
  CHECK(!state_pool_bound_is_slice(p));
  CHECK_EQ_INT(state_pool_bytes_moved(p), 0); /* nothing gathered */
  CHECK_STATUS(state_pool_bound_recurrent(p, 1, &past, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_bound_recurrent_out(p, 1, &out, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_slot_recurrent(p, 1, 0, &pub, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_slot_recurrent_staged(p, 1, 0, &inactive, &d), PH_OK, d.msg);
  CHECK(past.data == pub.data);
  CHECK(out.data != past.data && out.data != inactive.data);
  for (int32_t b = 0; b < 3; b++) write_present(p, b, 800.0f + (float)b);
  CHECK_EQ_INT(rows_differ(p, 0, 0, 0.0f), 0); /* nothing lands before unbind */
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(state_pool_bytes_moved(p), 3 * slot_bytes);
  CHECK_EQ_INT(rows_differ(p, 0, 0, 0.0f), 0);   /* speculative: published untouched */
  CHECK_EQ_INT(rows_differ(p, 0, 1, 800.0f), 0); /* ... its state in the inactive bank */
  CHECK_EQ_INT(rows_differ(p, 1, 0, 801.0f), 0); /* not speculative: in place */
  CHECK_EQ_INT(rows_differ(p, 2, 0, 200.0f), 0);
  CHECK_EQ_INT(rows_differ(p, 2, 1, 802.0f), 0);
  /* not a slice: gathered, the staging updated in place, each row scattered to its bank */
  state_pool_reset_bytes_moved(p);
  const int32_t holes[2] = {3, 1};
  const uint8_t first_spec[2] = {1, 0};
  CHECK_STATUS(state_pool_bind_spec(p, holes, first_spec, 2, &d), PH_OK, d.msg);
  CHECK(!state_pool_bound_is_slice(p));
  CHECK_EQ_INT(state_pool_bytes_moved(p), 2 * slot_bytes); /* gather */
  CHECK_NEAR(past_at(p, 0), 301.0f, 0);
  CHECK_NEAR(past_at(p, 1), 802.0f, 0);
  for (int32_t b = 0; b < 2; b++) write_present(p, b, 900.0f + (float)b);
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(state_pool_bytes_moved(p), 4 * slot_bytes); /* + scatter */
  CHECK_EQ_INT(rows_differ(p, 3, 0, 300.0f), 0);
  CHECK_EQ_INT(rows_differ(p, 3, 1, 900.0f), 0);
  CHECK_EQ_INT(rows_differ(p, 1, 0, 901.0f), 0);
  /* consecutive slots on different banks are not a slice: gathered from each one's published */
  CHECK_STATUS(state_pool_publish(p, 2, &d), PH_OK, d.msg); /* slot 2 now reads 802 */
  state_pool_reset_bytes_moved(p);
  CHECK_STATUS(state_pool_bind(p, slots, 3, &d), PH_OK, d.msg);
  CHECK(!state_pool_bound_is_slice(p));
  CHECK_EQ_INT(state_pool_bytes_moved(p), 3 * slot_bytes);
  CHECK_NEAR(past_at(p, 1), 902.0f, 0);
  CHECK_NEAR(past_at(p, 2), 803.0f, 0);
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_EQ_INT(rows_differ(p, 2, 0, 802.0f), 0); /* scattered back to the published bank */
  CHECK_EQ_INT(rows_differ(p, 2, 1, 200.0f), 0);
  state_pool_free(p);
}

/* Releasing and allocating after a speculative step: counts right, a new holder reads zeros, and
 * takes the bank of the slot below so batches stay slices. */
static void test_bank_release_alloc(void) {
  diag d;
  state_geometry g = banked_state(3);
  state_pool *p = NULL;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  int32_t s;
  for (int i = 0; i < 3; i++) CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  const int32_t slots[3] = {0, 1, 2};
  const uint8_t all[3] = {1, 1, 1};
  CHECK_STATUS(state_pool_bind_spec(p, slots, all, 3, &d), PH_OK, d.msg);
  for (int32_t b = 0; b < 3; b++) write_present(p, b, 40.0f + (float)b);
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  /* slot 2 is dropped without publishing (a request cancelled mid-verify) */
  CHECK_STATUS(state_pool_release(p, 2, &d), PH_OK, d.msg);
  CHECK_EQ_INT(state_pool_used_count(p), 2);
  for (int32_t b = 0; b < 2; b++) CHECK_STATUS(state_pool_publish(p, b, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_release(p, 1, &d), PH_OK, d.msg);
  CHECK_EQ_INT(state_pool_used_count(p), 1);
  CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  CHECK_EQ_INT(s, 1);
  CHECK_EQ_INT(state_pool_slot_bank(p, 1), 1); /* slot 0's bank */
  CHECK_EQ_INT(rows_nonzero(p, 1), 0);         /* zeroed: not the 41 left in bank 1 */
  CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  CHECK_EQ_INT(s, 2);
  CHECK_EQ_INT(state_pool_slot_bank(p, 2), 1);
  CHECK_EQ_INT(rows_nonzero(p, 2), 0);
  CHECK_EQ_INT(state_pool_used_count(p), 3);
  CHECK_STATUS(state_pool_bind(p, slots, 3, &d), PH_OK, d.msg);
  CHECK(state_pool_bound_is_slice(p)); /* one slice over bank 1 */
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  /* slot 0 has no slot below: a new holder of slot 0 publishes bank 0 */
  CHECK_STATUS(state_pool_release(p, 0, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  CHECK_EQ_INT(s, 0);
  CHECK_EQ_INT(state_pool_slot_bank(p, 0), 0);
  CHECK_EQ_INT(rows_nonzero(p, 0), 0);
  CHECK_EQ_INT(state_pool_slot_bank(p, 5), -1);
  state_pool_free(p);
}

/* Compaction moves a slot's published rows, whichever bank holds them, and the bank bit. */
static void test_bank_compaction(void) {
  diag d;
  state_geometry g = banked_state(4);
  state_pool *p = NULL;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  int32_t s;
  for (int i = 0; i < 3; i++) CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  for (int32_t i = 0; i < 3; i++) stamp(p, i, 100.0f * (float)i);
  const int32_t two[1] = {2};
  const uint8_t yes[1] = {1};
  CHECK_STATUS(state_pool_bind_spec(p, two, yes, 1, &d), PH_OK, d.msg);
  write_present(p, 0, 600.0f);
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_publish(p, 2, &d), PH_OK, d.msg);
  CHECK_EQ_INT(state_pool_slot_bank(p, 2), 1);
  CHECK_STATUS(state_pool_release(p, 1, &d), PH_OK, d.msg);
  state_move moves[2];
  int32_t n_moves = -1;
  state_pool_reset_bytes_moved(p);
  CHECK_STATUS(state_pool_compact(p, moves, 2, &n_moves, &d), PH_OK, d.msg);
  CHECK_EQ_INT(n_moves, 1);
  CHECK_EQ_INT(moves[0].from, 2);
  CHECK_EQ_INT(moves[0].to, 1);
  CHECK_EQ_INT(state_pool_bytes_moved(p), state_pool_slot_bytes(p)); /* one bank's rows */
  CHECK_EQ_INT(state_pool_slot_bank(p, 1), 1);
  CHECK_EQ_INT(rows_differ(p, 1, 0, 600.0f), 0);
  state_pool_free(p);
}

static void test_bank_errors(void) {
  diag d;
  state_pool *p = NULL;
  state_geometry g = banked_state(2);
  g.banks = 3;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "banks 3");
  CHECK(p == NULL);
  CHECK_EQ_INT(state_geometry_slot_cost(&g), -1);
  g.banks = -1;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* one bank: no speculative row, no publish, no inactive rows */
  g = small_state(2);
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  int32_t s;
  for (int i = 0; i < 2; i++) CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  const int32_t slots[2] = {0, 1};
  const uint8_t one[2] = {0, 1}, none[2] = {0, 0};
  CHECK_STATUS(state_pool_bind_spec(p, slots, one, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "speculative binding needs a double-banked pool");
  CHECK_STATUS(state_pool_unbind(p, &d), PH_ERR_INVALID_ARGUMENT, d.msg); /* nothing bound */
  CHECK_STATUS(state_pool_bind_spec(p, slots, none, 2, &d), PH_OK, d.msg);
  CHECK(state_pool_bound_is_slice(p));
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_publish(p, 0, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "double-banked");
  tensor t;
  CHECK_STATUS(state_pool_slot_conv_staged(p, 0, 0, &t, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_slot_recurrent_staged(p, 0, 0, &t, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_EQ_INT(state_pool_slot_bank(p, 0), 0);
  state_pool_free(p);
  /* two banks */
  g = banked_state(3);
  p = NULL;
  CHECK_STATUS(state_pool_create(&g, &p, &d), PH_OK, d.msg);
  if (!p) return;
  for (int i = 0; i < 2; i++) CHECK_STATUS(state_pool_alloc(p, &s, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_publish(p, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "slot 2 is not allocated");
  CHECK_STATUS(state_pool_publish(p, -1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "out of range");
  CHECK_STATUS(state_pool_publish(p, 3, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_slot_conv_staged(p, 0, 2, &t, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_slot_recurrent_staged(p, 7, 0, &t, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_bind_spec(p, slots, one, 2, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_publish(p, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "while a step is bound");
  CHECK_EQ_INT(state_pool_slot_bank(p, 1), 0); /* nothing flipped */
  CHECK_STATUS(state_pool_bind_spec(p, slots, one, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "a step is bound");
  CHECK_STATUS(state_pool_bind(p, slots, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_bound_conv_out(p, 5, &t, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(state_pool_unbind(p, &d), PH_OK, d.msg);
  CHECK_STATUS(state_pool_bound_recurrent_out(p, 0, &t, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "no step is bound");
  const int32_t freed[2] = {0, 2};
  CHECK_STATUS(state_pool_bind_spec(p, freed, one, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "slot 2");
  CHECK_STATUS(state_pool_publish(p, 1, &d), PH_OK, d.msg); /* unbound, allocated: flips */
  CHECK_EQ_INT(state_pool_slot_bank(p, 1), 1);
  state_pool_free(p);
}

/* ---- the hybrid cache: pages, page buffers and slots behind one owner --------------------------
 */

static const int32_t hy_full[2] = {1, 3};

/* Full-attention layers 1 and 3 (4-token pages, 1 head of 4), linear layers 0..2 (small_state). */
static hybrid_cache_params hybrid_params(int32_t n_blocks, int32_t max_slots) {
  hybrid_cache_params p = {.kv = {.n_full = 2,
                                  .full_layers = hy_full,
                                  .n_kv_heads = 1,
                                  .head_size = 4,
                                  .block_size = 4,
                                  .n_blocks = n_blocks,
                                  .dtype = PH_DTYPE_F32},
                           .state = small_state(max_slots)};
  return p;
}

static void test_hybrid_reserve_release(void) {
  diag d;
  hybrid_cache_params hp = hybrid_params(1 + 3, 2); /* 3 pages of 4 tokens, 2 slots */
  hybrid_cache *c = NULL;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_OK, d.msg);
  if (!c) return;
  CHECK_EQ_INT(hybrid_cache_block_size(c), 4);
  CHECK_EQ_INT(hybrid_cache_n_blocks(c), 4);
  CHECK_EQ_INT(hybrid_cache_max_slots(c), 2);
  block_table a, b, x;
  block_table_init(&a);
  block_table_init(&b);
  block_table_init(&x);
  int32_t sa = -1, sb = -1, sx = -1;
  /* admission: a slot and the pages together */
  CHECK_STATUS(hybrid_cache_reserve(c, &a, &sa, 5, &d), PH_OK, d.msg);
  CHECK_EQ_INT(sa, 0);
  CHECK_EQ_INT(a.n_blocks, 2);
  CHECK_EQ_INT(hybrid_cache_pages_used(c), 2);
  CHECK_EQ_INT(hybrid_cache_slots_used(c), 1);
  /* no room for the pages: the slot it took goes back, nothing changed */
  CHECK_STATUS(hybrid_cache_reserve(c, &b, &sb, 9, &d), PH_ERR_LIMIT, d.msg);
  CHECK_EQ_INT(sb, -1);
  CHECK_EQ_INT(b.n_blocks, 0);
  CHECK_EQ_INT(hybrid_cache_slots_used(c), 1);
  CHECK_EQ_INT(hybrid_cache_pages_used(c), 2);
  CHECK_STATUS(hybrid_cache_reserve(c, &b, &sb, 4, &d), PH_OK, d.msg);
  CHECK_EQ_INT(sb, 1);
  CHECK_EQ_INT(b.n_blocks, 1);
  /* no free slot: no room, and no page taken */
  CHECK_STATUS(hybrid_cache_reserve(c, &x, &sx, 1, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, "slots are in use");
  CHECK_EQ_INT(sx, -1);
  CHECK_EQ_INT(x.n_blocks, 0);
  CHECK_EQ_INT(hybrid_cache_pages_used(c), 3);
  /* a running sequence grows: its slot stays, only missing pages are taken */
  CHECK_STATUS(hybrid_cache_reserve(c, &a, &sa, 8, &d), PH_OK, d.msg);
  CHECK_EQ_INT(sa, 0);
  CHECK_EQ_INT(a.n_blocks, 2);
  CHECK_STATUS(hybrid_cache_reserve(c, &a, &sa, 9, &d), PH_ERR_LIMIT, d.msg);
  CHECK_EQ_INT(a.n_blocks, 2);
  CHECK_EQ_INT(sa, 0);
  /* the session's binding: page views of full layers, state views of the bound slots */
  tensor k, v, cv, rv;
  CHECK_STATUS(hybrid_cache_kv_views(c, 3, &k, &v, &d), PH_OK, d.msg);
  CHECK_EQ_INT(k.dims[0], 4);
  CHECK_EQ_INT(k.dims[1], 4);
  CHECK(k.data != v.data);
  CHECK_STATUS(hybrid_cache_kv_views(c, 0, &k, &v, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(hybrid_cache_state_views(c, 0, &cv, &rv, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  const int32_t both[2] = {0, 1};
  CHECK_STATUS(hybrid_cache_bind(c, both, 2, &d), PH_OK, d.msg);
  CHECK_EQ_INT(hybrid_cache_bound_is_slice(c), 1);
  CHECK_STATUS(hybrid_cache_state_views(c, 2, &cv, &rv, &d), PH_OK, d.msg);
  CHECK_EQ_INT(cv.dims[0], 2);
  CHECK_EQ_INT(rv.dims[0], 2);
  CHECK_EQ_INT(rv.dtype, PH_DTYPE_F32);
  /* nothing is given back while a step is bound */
  CHECK_STATUS(hybrid_cache_release(c, &a, &sa, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_EQ_INT(sa, 0);
  CHECK_EQ_INT(a.n_blocks, 2);
  CHECK_STATUS(hybrid_cache_unbind(c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(hybrid_cache_bytes_moved(c), 0);
  /* release: slot and pages back, the table keeps its storage */
  int32_t *ids = a.ids;
  const int32_t cap = a.capacity;
  CHECK_STATUS(hybrid_cache_release(c, &a, &sa, &d), PH_OK, d.msg);
  CHECK_EQ_INT(sa, -1);
  CHECK_EQ_INT(a.n_blocks, 0);
  CHECK(a.ids == ids);
  CHECK_EQ_INT(a.capacity, cap);
  CHECK_EQ_INT(hybrid_cache_slots_used(c), 1);
  CHECK_EQ_INT(hybrid_cache_pages_used(c), 1);
  CHECK(!hybrid_cache_slot_in_use(c, 0));
  /* compaction: b moves from slot 1 into the hole */
  state_move moves[2];
  int32_t n_moves = -1;
  CHECK_STATUS(hybrid_cache_compact(c, moves, 2, &n_moves, &d), PH_OK, d.msg);
  CHECK_EQ_INT(n_moves, 1);
  CHECK_EQ_INT(moves[0].from, 1);
  CHECK_EQ_INT(moves[0].to, 0);
  CHECK_EQ_INT(hybrid_cache_bytes_moved(c), state_pool_slot_bytes(hybrid_cache_states(c)));
  sb = moves[0].to;
  int32_t order[3];
  const int32_t slots[3] = {2, 0, 1};
  hybrid_cache_slot_order(slots, 3, order);
  CHECK_EQ_INT(order[0], 1);
  CHECK_EQ_INT(order[2], 0);
  CHECK(hybrid_cache_slots_are_slice(both, 2));
  CHECK(!hybrid_cache_slots_are_slice(slots, 3));
  CHECK_STATUS(hybrid_cache_release(c, &b, &sb, &d), PH_OK, d.msg);
  CHECK_EQ_INT(hybrid_cache_pages_used(c), 0);
  CHECK_EQ_INT(hybrid_cache_slots_used(c), 0);
  CHECK_STATUS(hybrid_cache_release(c, &b, &sb, &d), PH_OK, d.msg); /* holds nothing: no-op */
  free(a.ids);
  free(b.ids);
  free(x.ids);
  hybrid_cache_free(c);
  hybrid_cache_free(NULL);
}

static void test_hybrid_memory_budget(void) {
  diag d;
  hybrid_cache_params hp = hybrid_params(1, 3);
  const int64_t per_block = kv_geometry_bytes_per_block(&hp.kv); /* 2 layers * K,V * 4*4 f32 */
  const int64_t per_slot = state_geometry_slot_bytes(&hp.state);
  CHECK_EQ_INT(per_block, 2 * 2 * 4 * 4 * 4);
  hp.kv.n_blocks = 0;
  hp.memory_bytes = 3 * per_slot + 5 * per_block + per_block - 1; /* 5 pages and change */
  hybrid_cache *c = NULL;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_OK, d.msg);
  if (!c) return;
  CHECK_EQ_INT(hybrid_cache_n_blocks(c), 5);
  kv_geometry kg = hp.kv;
  kg.n_blocks = 5;
  CHECK_EQ_INT(hybrid_cache_bytes(c),
               kv_geometry_total_bytes(&kg) + state_pool_bytes(hybrid_cache_states(c)));
  hybrid_cache_free(c);
  c = NULL;
  hp.memory_bytes = 3 * per_slot + 2 * per_block - 1; /* one page: not enough */
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, "holds 3 state slots");
  CHECK(c == NULL);
  hp.memory_bytes = 0;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "needs a memory budget");
  hp = hybrid_params(4, 0); /* a part refuses: nothing is left allocated */
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK(c == NULL);
}

/* The hybrid cache with double-banked state: the budget pays for both banks; the speculative
 * calls pass through to the slot pool. */
static void test_hybrid_banks(void) {
  diag d;
  hybrid_cache_params hp = hybrid_params(1, 3);
  const int64_t per_block = kv_geometry_bytes_per_block(&hp.kv);
  const int64_t per_slot = state_geometry_slot_bytes(&hp.state);
  hp.kv.n_blocks = 0;
  hp.state_banks = 2;
  hp.memory_bytes = 3 * 2 * per_slot + 5 * per_block + per_block - 1;
  hybrid_cache *c = NULL;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_OK, d.msg);
  if (!c) return;
  CHECK_EQ_INT(hybrid_cache_n_blocks(c), 5); /* a single bank would have left room for more */
  CHECK_EQ_INT(hybrid_cache_state_banks(c), 2);
  CHECK_EQ_INT(hybrid_cache_slot_cost(c), 2 * per_slot);
  kv_geometry kg = hp.kv;
  kg.n_blocks = 5;
  CHECK_EQ_INT(hybrid_cache_bytes(c),
               kv_geometry_total_bytes(&kg) + 2 * (state_pool_bytes(hybrid_cache_states(c)) / 2));
  CHECK_EQ_INT(state_pool_bytes(hybrid_cache_states(c)) % 2, 0);
  block_table t[2];
  int32_t slot[2] = {-1, -1};
  for (int i = 0; i < 2; i++) {
    block_table_init(&t[i]);
    CHECK_STATUS(hybrid_cache_reserve(c, &t[i], &slot[i], 3, &d), PH_OK, d.msg);
  }
  state_pool *sp = hybrid_cache_states(c);
  stamp(sp, 0, 10.0f);
  stamp(sp, 1, 20.0f);
  const uint8_t spec[2] = {1, 1};
  tensor cv, rv, co, ro, cs, rs;
  CHECK_STATUS(hybrid_cache_bind_spec(c, slot, spec, 2, &d), PH_OK, d.msg);
  CHECK_EQ_INT(hybrid_cache_bound_is_slice(c), 1);
  CHECK_STATUS(hybrid_cache_state_views(c, 2, &cv, &rv, &d), PH_OK, d.msg);
  CHECK_STATUS(hybrid_cache_state_views_out(c, 2, &co, &ro, &d), PH_OK, d.msg);
  CHECK(co.data != cv.data && ro.data != rv.data);
  CHECK_EQ_INT(ro.dims[0], 2);
  CHECK_STATUS(hybrid_cache_publish(c, slot[0], &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  for (int32_t b = 0; b < 2; b++) write_present(sp, b, 30.0f + (float)b);
  CHECK_STATUS(hybrid_cache_unbind(c, &d), PH_OK, d.msg);
  CHECK_STATUS(hybrid_cache_state_views_staged(c, 2, slot[1], &cs, &rs, &d), PH_OK, d.msg);
  CHECK(rs.data == (float *)ro.data + 32); /* row 1 of the present view */
  CHECK_NEAR(((float *)rs.data)[0], 33.0f, 0);
  CHECK_EQ_INT(cs.dims[0], 24);
  CHECK_EQ_INT(rows_differ(sp, 1, 0, 20.0f), 0);
  CHECK_STATUS(hybrid_cache_publish(c, slot[1], &d), PH_OK, d.msg);
  CHECK_EQ_INT(rows_differ(sp, 1, 0, 31.0f), 0);
  CHECK_EQ_INT(rows_differ(sp, 0, 0, 10.0f), 0);
  CHECK_STATUS(hybrid_cache_publish(c, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(hybrid_cache_state_views_staged(c, 2, 2, &cs, &rs, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  CHECK_EQ_INT(hybrid_cache_bytes_moved(c), 0);
  for (int i = 0; i < 2; i++) {
    CHECK_STATUS(hybrid_cache_release(c, &t[i], &slot[i], &d), PH_OK, d.msg);
    free(t[i].ids);
  }
  hybrid_cache_free(c);
  c = NULL;
  /* the same budget with one bank holds more pages */
  hp.state_banks = 1;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_OK, d.msg);
  if (c) CHECK_EQ_INT(hybrid_cache_n_blocks(c), 5 + (3 * per_slot + per_block - 1) / per_block);
  if (c) CHECK_EQ_INT(hybrid_cache_state_banks(c), 1);
  hybrid_cache_free(c);
  c = NULL;
  /* two banks where the budget fits the slots only once */
  hp.state_banks = 0;
  hp.state.banks = 2;
  hp.memory_bytes = 3 * per_slot + 2 * per_block;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, "3 state slots");
  /* bad or contradicting bank counts */
  hp.memory_bytes = 1 << 20;
  hp.state_banks = 1; /* state.banks says 2 */
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "state_banks 1");
  hp.state.banks = 0;
  hp.state_banks = 3;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK(c == NULL);
  /* one bank: a speculative row is refused through the cache too */
  hp = hybrid_params(4, 2);
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_OK, d.msg);
  if (!c) return;
  block_table_init(&t[0]);
  slot[0] = -1;
  CHECK_STATUS(hybrid_cache_reserve(c, &t[0], &slot[0], 1, &d), PH_OK, d.msg);
  CHECK_STATUS(hybrid_cache_bind_spec(c, slot, spec, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "double-banked");
  CHECK_STATUS(hybrid_cache_bind_spec(c, slot, NULL, 1, &d), PH_OK, d.msg);
  CHECK_STATUS(hybrid_cache_state_views_out(c, 0, &co, &ro, &d), PH_OK, d.msg);
  CHECK_STATUS(hybrid_cache_state_views(c, 0, &cv, &rv, &d), PH_OK, d.msg);
  CHECK(co.data == cv.data && ro.data == rv.data); /* no speculative row: past == present */
  CHECK_STATUS(hybrid_cache_unbind(c, &d), PH_OK, d.msg);
  free(t[0].ids);
  hybrid_cache_free(c);
}

/* DeepSeek MLA (PagedAttention LATENT): every layer holds one latent page cache [P, K, 1, l+r]
 * and no value pages, and there is no fixed state, so sequences hold pages and no slot. */
static void test_hybrid_latent(void) {
  diag d;
  static const int32_t layers[3] = {0, 1, 2};
  /* DeepSeek-V3's latent row: kv_lora_rank 512 + qk_rope_head_dim 64, bf16, 16-token pages */
  kv_geometry v3 = {.n_full = 61,
                    .full_layers = NULL,
                    .n_kv_heads = 1,
                    .head_size = 512 + 64,
                    .block_size = 16,
                    .n_blocks = 1,
                    .dtype = PH_DTYPE_BF16,
                    .key_only = 1};
  int32_t all61[61];
  for (int i = 0; i < 61; i++) all61[i] = i;
  v3.full_layers = all61;
  CHECK_EQ_INT(kv_geometry_bytes_per_block(&v3), 61LL * 16 * 576 * 2); /* (l+r)*esize per layer */
  v3.key_only = 0;
  CHECK_EQ_INT(kv_geometry_bytes_per_block(&v3), 2LL * 61 * 16 * 576 * 2);
  v3.key_only = 2;
  CHECK_EQ_INT(kv_geometry_bytes_per_block(&v3), -1);

  hybrid_cache_params hp = {.kv = {.n_full = 3,
                                   .full_layers = layers,
                                   .n_kv_heads = 1,
                                   .head_size = 8,
                                   .block_size = 4,
                                   .n_blocks = 1 + 4,
                                   .dtype = PH_DTYPE_F32,
                                   .key_only = 1},
                            .state = {.n_linear = 0,
                                      .conv_dim = 1,
                                      .conv_kernel = 2,
                                      .n_v_heads = 1,
                                      .head_v = 1,
                                      .head_k = 1,
                                      .io_dtype = PH_DTYPE_F32,
                                      .max_slots = 8}}; /* ignored: no fixed state */
  hybrid_cache *c = NULL;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_OK, d.msg);
  if (!c) return;
  CHECK(!hybrid_cache_has_state(c));
  CHECK(hybrid_cache_key_only(c));
  CHECK_EQ_INT(hybrid_cache_max_slots(c), 0);
  CHECK_EQ_INT(kv_buffers_bytes_per_block(hybrid_cache_kv(c)), 3 * 4 * 8 * 4);
  CHECK_EQ_INT(hybrid_cache_bytes(c), 3 * 5 * 4 * 8 * 4); /* keys only, 640 B buffers aligned */
  tensor k, v;
  CHECK_STATUS(hybrid_cache_kv_views(c, 2, &k, NULL, &d), PH_OK, d.msg);
  CHECK_EQ_INT(k.dims[2], 1);
  CHECK_EQ_INT(k.dims[3], 8);
  CHECK_STATUS(hybrid_cache_kv_views(c, 2, &k, &v, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "no value pages");
  /* reserve takes pages and no slot, for more sequences than state.max_slots said */
  block_table t[9];
  int32_t slot[9];
  for (int i = 0; i < 4; i++) {
    block_table_init(&t[i]);
    slot[i] = -1;
    CHECK_STATUS(hybrid_cache_reserve(c, &t[i], &slot[i], 3, &d), PH_OK, d.msg);
    CHECK_EQ_INT(slot[i], -1);
    CHECK_EQ_INT(t[i].n_blocks, 1);
  }
  CHECK_EQ_INT(hybrid_cache_slots_used(c), 0);
  block_table_init(&t[4]);
  slot[4] = -1;
  CHECK_STATUS(hybrid_cache_reserve(c, &t[4], &slot[4], 1, &d), PH_ERR_LIMIT, d.msg); /* pages */
  /* a step binds no state; release and compaction wait for the unbind */
  CHECK_STATUS(hybrid_cache_bind(c, slot, 4, &d), PH_OK, d.msg);
  CHECK_EQ_INT(hybrid_cache_bound_is_slice(c), 1);
  CHECK_STATUS(hybrid_cache_bind(c, slot, 4, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(hybrid_cache_release(c, &t[0], &slot[0], &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_EQ_INT(t[0].n_blocks, 1);
  state_move moves[1];
  int32_t n_moves = -1;
  CHECK_STATUS(hybrid_cache_compact(c, moves, 0, &n_moves, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(hybrid_cache_unbind(c, &d), PH_OK, d.msg);
  CHECK_STATUS(hybrid_cache_unbind(c, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(hybrid_cache_compact(c, moves, 0, &n_moves, &d), PH_OK, d.msg);
  CHECK_EQ_INT(n_moves, 0);
  CHECK_STATUS(hybrid_cache_release(c, &t[0], &slot[0], &d), PH_OK, d.msg);
  CHECK_EQ_INT(hybrid_cache_pages_used(c), 3);
  CHECK_EQ_INT(hybrid_cache_bytes_moved(c), 0);
  for (int i = 0; i < 5; i++) free(t[i].ids);
  hybrid_cache_free(c);
  /* a memory budget is all pages: no slot bytes are set aside */
  hp.kv.n_blocks = 0;
  hp.memory_bytes = 7 * 3 * 4 * 8 * 4 + 5;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_OK, d.msg);
  if (c) CHECK_EQ_INT(hybrid_cache_n_blocks(c), 7);
  hybrid_cache_free(c);
}

int main(void) {
  RUN(test_pool_basics);
  RUN(test_pool_reuses_freed);
  RUN(test_all_or_nothing);
  RUN(test_pack_rows);
  RUN(test_randomized_accounting);
  RUN(test_kv_qwen35_27b);
  RUN(test_state_alloc_zeroes);
  RUN(test_state_slice_zero_copy);
  RUN(test_state_gather_counts_bytes);
  RUN(test_state_compaction);
  RUN(test_bank_sizes);
  RUN(test_bank_spec_step);
  RUN(test_bank_staged_cases);
  RUN(test_bank_release_alloc);
  RUN(test_bank_compaction);
  RUN(test_bank_errors);
  RUN(test_hybrid_reserve_release);
  RUN(test_hybrid_memory_budget);
  RUN(test_hybrid_banks);
  RUN(test_hybrid_latent);
  return check_finish();
}
