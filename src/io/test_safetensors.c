/* Tests for io/safetensors: write/read round trips for every dtype, one hand-made malformed image
 * per error the header lists (each checked for its status and for a message that names the
 * problem), sharded checkpoints and their index rules, and the two golden checkpoints.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "file_testing.h"
#include "io/safetensors.h"
#include "tensor/dtype.h"

static char g_tmp[2048];

static const char *tmp_path(char *buf, size_t bytes, const char *name) {
  diag d;
  CHECK_STATUS(path_join(buf, bytes, g_tmp, name, &d), PH_OK, d.msg);
  return buf;
}

/* ---- building images by hand ----------------------------------------------------------------- */

/* [u64 len][header][data_bytes of pattern]; len is the header's length unless forced. */
typedef struct image {
  uint8_t *bytes;
  size_t size;
} image;

static image make_image_len(const char *header, uint64_t len_field, size_t data_bytes) {
  size_t hl = strlen(header);
  image im;
  im.size = 8 + hl + data_bytes;
  im.bytes = malloc(im.size);
  for (int i = 0; i < 8; i++) im.bytes[i] = (uint8_t)(len_field >> (8 * i));
  memcpy(im.bytes + 8, header, hl);
  for (size_t i = 0; i < data_bytes; i++) im.bytes[8 + hl + i] = (uint8_t)(i * 7 + 1);
  return im;
}

static image make_image(const char *header, size_t data_bytes) {
  return make_image_len(header, strlen(header), data_bytes);
}

/* Parses im (freed here), expects status and every needle in the message. */
static void expect_error(image im, ph_status want, const char *needle1, const char *needle2) {
  diag d;
  diag_clear(&d);
  st_set *s = (st_set *)1;
  ph_status got = st_parse(im.bytes, im.size, "bad.safetensors", &s, &d);
  CHECK_STATUS(got, want, d.msg);
  CHECK(s == NULL);
  CHECK_CONTAINS(d.msg, "bad.safetensors");
  if (needle1) CHECK_CONTAINS(d.msg, needle1);
  if (needle2) CHECK_CONTAINS(d.msg, needle2);
  if (s != (st_set *)1) st_close(s);
  free(im.bytes);
}

#define ENTRY_F32_2(begin, end)                                                                    \
  "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" #begin "," #end "]}"

/* ---- round trips ----------------------------------------------------------------------------- */

typedef struct fill_ctx {
  size_t n_calls;
  size_t fail_at; /* SIZE_MAX: never */
  const st_write_entry *entries;
} fill_ctx;

static uint8_t pattern_byte(size_t index, size_t i) { return (uint8_t)(index * 31 + i * 13 + 5); }

static ph_status fill_pattern(void *user, size_t index, void *dst, diag *d) {
  fill_ctx *c = user;
  c->n_calls++;
  if (index == c->fail_at) return diag_set(d, PH_ERR_INTERNAL, "fill refused index %zu", index);
  size_t bytes = (size_t)shape_bytes(&c->entries[index].shape, c->entries[index].dtype);
  for (size_t i = 0; i < bytes; i++) ((uint8_t *)dst)[i] = pattern_byte(index, i);
  return PH_OK;
}

/* Expected bytes of entry index: its data if given, else the fill pattern. */
static int tensor_bytes_match(const st_tensor *t, const st_write_entry *e, size_t index) {
  size_t bytes = (size_t)shape_bytes(&e->shape, e->dtype);
  if (t->data_end - t->data_begin != bytes) return 0;
  for (size_t i = 0; i < bytes; i++) {
    uint8_t want = e->data ? ((const uint8_t *)e->data)[i] : pattern_byte(index, i);
    if (t->data[i] != want) return 0;
  }
  return 1;
}

static void check_set_matches(const st_set *s, const st_write_entry *es, size_t n) {
  CHECK_EQ_INT(st_count(s), n);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    const st_tensor *t = st_find(s, es[i].name);
    if (!CHECK(t != NULL)) {
      fprintf(stderr, "       missing %s\n", es[i].name);
      continue;
    }
    CHECK_EQ_STR(t->name, es[i].name);
    CHECK_EQ_INT(t->dtype, es[i].dtype);
    CHECK(shape_equal(&t->shape, &es[i].shape));
    if (!CHECK(tensor_bytes_match(t, &es[i], i))) fprintf(stderr, "       bytes of %s\n", t->name);
    total += t->data_end - t->data_begin;
  }
  CHECK_EQ_INT(st_total_bytes(s), total);
  for (size_t i = 1; i < st_count(s); i++)
    CHECK(strcmp(st_at(s, i - 1)->name, st_at(s, i)->name) < 0);
  CHECK(st_at(s, st_count(s)) == NULL);
}

