/* jinja_internal — what the files of the Jinja interpreter share (see jinja.h): tokens, the
 * syntax tree, runtime values and the render state. Not for use outside src/text/jinja*.c.
 *
 * Memory: the tree lives in the template's arena; every value made while rendering lives in the
 * render's arena (freed at once when the render ends), whose size is bounded by
 * jinja_limits.max_memory_bytes. Small objects are bump-allocated from 16 KiB chunks of it, and
 * strings from a chunk of their own where the newest string can grow in place (a string built up
 * in a loop costs memory linear in its length). Values are never mutated once made, except a
 * namespace's members (`set ns.x = ...`), as in the reference.
 */
#ifndef PH_TEXT_JINJA_INTERNAL_H
#define PH_TEXT_JINJA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/diag.h"
#include "text/jinja.h"

/* A byte string (UTF-8; not NUL-terminated). */
typedef struct jstr {
  const char *p;
  size_t n;
} jstr;

/* ---- tokens (jinja_lex.c) ------------------------------------------------------------------ */

typedef enum jtok_kind {
  JT_TEXT,
  JT_NUMBER,
  JT_STRING,
  JT_IDENT,
  JT_EQUALS,
  JT_LPAREN,
  JT_RPAREN,
  JT_OPEN_STMT,  /* {% */
  JT_CLOSE_STMT, /* %} */
  JT_OPEN_EXPR,  /* {{ */
  JT_CLOSE_EXPR, /* }} */
  JT_LBRACKET,
  JT_RBRACKET,
  JT_LBRACE,
  JT_RBRACE,
  JT_COMMA,
  JT_DOT,
  JT_COLON,
  JT_PIPE,
  JT_ADD,     /* + - ~ */
  JT_MUL,     /* * / // % */
  JT_POW,     /* ** */
  JT_COMPARE, /* < > <= >= == != */
  JT_UNARY,   /* a lone + or - */
  JT_COMMENT,
} jtok_kind;

typedef struct jtok {
  jtok_kind kind;
  int line;  /* 1-based line in the original source */
  jstr text; /* the value: text, identifier, operator, unescaped string, number */
} jtok;

/* Preprocesses (trailing newline, lstrip_blocks, trim_blocks, generation tags) and splits src
 * into tokens allocated in a. */
ph_status jinja_lex(const char *src, size_t len, const char *origin, arena *a, jtok **toks,
                    size_t *n_toks, diag *d);

/* ---- syntax tree (jinja_parse.c) ----------------------------------------------------------- */

typedef enum jnode_kind {
  /* expressions */
  JN_INT,
  JN_FLOAT,
  JN_STR, /* also template text */
  JN_IDENT,
  JN_LIST,    /* kids: items */
  JN_TUPLE,   /* kids: items */
  JN_DICT,    /* kids: key, value, key, value, ... */
  JN_MEMBER,  /* a[b] (op 1) or a.b (op 0) */
  JN_SLICE,   /* a: start, b: stop, c: step (each may be NULL) */
  JN_CALL,    /* a: callee, kids: arguments (JN_KWARG for name=value) */
  JN_KWARG,   /* s: name, a: value */
  JN_UNARY,   /* op: 'n' not, '-', '+'; a */
  JN_BINARY,  /* op: JOP_*; a, b */
  JN_FILTER,  /* a: operand, s: filter name, kids: arguments, op 1 when called with () */
  JN_TEST,    /* a: operand, s: test name, op 1: is not */
  JN_SELECT,  /* a: value, b: condition (a if b, without else) */
  JN_TERNARY, /* a: condition, b: value when true, c: value when false */
  /* statements */
  JN_PROGRAM, /* kids: body */
  JN_IF,      /* a: test, kids: body, kids2: else (an elif is one JN_IF there) */
  JN_FOR,     /* a: target, b: iterable, c: filter condition or NULL, kids: body, kids2: else */
  JN_SET,     /* a: target, b: value (NULL: kids is a block body) */
  JN_MACRO,   /* s: name, kids2: parameters (JN_IDENT or JN_KWARG), kids: body */
  JN_BREAK,
  JN_CONTINUE,
  JN_COMMENT,
} jnode_kind;

enum {
  JOP_OR = 1,
  JOP_AND,
  JOP_EQ,
  JOP_NE,
  JOP_LT,
  JOP_GT,
  JOP_LE,
  JOP_GE,
  JOP_IN,
  JOP_NOT_IN,
  JOP_ADD,
  JOP_SUB,
  JOP_CONCAT,
  JOP_MUL,
  JOP_DIV,
  JOP_FLOORDIV,
  JOP_MOD,
  JOP_POW,
};