static void test_round_trip_every_dtype(void) {
  static const float f32[6] = {1.0f, -2.5f, 3.25f, 0.0f, -0.0f, 1e30f};
  static const int64_t i64 = -1234567890123LL;
  static const int8_t i8[7] = {-128, -1, 0, 1, 2, 3, 127};
  static const uint8_t f8[3] = {0x38, 0xb8, 0x7e};
  st_write_entry es[] = {
      {"z.f32", PH_DTYPE_F32, {2, {2, 3}}, f32},
      {"y.f16", PH_DTYPE_F16, {1, {5}}, NULL},
      {"x.bf16", PH_DTYPE_BF16, {3, {3, 1, 2}}, NULL},
      {"w.i64.scalar", PH_DTYPE_I64, {0, {0}}, &i64},
      {"v.i32.empty", PH_DTYPE_I32, {2, {0, 4}}, NULL},
      {"u.i8", PH_DTYPE_I8, {1, {7}}, i8},
      {"t.u8", PH_DTYPE_U8, {3, {2, 2, 3}}, NULL},
      {"s.f8", PH_DTYPE_F8E4M3, {1, {3}}, f8},
      {"r.f32.empty", PH_DTYPE_F32, {3, {4, 0, 2}}, NULL},
  };
  size_t n = sizeof es / sizeof es[0];
  char path[4096];
  tmp_path(path, sizeof path, "round_trip.safetensors");
  fill_ctx ctx = {0, SIZE_MAX, es};
  diag d;
  CHECK_STATUS(st_write_file(path, es, n, fill_pattern, &ctx, &d), PH_OK, d.msg);
  CHECK_EQ_INT(ctx.n_calls, 3); /* zero-size tensors are not filled */

  st_set *s = NULL;
  CHECK_STATUS(st_open_file(path, &s, &d), PH_OK, d.msg);
  if (!s) return;
  check_set_matches(s, es, n);
  CHECK_EQ_STR(st_metadata(s, "format"), "pt");
  CHECK(st_metadata(s, "nope") == NULL);
  const st_tensor *sc = st_find(s, "w.i64.scalar");
  if (CHECK(sc != NULL)) {
    CHECK_EQ_INT(sc->shape.n_dims, 0);
    int64_t v;
    memcpy(&v, sc->data, 8);
    CHECK_EQ_INT(v, i64);
  }
  /* offsets packed in entry order, and the data section starts 8-aligned */
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    const st_tensor *t = st_find(s, es[i].name);
    if (!t) continue;
    CHECK_EQ_INT(t->data_begin, off);
    off = t->data_end;
    CHECK_EQ_INT(t->file_index, 0);
  }
  const st_tensor *first = st_find(s, "z.f32");
  char *raw = NULL;
  size_t raw_len = 0;
  CHECK_STATUS(file_read_all(path, 1 << 20, &raw, &raw_len, &d), PH_OK, d.msg);
  if (raw && first) {
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (uint8_t)raw[i];
    CHECK_EQ_INT(hl % 8, 0);
    CHECK_EQ_INT(first->data_begin, 0);
    CHECK_EQ_INT(raw_len, 8 + hl + off);
    CHECK(memcmp(raw + 8, "{\"__metadata__\":{\"format\":\"pt\"},\"z.f32\"", 39) == 0);
  }
  free(raw);
  st_close(s);
  st_close(NULL);
}

static void test_write_errors(void) {
  static const float x[2] = {1, 2};
  diag d;
  char path[4096];
  tmp_path(path, sizeof path, "write_errors.safetensors");

  st_write_entry dup[] = {{"a", PH_DTYPE_F32, {1, {2}}, x}, {"a", PH_DTYPE_F32, {1, {2}}, x}};
  CHECK_STATUS(st_write_file(path, dup, 2, NULL, NULL, &d), PH_ERR_DUPLICATE_TENSOR, d.msg);
  CHECK_CONTAINS(d.msg, "\"a\"");
  CHECK(!path_exists(path));

  st_write_entry nofill[] = {{"a", PH_DTYPE_F32, {1, {2}}, NULL}};
  CHECK_STATUS(st_write_file(path, nofill, 1, NULL, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "no data");

  st_write_entry badtype[] = {{"a", PH_DTYPE_INVALID, {1, {2}}, x}};
  CHECK_STATUS(st_write_file(path, badtype, 1, NULL, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);

  st_write_entry negdim[] = {{"a", PH_DTYPE_F32, {1, {-2}}, x}};
  CHECK_STATUS(st_write_file(path, negdim, 1, NULL, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);

  /* fill failure: typed, names path and tensor, and leaves no partial file */
  st_write_entry two[] = {{"a", PH_DTYPE_F32, {1, {2}}, NULL}, {"b", PH_DTYPE_F32, {1, {2}}, NULL}};
  fill_ctx ctx = {0, 1, two};
  CHECK_STATUS(st_write_file(path, two, 2, fill_pattern, &ctx, &d), PH_ERR_INTERNAL, d.msg);
  CHECK_CONTAINS(d.msg, "write_errors.safetensors");
  CHECK_CONTAINS(d.msg, "\"b\"");
  CHECK(!path_exists(path));

  char bad_path[4096];
  tmp_path(bad_path, sizeof bad_path, "no/such/dir/x.safetensors");
  CHECK_STATUS(st_write_file(bad_path, two, 1, fill_pattern, &ctx, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "no/such/dir/x.safetensors");
}

/* ---- malformed images ------------------------------------------------------------------------ */

static void test_valid_edge_cases(void) {
  /* gaps, trailing bytes, zero-size tensors sharing offsets, odd (unaligned) offsets */
  image im = make_image("{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[1,7]},"
                        "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[3,3]},"
                        "\"f\":{\"dtype\":\"F32\",\"shape\":[5,0],\"data_offsets\":[20,20]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[9,10]}}  ",
                        20);
  st_set *s = NULL;
  diag d;
  CHECK_STATUS(st_parse(im.bytes, im.size, "edge", &s, &d), PH_OK, d.msg);
  CHECK_EQ_INT(st_count(s), 4);
  const st_tensor *a = st_find(s, "a");
  size_t hl = im.size - 8 - 20;
  if (CHECK(a != NULL)) CHECK(a->data == im.bytes + 8 + hl + 1);
  CHECK_EQ_INT(st_total_bytes(s), 7);
  CHECK(st_metadata(s, "format") == NULL);
  CHECK(st_find(s, "zz") == NULL);
  CHECK(st_find(s, "") == NULL);
  st_close(s);
  free(im.bytes);

  im = make_image("{}", 0);
  CHECK_STATUS(st_parse(im.bytes, im.size, "empty", &s, &d), PH_OK, d.msg);
  CHECK_EQ_INT(st_count(s), 0);
  st_close(s);
  free(im.bytes);
}

static void test_header_size_errors(void) {
  uint8_t tiny[5] = {1, 0, 0, 0, 0};
  expect_error((image){memcpy(malloc(5), tiny, 5), 5}, PH_ERR_SAFETENSORS_HEADER_SIZE, "5 bytes",
               NULL);
  expect_error(make_image_len("{}", 0, 8), PH_ERR_SAFETENSORS_HEADER_SIZE, "header length is 0",
               NULL);
  expect_error(make_image_len("{}", (uint64_t)1 << 63, 8), PH_ERR_SAFETENSORS_HEADER_SIZE,
               "9223372036854775808", "limit");
  expect_error(make_image_len("{}", 1000, 8), PH_ERR_SAFETENSORS_HEADER_SIZE, "1000",
               "10 bytes follow");
  expect_error(make_image_len("{}", SAFETENSORS_MAX_HEADER + 1, 0), PH_ERR_SAFETENSORS_HEADER_SIZE,
               "104857601", NULL);
}

static void test_truncated_files(void) {
  st_write_entry es[] = {{"first", PH_DTYPE_F32, {1, {4}}, NULL},
                         {"last", PH_DTYPE_I32, {2, {2, 3}}, NULL}};
  char path[4096];
  tmp_path(path, sizeof path, "to_cut.safetensors");
  fill_ctx ctx = {0, SIZE_MAX, es};
  diag d;
  CHECK_STATUS(st_write_file(path, es, 2, fill_pattern, &ctx, &d), PH_OK, d.msg);
  char *raw = NULL;
  size_t len = 0;
  CHECK_STATUS(file_read_all(path, 1 << 20, &raw, &len, &d), PH_OK, d.msg);
  if (!raw) return;
  /* cut inside the data: the header still parses, the last tensor runs past the end */
  image cut = {malloc(len), len - 5};
  memcpy(cut.bytes, raw, len);
  expect_error(cut, PH_ERR_SAFETENSORS_TRUNCATED, "\"last\"", "ends at 40");
  /* cut inside the header */
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = (hl << 8) | (uint8_t)raw[i];
  image cut_header = {malloc(len), 8 + (size_t)hl / 2};
  memcpy(cut_header.bytes, raw, len);
  expect_error(cut_header, PH_ERR_SAFETENSORS_HEADER_SIZE, "header length", "cut inside");
  /* the same through a file */
  tmp_path(path, sizeof path, "cut.safetensors");
  CHECK_STATUS(file_write_all(path, raw, len - 1, &d), PH_OK, d.msg);
  st_set *s = (st_set *)1;
  CHECK_STATUS(st_open_file(path, &s, &d), PH_ERR_SAFETENSORS_TRUNCATED, d.msg);
  CHECK(s == NULL);
  CHECK_CONTAINS(d.msg, "cut.safetensors");
  free(raw);
}

static void test_json_errors(void) {
  expect_error(make_image("{not json", 0), PH_ERR_SAFETENSORS_HEADER, "JSON rejected", "line 1");
  expect_error(make_image("[1, 2]", 0), PH_ERR_SAFETENSORS_HEADER, "an array",
               "expected an object");
  expect_error(make_image("\"str\"", 0), PH_ERR_SAFETENSORS_HEADER, "a string", NULL);
  expect_error(make_image("{\"a\":" ENTRY_F32_2(0, 8) ",\"a\":" ENTRY_F32_2(8, 16) "}", 16),
               PH_ERR_SAFETENSORS_HEADER, "duplicate", NULL);
  expect_error(make_image("{\"__metadata__\":{\"format\":\"pt\",\"n\":3}}", 0),
               PH_ERR_SAFETENSORS_HEADER, "__metadata__", "\"n\" is an integer");
  expect_error(make_image("{\"__metadata__\":[\"pt\"]}", 0), PH_ERR_SAFETENSORS_HEADER,
               "__metadata__", "an array");
}

static void test_entry_errors(void) {
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
                          "\"extra\":1}}",
                          8),
               PH_ERR_SAFETENSORS_HEADER, "\"w\"", "unexpected key \"extra\"");
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8),
               PH_ERR_SAFETENSORS_HEADER, "\"w\"", "missing \"data_offsets\"");
  expect_error(make_image("{\"w\":[1]}", 8), PH_ERR_SAFETENSORS_HEADER, "\"w\"",
               "expected an object");
  expect_error(make_image("{\"w\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
               PH_ERR_SAFETENSORS_HEADER, "\"dtype\" is an integer", NULL);
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,8]}}", 8),
               PH_ERR_SAFETENSORS_HEADER, "shape[1] is negative (-3)", "\"w\"");
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],"
                          "\"data_offsets\":[0,8]}}",
                          8),
               PH_ERR_SAFETENSORS_HEADER, "9 dims", "at most 8");
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8),
               PH_ERR_SAFETENSORS_HEADER, "shape[0] is a real", NULL);
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.0,8]}}", 8),
               PH_ERR_SAFETENSORS_HEADER, "data_offsets[0] is a real", "\"w\"");
  expect_error(
      make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8),
      PH_ERR_SAFETENSORS_HEADER, "data_offsets[1] is a string", NULL);
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8),
               PH_ERR_SAFETENSORS_HEADER, "data_offsets[0] is negative", NULL);
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", 8),
               PH_ERR_SAFETENSORS_HEADER, "3 elements", NULL);
  expect_error(make_image("{\"\":" ENTRY_F32_2(0, 8) "}", 8), PH_ERR_SAFETENSORS_HEADER,
               "empty name", NULL);
}