typedef struct jnode jnode;
struct jnode {
  jnode_kind kind;
  int line;
  int op;
  jstr s;
  int64_t i;
  double f;
  jnode *a, *b, *c;
  jnode **kids;
  size_t n_kids;
  jnode **kids2;
  size_t n_kids2;
};

struct jinja_template {
  arena mem;
  jnode *root;
  char origin[128];
};

ph_status jinja_parse_tokens(const jtok *toks, size_t n_toks, const char *origin, arena *a,
                             jnode **root, diag *d);

/* ---- values (jinja_value.c) ---------------------------------------------------------------- */

typedef enum jv_kind {
  JV_UNDEF,
  JV_NONE,
  JV_BOOL,
  JV_INT,
  JV_FLOAT,
  JV_STR,
  JV_LIST,
  JV_DICT,
  JV_NS,
  JV_FUNC,
} jv_kind;

typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;

struct jv {
  jv_kind kind;
  union {
    int b;
    int64_t i;
    double f;
    jstr s;
    jlist *l;
    jdict *d; /* JV_DICT and JV_NS */
    const jfunc *fn;
  } u;
};

struct jlist {
  size_t n;
  jv *items;
  int is_tuple; /* the reference's tuples are neither `iterable` nor joinable with + */
};

/* Insertion-ordered; a namespace's grows (cap) when set adds a member. */
struct jdict {
  size_t n, cap;
  jstr *keys;
  jv *vals;
};

typedef enum jfunc_kind { JF_MACRO, JF_GLOBAL, JF_METHOD } jfunc_kind;

struct jfunc {
  jfunc_kind kind;
  const jnode *macro; /* JF_MACRO */
  int id;             /* JF_GLOBAL: JG_*; JF_METHOD: JM_* */
  jv self;            /* JF_METHOD: the string or dict it is bound to */
};

enum { JG_RANGE = 1, JG_RAISE, JG_NAMESPACE, JG_STRFTIME };

/* The render state every evaluation function takes. */
typedef struct jctx {
  arena *mem;
  const jinja_limits *lim;
  const char *origin;
  diag *d;
  char *out; /* the output buffer: blocks render into it, macros cut their text back out */
  size_t out_n, out_cap;
  char *small_chunk; /* small objects: 8-byte aligned bump allocation (the arena aligns to 64) */
  size_t small_used, small_cap;
  char *str_chunk; /* strings are bump-allocated here, unaligned, so that the newest one can */
  size_t str_used, str_cap; /* grow in place: `set ns.s = ns.s ~ x` in a loop stays linear */
  int64_t loop_iterations;
  int call_depth;
  struct jenv *globals;
} jctx;

/* Every function below that can fail returns 0, or -1 with ctx->d set (PH_ERR_TEMPLATE or
 * PH_ERR_NO_MEMORY). */
int jctx_fail(jctx *c, int line, const char *fmt, ...) PH_PRINTF(3, 4);
void *jctx_alloc(jctx *c, int line, size_t bytes);
/* Room for a string of n bytes (not NUL-terminated) in the string chunk. */
char *jctx_str_alloc(jctx *c, int line, size_t n);
/* a ~ b: appended in place when a is the newest string and its chunk has room. */
int jctx_str_concat(jctx *c, int line, jstr a, jstr b, jv *out);

static inline jv jv_undef(void) {
  jv v = {JV_UNDEF, {0}};
  return v;
}
static inline jv jv_none(void) {
  jv v = {JV_NONE, {0}};
  return v;
}
static inline jv jv_bool(int b) {
  jv v = {JV_BOOL, {0}};
  v.u.b = !!b;
  return v;
}
static inline jv jv_int(int64_t i) {
  jv v = {JV_INT, {0}};
  v.u.i = i;
  return v;
}
static inline jv jv_float(double f) {
  jv v = {JV_FLOAT, {0}};
  v.u.f = f;
  return v;
}
static inline jv jv_str(jstr s) {
  jv v = {JV_STR, {0}};
  v.u.s = s;
  return v;
}

/* The reference's integers are JavaScript numbers: exact only up to 2^53. */
#define JV_MAX_SAFE_INT 9007199254740991LL