static void test_dtype_errors(void) {
  expect_error(make_image("{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
               PH_ERR_SAFETENSORS_DTYPE, "\"F33\"", "\"w\"");
  expect_error(make_image("{\"m\":{\"dtype\":\"BOOL\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8),
               PH_ERR_SAFETENSORS_DTYPE, "\"BOOL\"", "\"m\"");
  expect_error(make_image("{\"w\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
               PH_ERR_SAFETENSORS_DTYPE, "\"f32\"", NULL);
}

static void test_size_and_range_errors(void) {
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 12),
               PH_ERR_SAFETENSORS_SIZE_MISMATCH, "hold 8 bytes", "needs 12");
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8),
               PH_ERR_SAFETENSORS_SIZE_MISMATCH, "[8, 0]", "begin after end");
  expect_error(make_image("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                          "\"data_offsets\":[0,8]}}",
                          8),
               PH_ERR_SAFETENSORS_SIZE_MISMATCH, "overflows", "\"w\"");
  expect_error(make_image("{\"w\":{\"dtype\":\"U8\",\"shape\":[4611686018427387904],"
                          "\"data_offsets\":[0,4611686018427387904]}}",
                          8),
               PH_ERR_SAFETENSORS_RANGE, "4611686018427387904", "\"w\"");
  /* a range past the data section is a cut file: TRUNCATED, not RANGE */
  expect_error(make_image("{\"a\":" ENTRY_F32_2(0, 8) ",\"b\":" ENTRY_F32_2(8, 16) "}", 12),
               PH_ERR_SAFETENSORS_TRUNCATED, "data section has 12 bytes", "\"b\" ends at 16");
  /* jansson cannot hold integers past 2^63-1: a JSON error */
  expect_error(make_image("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
                          "\"data_offsets\":[0,99999999999999999999]}}",
                          8),
               PH_ERR_SAFETENSORS_HEADER, "JSON rejected", NULL);
}

static void test_overlap(void) {
  expect_error(make_image("{\"a\":" ENTRY_F32_2(0, 8) ",\"b\":" ENTRY_F32_2(4, 12) "}", 12),
               PH_ERR_SAFETENSORS_OVERLAP, "\"a\" [0, 8)", "\"b\" [4, 12)");
  /* one range inside another, listed out of order */
  expect_error(make_image("{\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[10,12]},"
                          "\"big\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
                          "\"d\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[14,16]}}",
                          16),
               PH_ERR_SAFETENSORS_OVERLAP, "\"big\"", "\"c\"");
  /* identical ranges */
  expect_error(make_image("{\"a\":" ENTRY_F32_2(0, 8) ",\"b\":" ENTRY_F32_2(0, 8) "}", 8),
               PH_ERR_SAFETENSORS_OVERLAP, "\"a\"", "\"b\"");
}

/* ---- sharded checkpoints --------------------------------------------------------------------- */

static void make_dir(char *buf, size_t bytes, const char *name) {
  tmp_path(buf, bytes, name);
  diag d;
  CHECK_STATUS(path_mkdirs(buf, &d), PH_OK, d.msg);
}

static void write_in(const char *dir, const char *name, const char *text) {
  char path[4096];
  diag d;
  CHECK_STATUS(path_join(path, sizeof path, dir, name, &d), PH_OK, d.msg);
  CHECK_STATUS(file_write_all(path, text, strlen(text), &d), PH_OK, d.msg);
}

static void write_st_in(const char *dir, const char *name, const st_write_entry *es, size_t n) {
  char path[4096];
  diag d;
  CHECK_STATUS(path_join(path, sizeof path, dir, name, &d), PH_OK, d.msg);
  CHECK_STATUS(st_write_file(path, es, n, NULL, NULL, &d), PH_OK, d.msg);
}

static void test_sharded_round_trip(void) {
  static const uint8_t big[100] = {7, 7, 7};
  st_write_entry es[] = {
      {"a", PH_DTYPE_F32, {1, {16}}, NULL},    /* 64 */
      {"b", PH_DTYPE_BF16, {2, {4, 8}}, NULL}, /* 64 */
      {"c", PH_DTYPE_I64, {1, {8}}, NULL},     /* 64 */
      {"d", PH_DTYPE_U8, {1, {100}}, big},     /* 100, larger than a shard */
      {"e", PH_DTYPE_I8, {1, {0}}, NULL},      /* 0 */
      {"f", PH_DTYPE_F16, {0, {0}}, NULL},     /* 2 */
      {"g.nested.name", PH_DTYPE_F8E4M3, {2, {3, 5}}, NULL},
  };
  size_t n = sizeof es / sizeof es[0];
  char dir[4096];
  make_dir(dir, sizeof dir, "sharded");
  fill_ctx ctx = {0, SIZE_MAX, es};
  diag d;
  CHECK_STATUS(st_write_sharded(dir, es, n, 80, fill_pattern, &ctx, &d), PH_OK, d.msg);
  char path[4096];
  CHECK(path_exists(tmp_path(path, sizeof path, "sharded/model-00001-of-00005.safetensors")));
  CHECK(path_exists(tmp_path(path, sizeof path, "sharded/model-00005-of-00005.safetensors")));
  CHECK(!path_exists(tmp_path(path, sizeof path, "sharded/model-00006-of-00005.safetensors")));
  char *index = NULL;
  size_t index_len = 0;
  tmp_path(path, sizeof path, "sharded/model.safetensors.index.json");
  CHECK_STATUS(file_read_all(path, 1 << 20, &index, &index_len, &d), PH_OK, d.msg);
  CHECK_CONTAINS(index, "\"total_size\": 309");
  CHECK_CONTAINS(index, "\"d\": \"model-00004-of-00005.safetensors\"");
  free(index);

  st_set *s = NULL;
  CHECK_STATUS(st_open_dir(dir, &s, &d), PH_OK, d.msg);
  if (!s) return;
  check_set_matches(s, es, n);
  CHECK_EQ_INT(st_total_bytes(s), 309);
  CHECK_EQ_STR(st_metadata(s, "format"), "pt");
  /* a (64) | b (64) | c (64) | d (100, over the limit alone, so nothing joins it) | e f g */
  static const int want_file[] = {0, 1, 2, 3, 4, 4, 4};
  for (size_t i = 0; i < n; i++) {
    const st_tensor *t = st_find(s, es[i].name);
    if (t) CHECK_EQ_INT(t->file_index, want_file[i]);
  }
  st_close(s);

  /* everything in one shard still writes the sharded form */
  make_dir(dir, sizeof dir, "one_shard");
  CHECK_STATUS(st_write_sharded(dir, es, n, 1 << 20, fill_pattern, &ctx, &d), PH_OK, d.msg);
  CHECK(path_exists(tmp_path(path, sizeof path, "one_shard/model-00001-of-00001.safetensors")));
  CHECK_STATUS(st_open_dir(dir, &s, &d), PH_OK, d.msg);
  if (s) check_set_matches(s, es, n);
  st_close(s);
}