const char *jv_kind_name(jv_kind k);
int jv_truthy(jv v);
/* A string copied into the render arena. */
int jv_make_str(jctx *c, int line, const char *p, size_t n, jv *out);
int jv_make_list(jctx *c, int line, size_t n, jv *out); /* items zeroed (undefined) */
int jv_make_dict(jctx *c, int line, size_t cap, int ns, jv *out);
/* Sets key (replacing a present one in place, as a JavaScript Map does). */
int jdict_set(jctx *c, int line, jdict *d, jstr key, jv val);
/* The member's value, or NULL. */
const jv *jdict_get(const jdict *d, jstr key);
int jstr_eq(jstr a, jstr b);
int jstr_eq_c(jstr a, const char *s);

/* JSON (jansson) to a value: integral numbers become integers (as JSON.parse and the
 * reference's conversion do), and object members whose names are array indices come first in
 * ascending order (as JavaScript objects order them). */
int jv_from_json(jctx *c, const json_t *j, jv *out);

/* Appends to the output buffer. */
int jctx_emit(jctx *c, int line, const char *p, size_t n);
/* Appends what `{{ v }}` writes (nothing for undefined and none). */
int jv_emit(jctx *c, int line, jv v);
/* v as the reference's toString gives it, into the output buffer. */
int jv_emit_string(jctx *c, int line, jv v);
/* JSON text as the reference's toJSON writes it. indent < 0: none. undef_null: undefined
 * becomes null (tojson) rather than undefined (printing a list). */
typedef struct jjson_opts {
  int64_t indent;
  int ensure_ascii;
  int sort_keys;
  int undef_null;
  const char *item_sep, *key_sep; /* NULL: the defaults */
} jjson_opts;
int jv_emit_json(jctx *c, int line, jv v, const jjson_opts *o, int depth);

/* Cuts the output buffer back to mark, returning what was after it as a string value. */
int jctx_cut(jctx *c, int line, size_t mark, jv *out);

/* JavaScript number text (Number.prototype.toString), into buf (>= 32 bytes). */
void js_number_text(double v, char *buf, size_t cap);

/* ---- strings as JavaScript sees them (UTF-16 lengths, its whitespace) ---------------------- */

/* Decodes one code point at p (valid UTF-8 assumed; returns bytes used). */
size_t utf8_next(const char *p, size_t n, uint32_t *cp);
size_t utf8_put(uint32_t cp, char *out);
int js_is_space(uint32_t cp);
size_t js_utf16_len(jstr s);
jstr js_trim(jstr s, int start, int end);
/* Compares as JavaScript's < on strings does (UTF-16 code units). */
int js_str_cmp(jstr a, jstr b);
/* Lower/upper case copies (simple Unicode case mapping). */
int js_case(jctx *c, int line, jstr s, int upper, jv *out);

/* ---- evaluation (jinja_eval.c) and the builtins (jinja_filters.c) -------------------------- */

typedef struct jargs {
  size_t n;
  jv *pos;
  size_t n_kw;
  jstr *kw_names;
  jv *kw;
} jargs;

int jinja_eval(jctx *c, const jnode *n, struct jenv *env, jv *out);
int jinja_call(jctx *c, int line, jv fn, const jargs *args, struct jenv *env, jv *out);
const jv *jargs_kw(const jargs *a, const char *name);
/* Evaluates a call's argument nodes. */
int jinja_eval_args(jctx *c, const jnode *const *nodes, size_t n, struct jenv *env, jargs *out);

int jinja_filter(jctx *c, const jnode *n, jv operand, struct jenv *env, jv *out);
int jinja_test(jctx *c, const jnode *n, jv operand, int *result);
/* Member access (a.b, a[b]): dict members then dict methods; list/string items and methods. */
int jinja_member(jctx *c, int line, jv obj, jv key, jv *out);
int jinja_call_method(jctx *c, int line, const jfunc *f, const jargs *args, jv *out);
int jinja_call_global(jctx *c, int line, const jfunc *f, const jargs *args, jv *out);
/* The reference's loose equality (==) and its strict one (in). */
int jinja_loose_eq(jctx *c, int line, jv a, jv b, int *eq);
int jinja_strict_eq(jv a, jv b);
/* compareRuntimeValues: <0, 0, >0 in *cmp. */
int jinja_compare(jctx *c, int line, jv a, jv b, int case_sensitive, int *cmp);

#endif /* PH_TEXT_JINJA_INTERNAL_H */