/* Issue 10 defect 2: a failed write removed its target, even a file that was there before (or a
 * device node). Now only the temporary file goes; a FIFO or device target is refused at once. */
static void test_failed_write_keeps_target(void) {
  static const float x[2] = {1, 2};
  diag d;
  char dir[4096], path[4096];
  make_dir(dir, sizeof dir, "keep_target");
  st_write_entry one[] = {{"x", PH_DTYPE_F32, {1, {2}}, x}};
  CHECK_STATUS(path_join(path, sizeof path, dir, "model.safetensors", &d), PH_OK, d.msg);
  CHECK_STATUS(st_write_file(path, one, 1, NULL, NULL, &d), PH_OK, d.msg);
  char *before = NULL;
  size_t before_len = 0;
  CHECK_STATUS(file_read_all(path, 1 << 20, &before, &before_len, &d), PH_OK, d.msg);
  /* the fill fails after the header and the first tensor were written */
  st_write_entry two[] = {{"a", PH_DTYPE_F32, {1, {256}}, NULL},
                          {"b", PH_DTYPE_F32, {1, {2}}, NULL}};
  fill_ctx ctx = {0, 1, two};
  CHECK_STATUS(st_write_file(path, two, 2, fill_pattern, &ctx, &d), PH_ERR_INTERNAL, d.msg);
  CHECK(before && ft_file_is(path, before, before_len));
  CHECK_EQ_INT(ft_count_tmp(dir), 0);
  free(before);

  /* sharded: a failure in the last shard replaces none of the earlier checkpoint's files */
  st_write_entry es[] = {{"a", PH_DTYPE_F32, {1, {16}}, NULL},
                         {"b", PH_DTYPE_F32, {1, {16}}, NULL},
                         {"c", PH_DTYPE_F32, {1, {16}}, NULL}};
  fill_ctx ok = {0, SIZE_MAX, es};
  CHECK_STATUS(st_write_sharded(dir, es, 3, 64, fill_pattern, &ok, &d), PH_OK, d.msg);
  char shard[4096], index[4096];
  CHECK_STATUS(path_join(shard, sizeof shard, dir, "model-00001-of-00003.safetensors", &d), PH_OK,
               d.msg);
  CHECK_STATUS(path_join(index, sizeof index, dir, "model.safetensors.index.json", &d), PH_OK,
               d.msg);
  char *shard_before = NULL, *index_before = NULL;
  size_t shard_len = 0, index_len = 0;
  CHECK_STATUS(file_read_all(shard, 1 << 20, &shard_before, &shard_len, &d), PH_OK, d.msg);
  CHECK_STATUS(file_read_all(index, 1 << 20, &index_before, &index_len, &d), PH_OK, d.msg);
  st_write_entry es2[] = {{"a", PH_DTYPE_F32, {1, {16}}, x},
                          {"b", PH_DTYPE_F32, {1, {16}}, NULL},
                          {"z", PH_DTYPE_F32, {1, {16}}, NULL}};
  fill_ctx fail = {0, 2, es2};
  es2[0].data = NULL;
  CHECK_STATUS(st_write_sharded(dir, es2, 3, 64, fill_pattern, &fail, &d), PH_ERR_INTERNAL, d.msg);
  CHECK(shard_before && ft_file_is(shard, shard_before, shard_len));
  CHECK(index_before && ft_file_is(index, index_before, index_len));
  CHECK_EQ_INT(ft_count_tmp(dir), 0);
  free(shard_before);
  free(index_before);

  /* a FIFO (the write used to block) or a device (the write used to remove it) is refused */
  char fifo[4096];
  CHECK(ft_fifo(fifo, dir, "fifo.safetensors"));
  ft_watchdog(10);
  CHECK_STATUS(st_write_file(fifo, one, 1, NULL, NULL, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "a FIFO");
  CHECK(ft_is_fifo(fifo));
  CHECK_STATUS(st_write_file("/dev/full", one, 1, NULL, NULL, &d), PH_ERR_IO, d.msg);
  CHECK(path_exists("/dev/full"));
  /* and reading one fails at once instead of blocking in open() */
  st_set *s = NULL;
  CHECK_STATUS(st_open_file(fifo, &s, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "fifo.safetensors: is a FIFO");
  char fdir[4096];
  make_dir(fdir, sizeof fdir, "fifo_weights");
  CHECK(ft_fifo(fifo, fdir, "model.safetensors"));
  CHECK_STATUS(st_open_dir(fdir, &s, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "model.safetensors: is a FIFO");
  ft_watchdog(0);
  CHECK(s == NULL);
  CHECK_EQ_INT(ft_count_tmp(dir), 0);
}

static void test_single_file_dir(void) {
  static const float x[2] = {1, 2};
  st_write_entry es[] = {{"x", PH_DTYPE_F32, {1, {2}}, x}};
  char dir[4096];
  make_dir(dir, sizeof dir, "single");
  write_st_in(dir, "model.safetensors", es, 1);
  st_set *s = NULL;
  diag d;
  CHECK_STATUS(st_open_dir(dir, &s, &d), PH_OK, d.msg);
  if (s) check_set_matches(s, es, 1);
  st_close(s);

  make_dir(dir, sizeof dir, "empty_dir");
  s = (st_set *)1;
  CHECK_STATUS(st_open_dir(dir, &s, &d), PH_ERR_NOT_FOUND, d.msg);
  CHECK(s == NULL);
  CHECK_CONTAINS(d.msg, "empty_dir");
  CHECK_CONTAINS(d.msg, "model.safetensors.index.json");
}

/* Writes a dir with shards s1 = {a, b} and s2 (default {c}), and the given index text, then
 * opens it expecting want (PH_OK: the three tensors a, b, c). */
static void expect_index_error(const char *name, const char *index, const st_write_entry *s2,
                               size_t n2, ph_status want, const char *needle1,
                               const char *needle2) {
  static const float x[2] = {1, 2};
  st_write_entry s1[] = {{"a", PH_DTYPE_F32, {1, {2}}, x}, {"b", PH_DTYPE_F32, {1, {2}}, x}};
  st_write_entry s2_default[] = {{"c", PH_DTYPE_F32, {1, {2}}, x}};
  char dir[4096];
  make_dir(dir, sizeof dir, name);
  write_st_in(dir, "s1.safetensors", s1, 2);
  write_st_in(dir, "s2.safetensors", s2 ? s2 : s2_default, s2 ? n2 : 1);
  write_in(dir, "model.safetensors.index.json", index);
  st_set *s = (st_set *)1;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(st_open_dir(dir, &s, &d), want, d.msg);
  if (want == PH_OK) {
    CHECK_EQ_INT(st_count(s), 3);
    if (s) {
      CHECK_EQ_INT(st_find(s, "a")->file_index, 0);
      CHECK_EQ_INT(st_find(s, "c")->file_index, 1);
    }
    st_close(s);
    return;
  }
  CHECK(s == NULL);
  if (needle1) CHECK_CONTAINS(d.msg, needle1);
  if (needle2) CHECK_CONTAINS(d.msg, needle2);
  if (s != (st_set *)1) st_close(s);
}

static void test_index_errors(void) {
  static const float x[2] = {1, 2};
  /* the fixture as it should be, so each failure below is about its one change */
  expect_index_error("idx_ok",
                     "{\"metadata\":{\"total_size\":24},\"weight_map\":{\"a\":\"s1.safetensors\","
                     "\"b\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}",
                     NULL, 0, PH_OK, NULL, NULL);
  expect_index_error("idx_missing_shard",
                     "{\"metadata\":{},\"weight_map\":{\"a\":\"s1.safetensors\","
                     "\"b\":\"s1.safetensors\",\"c\":\"s3.safetensors\"}}",
                     NULL, 0, PH_ERR_SAFETENSORS_INDEX, "\"s3.safetensors\"", "\"c\"");
  expect_index_error("idx_not_in_shard",
                     "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                     "\"c\":\"s2.safetensors\",\"zz\":\"s2.safetensors\"}}",
                     NULL, 0, PH_ERR_SAFETENSORS_INDEX, "\"zz\"", "does not contain");
  expect_index_error("idx_wrong_shard",
                     "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\","
                     "\"c\":\"s2.safetensors\"}}",
                     NULL, 0, PH_ERR_SAFETENSORS_INDEX, "\"a\" in \"s2.safetensors\"",
                     "it is in \"s1.safetensors\"");
  /* s2 = {a, c}: "a" lives in both shards whichever one the index names */
  st_write_entry dup[] = {{"a", PH_DTYPE_F32, {1, {2}}, x}, {"c", PH_DTYPE_F32, {1, {2}}, x}};
  expect_index_error("idx_duplicate",
                     "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                     "\"c\":\"s2.safetensors\"}}",
                     dup, 2, PH_ERR_DUPLICATE_TENSOR, "\"a\"",
                     "\"s1.safetensors\" and \"s2.safetensors\"");
  expect_index_error("idx_duplicate2",
                     "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\"}}", dup, 2,
                     PH_ERR_DUPLICATE_TENSOR, "\"a\"", "s2.safetensors");
  expect_index_error("idx_dotdot", "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}", NULL, 0,
                     PH_ERR_SAFETENSORS_INDEX, "\"../s1.safetensors\"", "plain file name");
  expect_index_error("idx_dotdot2", "{\"weight_map\":{\"a\":\"..\"}}", NULL, 0,
                     PH_ERR_SAFETENSORS_INDEX, "plain file name", NULL);
  expect_index_error("idx_slash", "{\"weight_map\":{\"a\":\"/etc/passwd\"}}", NULL, 0,
                     PH_ERR_SAFETENSORS_INDEX, "/etc/passwd", NULL);
  expect_index_error("idx_not_json", "{\"weight_map\":", NULL, 0, PH_ERR_SAFETENSORS_INDEX,
                     "JSON rejected", NULL);
  expect_index_error("idx_no_map", "{\"metadata\":{}}", NULL, 0, PH_ERR_SAFETENSORS_INDEX,
                     "weight_map", NULL);
  expect_index_error("idx_value_type", "{\"weight_map\":{\"a\":1}}", NULL, 0,
                     PH_ERR_SAFETENSORS_INDEX, "weight_map.\"a\" is an integer", NULL);
  expect_index_error("idx_dup_key",
                     "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\"}}", NULL,
                     0, PH_ERR_SAFETENSORS_INDEX, "duplicate", NULL);

  /* a malformed shard reports the shard's path */
  char dir[4096];
  make_dir(dir, sizeof dir, "idx_bad_shard");
  write_in(dir, "s1.safetensors", "short");
  write_in(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a\":\"s1.safetensors\"}}");
  st_set *s = NULL;
  diag d;
  CHECK_STATUS(st_open_dir(dir, &s, &d), PH_ERR_SAFETENSORS_HEADER_SIZE, d.msg);
  CHECK_CONTAINS(d.msg, "idx_bad_shard/s1.safetensors");

  /* tensors a shard holds beyond the weight_map are part of the set */
  make_dir(dir, sizeof dir, "idx_extra_tensor");
  st_write_entry s1[] = {{"a", PH_DTYPE_F32, {1, {2}}, x}, {"extra", PH_DTYPE_F32, {1, {2}}, x}};
  write_st_in(dir, "s1.safetensors", s1, 2);
  write_in(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a\":\"s1.safetensors\"}}");
  CHECK_STATUS(st_open_dir(dir, &s, &d), PH_OK, d.msg);
  CHECK_EQ_INT(st_count(s), 2);
  CHECK(st_find(s, "extra") != NULL);
  st_close(s);
}

/* ---- golden checkpoints ---------------------------------------------------------------------- */

static void test_golden_checkpoints(void) {
  char dir[4096];
  diag d;
  st_set *s = NULL;
  check_data(dir, sizeof dir, "golden/qwen35-tiny-f32/checkpoint");
  CHECK_STATUS(st_open_dir(dir, &s, &d), PH_OK, d.msg);
  if (s) {
    CHECK_EQ_INT(st_count(s), 56); /* 55 model tensors + lm_head.weight */
    CHECK_EQ_STR(st_metadata(s, "format"), "pt");
    const st_tensor *t = st_find(s, "lm_head.weight");
    if (CHECK(t != NULL)) {
      CHECK_EQ_INT(t->dtype, PH_DTYPE_F32);
      CHECK(shape_equal(&t->shape, &(shape){2, {256, 64}}));
    }
    for (size_t i = 0; i < st_count(s); i++) CHECK_EQ_INT(st_at(s, i)->dtype, PH_DTYPE_F32);
  }
  st_close(s);

  s = NULL;
  check_data(dir, sizeof dir, "golden/qwen35-tiny-bf16-vlm/checkpoint");
  CHECK_STATUS(st_open_dir(dir, &s, &d), PH_OK, d.msg);
  if (s) {
    CHECK(st_count(s) > 0);
    const st_tensor *t = st_find(s, "model.language_model.embed_tokens.weight");
    if (CHECK(t != NULL)) {
      CHECK_EQ_INT(t->dtype, PH_DTYPE_BF16);
      CHECK(shape_equal(&t->shape, &(shape){2, {320, 96}}));
      CHECK_EQ_INT(t->data_end - t->data_begin, 320 * 96 * 2);
    }
  }
  st_close(s);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) {
    fprintf(stderr, "cannot create %s: %s\n", g_tmp, d.msg);
    return 1;
  }
  RUN(test_round_trip_every_dtype);
  RUN(test_write_errors);
  RUN(test_valid_edge_cases);
  RUN(test_header_size_errors);
  RUN(test_truncated_files);
  RUN(test_json_errors);
  RUN(test_entry_errors);
  RUN(test_dtype_errors);
  RUN(test_size_and_range_errors);
  RUN(test_overlap);
  RUN(test_sharded_round_trip);
  RUN(test_failed_write_keeps_target);
  RUN(test_single_file_dir);
  RUN(test_index_errors);
  RUN(test_golden_checkpoints);
  return check_finish();
}
