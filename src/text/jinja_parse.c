/* jinja_parse — tokens to a syntax tree, with the reference parser's grammar and precedence:
 *
 *   expr     := or ["if" or ["else" expr]]        (no else: undefined when false)
 *   or       := and {"or" and};  and := not {"and" not};  not := "not" not | compare
 *   compare  := add {("in" | "not in" | < > <= >= == !=) add}
 *   add      := mul {(+ - ~) mul};  mul := pow {(* / // %) pow};  pow := test {** test}
 *   test     := filter {"is" ["not"] name};  filter := sign {"|" name [(args)]}
 *   sign     := (- | +) sign | primary {.name | .int | [index or slice] | (args)}
 *
 * Statements: if/elif/else, for (tuple targets, `if` filter, else), set (name, tuple,
 * namespace member, block), macro (defaults), break, continue. call blocks, filter blocks,
 * argument unpacking (*, **) and macros reading varargs/kwargs are refused (PH_ERR_TEMPLATE with
 * the line), as is nesting deeper than JINJA_MAX_NESTING.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

typedef struct parser {
  const jtok *t;
  size_t n, cur;
  arena *a;
  const char *origin;
  diag *d;
  int depth;
  int in_macro;
} parser;

typedef struct nvec {
  jnode **p;
  size_t n, cap;
} nvec;

static int perr(parser *P, const char *fmt, const char *arg) {
  int line = P->n ? P->t[P->cur < P->n ? P->cur : P->n - 1].line : 1;
  char what[256];
  snprintf(what, sizeof what, fmt, arg ? arg : "");
  diag_set(P->d, PH_ERR_TEMPLATE, "%s:%d: %s", P->origin, line, what);
  return -1;
}

static int poom(parser *P) {
  diag_set(P->d, PH_ERR_NO_MEMORY, "%s: out of memory parsing the template", P->origin);
  return -1;
}

static jnode *node(parser *P, jnode_kind k) {
  jnode *x = arena_alloc(P->a, sizeof *x);
  if (!x) {
    poom(P);
    return NULL;
  }
  x->kind = k;
  x->line = P->n ? P->t[P->cur < P->n ? P->cur : P->n - 1].line : 1;
  return x;
}

static int vpush(parser *P, nvec *v, jnode *x) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 8;
    jnode **p = arena_alloc(P->a, cap * sizeof *p);
    if (!p) return poom(P);
    if (v->n) memcpy(p, v->p, v->n * sizeof *p);
    v->p = p;
    v->cap = cap;
  }
  v->p[v->n++] = x;
  return 0;
}

static int is_kind(const parser *P, jtok_kind k) { return P->cur < P->n && P->t[P->cur].kind == k; }
static int is_ident(const parser *P, const char *name) {
  return is_kind(P, JT_IDENT) && jstr_eq_c(P->t[P->cur].text, name);
}
static int is_ident2(const parser *P, const char *a, const char *b) {
  return P->cur + 1 < P->n && P->t[P->cur].kind == JT_IDENT && jstr_eq_c(P->t[P->cur].text, a) &&
         P->t[P->cur + 1].kind == JT_IDENT && jstr_eq_c(P->t[P->cur + 1].text, b);
}
static int is_stmt(const parser *P, const char *name) {
  return P->cur + 1 < P->n && P->t[P->cur].kind == JT_OPEN_STMT &&
         P->t[P->cur + 1].kind == JT_IDENT && jstr_eq_c(P->t[P->cur + 1].text, name);
}
static int expect(parser *P, jtok_kind k, const char *what) {
  if (!is_kind(P, k)) return perr(P, "expected %s", what);
  P->cur++;
  return 0;
}
static int expect_ident(parser *P, const char *name) {
  if (!is_ident(P, name)) return perr(P, "expected '%s'", name);
  P->cur++;
  return 0;
}

static jnode *parse_expr(parser *P);
static jnode *parse_primary(parser *P);
static jnode *parse_any(parser *P);

static int enter(parser *P) {
  if (++P->depth > JINJA_MAX_NESTING) {
    char msg[96];
    snprintf(msg, sizeof msg, "nesting deeper than %d (blocks and expressions)", JINJA_MAX_NESTING);
    return perr(P, "%s", msg);
  }
  return 0;
}

/* Parses statements until one of the names (a NULL-terminated list) opens a statement. */
static int parse_body(parser *P, nvec *body, const char *const *stops, const char *opener) {
  for (;;) {
    if (P->cur >= P->n) return perr(P, "unexpected end of template: '%s' is not closed", opener);
    for (const char *const *s = stops; *s; s++)
      if (is_stmt(P, *s)) return 0;
    jnode *x = parse_any(P);
    if (!x || vpush(P, body, x)) return -1;
  }
}

static jnode *parse_seq(parser *P, int primary) {
  jnode *first = primary ? parse_primary(P) : parse_expr(P);
  if (!first) return NULL;
  if (!is_kind(P, JT_COMMA)) return first;
  nvec v = {0};
  if (vpush(P, &v, first)) return NULL;
  while (is_kind(P, JT_COMMA)) {
    P->cur++;
    jnode *x = primary ? parse_primary(P) : parse_expr(P);
    if (!x || vpush(P, &v, x)) return NULL;
  }
  jnode *t = node(P, JN_TUPLE);
  if (!t) return NULL;
  t->line = first->line;
  t->kids = v.p;
  t->n_kids = v.n;
  return t;
}

/* (args) for a call ("call") or a macro's parameter list ("parameters"). */
static int parse_args(parser *P, int params, nvec *args) {
  if (expect(P, JT_LPAREN, "'('")) return -1;
  int saw_kw = 0;
  while (!is_kind(P, JT_RPAREN)) {
    if (P->cur >= P->n) return perr(P, "unexpected end of template in an argument list%s", "");
    if (is_kind(P, JT_POW) || (is_kind(P, JT_MUL) && jstr_eq_c(P->t[P->cur].text, "*")))
      return perr(P, "unsupported: argument unpacking (* or **)%s", "");
    jnode *arg = parse_expr(P);
    if (!arg) return -1;
    if (is_kind(P, JT_EQUALS)) {
      P->cur++;
      if (arg->kind != JN_IDENT)
        return perr(P, "expected an identifier before '=' in %s",
                    params ? "a parameter list" : "keyword argument");
      jnode *val = parse_expr(P);
      if (!val) return -1;
      jnode *kw = node(P, JN_KWARG);
      if (!kw) return -1;
      kw->line = arg->line;
      kw->s = arg->s;
      kw->a = val;
      arg = kw;
    }
    if (params) {
      if (arg->kind != JN_IDENT && arg->kind != JN_KWARG)
        return perr(P, "expected an identifier for a parameter%s", "");
      for (size_t i = 0; i < args->n; i++)
        if (jstr_eq(args->p[i]->s, arg->s)) return perr(P, "duplicate parameter name%s", "");
    }
    if (arg->kind == JN_KWARG)
      saw_kw = 1;
    else if (saw_kw)
      return perr(P, "%s",
                  params ? "non-default argument follows default argument"
                         : "positional arguments must come before keyword arguments");
    if (vpush(P, args, arg)) return -1;
    if (is_kind(P, JT_COMMA)) P->cur++;
  }
  P->cur++;
  return 0;
}

static jnode *parse_member(parser *P, jnode *obj);

static jnode *parse_call(parser *P, jnode *callee) {
  jnode *c = node(P, JN_CALL);
  if (!c) return NULL;
  c->line = callee->line;
  c->a = callee;
  nvec args = {0};
  if (parse_args(P, 0, &args)) return NULL;
  c->kids = args.p;
  c->n_kids = args.n;
  jnode *m = parse_member(P, c);
  if (!m) return NULL;
  if (is_kind(P, JT_LPAREN)) return parse_call(P, m);
  return m;
}

static jnode *parse_member(parser *P, jnode *obj) {
  while (is_kind(P, JT_DOT) || is_kind(P, JT_LBRACKET)) {
    int computed = is_kind(P, JT_LBRACKET);
    P->cur++;
    jnode *m = node(P, JN_MEMBER);
    if (!m) return NULL;
    m->line = obj->line;
    m->a = obj;
    m->op = computed;
    if (computed) {
      jnode *parts[3] = {NULL, NULL, NULL};
      size_t np = 0;
      int is_slice = 0;
      while (!is_kind(P, JT_RBRACKET)) {
        if (P->cur >= P->n) return perr(P, "unexpected end of template in '[...]'%s", ""), NULL;
        if (np >= 3) return perr(P, "expected 0-3 arguments for a slice%s", ""), NULL;
        if (is_kind(P, JT_COLON)) {
          parts[np++] = NULL;
          P->cur++;
          is_slice = 1;
        } else {
          jnode *x = parse_expr(P);
          if (!x) return NULL;
          parts[np++] = x;
          if (is_kind(P, JT_COLON)) {
            P->cur++;
            is_slice = 1;
          }
        }
      }
      if (np == 0) return perr(P, "expected an index or a slice in '[]'%s", ""), NULL;
      P->cur++; /* ] */
      if (is_slice) {
        jnode *s = node(P, JN_SLICE);
        if (!s) return NULL;
        s->a = parts[0];
        s->b = parts[1];
        s->c = parts[2];
        m->b = s;
      } else {
        m->b = parts[0];
      }
    } else {
      jnode *prop = parse_primary(P);
      if (!prop) return NULL;
      if (prop->kind != JN_IDENT && prop->kind != JN_INT)
        return perr(P, "expected an identifier or an integer after '.'%s", ""), NULL;
      m->b = prop;
    }
    obj = m;
  }
  return obj;
}

static jnode *parse_sign(parser *P) {
  if (enter(P)) return NULL;
  jnode *r;
  if ((is_kind(P, JT_UNARY) || is_kind(P, JT_ADD)) &&
      (jstr_eq_c(P->t[P->cur].text, "-") || jstr_eq_c(P->t[P->cur].text, "+"))) {
    jnode *u = node(P, JN_UNARY);
    if (!u) return NULL;
    u->op = P->t[P->cur].text.p[0];
    P->cur++;
    u->a = parse_sign(P);
    r = u->a ? u : NULL;
  } else {
    jnode *x = parse_primary(P);
    r = x ? parse_member(P, x) : NULL;
    if (r && is_kind(P, JT_LPAREN)) r = parse_call(P, r);
  }
  P->depth--;
  return r;
}

static jnode *parse_filter(parser *P) {
  jnode *x = parse_sign(P);
  while (x && is_kind(P, JT_PIPE)) {
    P->cur++;
    jnode *f = node(P, JN_FILTER);
    if (!f) return NULL;
    jnode *name = parse_primary(P);
    if (!name) return NULL;
    if (name->kind != JN_IDENT) return perr(P, "expected a filter name after '|'%s", ""), NULL;
    f->line = name->line;
    f->s = name->s;
    f->a = x;
    if (is_kind(P, JT_LPAREN)) {
      nvec args = {0};
      if (parse_args(P, 0, &args)) return NULL;
      f->kids = args.p;
      f->n_kids = args.n;
      f->op = 1;
      if (is_kind(P, JT_DOT) || is_kind(P, JT_LBRACKET) || is_kind(P, JT_LPAREN))
        return perr(P, "unsupported: a member or call of a filter's result without ()%s", ""), NULL;
    }
    x = f;
  }
  return x;
}

static jnode *parse_test(parser *P) {
  jnode *x = parse_filter(P);
  while (x && is_ident(P, "is")) {
    P->cur++;
    jnode *t = node(P, JN_TEST);
    if (!t) return NULL;
    t->a = x;
    if (is_ident(P, "not")) {
      t->op = 1;
      P->cur++;
    }
    jnode *name = parse_primary(P);
    if (!name) return NULL;
    if (name->kind != JN_IDENT) return perr(P, "expected a test name after 'is'%s", ""), NULL;
    t->s = name->s;
    x = t;
  }
  return x;
}

static jnode *binary(parser *P, int op, jnode *l, jnode *r) {
  if (!r) return NULL;
  jnode *b = node(P, JN_BINARY);
  if (!b) return NULL;
  b->line = l->line;
  b->op = op;
  b->a = l;
  b->b = r;
  return b;
}

static jnode *parse_pow(parser *P) {
  jnode *x = parse_test(P);
  while (x && is_kind(P, JT_POW)) {
    P->cur++;
    x = binary(P, JOP_POW, x, parse_test(P));
  }
  return x;
}

static jnode *parse_mul(parser *P) {
  jnode *x = parse_pow(P);
  while (x && is_kind(P, JT_MUL)) {
    jstr op = P->t[P->cur++].text;
    int o = jstr_eq_c(op, "*")    ? JOP_MUL
            : jstr_eq_c(op, "/")  ? JOP_DIV
            : jstr_eq_c(op, "//") ? JOP_FLOORDIV
                                  : JOP_MOD;
    x = binary(P, o, x, parse_pow(P));
  }
  return x;
}

static jnode *parse_add(parser *P) {
  jnode *x = parse_mul(P);
  while (x && is_kind(P, JT_ADD)) {
    char op = P->t[P->cur++].text.p[0];
    x = binary(P, op == '+' ? JOP_ADD : op == '-' ? JOP_SUB : JOP_CONCAT, x, parse_mul(P));
  }
  return x;
}

static jnode *parse_compare(parser *P) {
  jnode *x = parse_add(P);
  while (x) {
    int op;
    if (is_ident2(P, "not", "in")) {
      op = JOP_NOT_IN;
      P->cur += 2;
    } else if (is_ident(P, "in")) {
      op = JOP_IN;
      P->cur++;
    } else if (is_kind(P, JT_COMPARE)) {
      jstr t = P->t[P->cur++].text;
      op = jstr_eq_c(t, "==")   ? JOP_EQ
           : jstr_eq_c(t, "!=") ? JOP_NE
           : jstr_eq_c(t, "<")  ? JOP_LT
           : jstr_eq_c(t, ">")  ? JOP_GT
           : jstr_eq_c(t, "<=") ? JOP_LE
                                : JOP_GE;
    } else {
      break;
    }
    x = binary(P, op, x, parse_add(P));
  }
  return x;
}

static jnode *parse_not(parser *P) {
  if (is_ident(P, "not")) {
    if (enter(P)) return NULL;
    jnode *u = node(P, JN_UNARY);
    if (!u) return NULL;
    u->op = 'n';
    P->cur++;
    u->a = parse_not(P);
    P->depth--;
    return u->a ? u : NULL;
  }
  return parse_compare(P);
}

static jnode *parse_and(parser *P) {
  jnode *x = parse_not(P);
  while (x && is_ident(P, "and")) {
    P->cur++;
    x = binary(P, JOP_AND, x, parse_not(P));
  }
  return x;
}

static jnode *parse_or(parser *P) {
  jnode *x = parse_and(P);
  while (x && is_ident(P, "or")) {
    P->cur++;
    x = binary(P, JOP_OR, x, parse_and(P));
  }
  return x;
}

static jnode *parse_expr(parser *P) {
  if (enter(P)) return NULL;
  jnode *r = NULL;
  jnode *a = parse_or(P);
  if (a && is_ident(P, "if")) {
    P->cur++;
    jnode *test = parse_or(P);
    if (!test) goto done;
    if (is_ident(P, "else")) {
      P->cur++;
      jnode *f = parse_expr(P);
      if (!f) goto done;
      jnode *t = node(P, JN_TERNARY);
      if (!t) goto done;
      t->line = a->line;
      t->a = test;
      t->b = a;
      t->c = f;
      r = t;
    } else {
      jnode *s = node(P, JN_SELECT);
      if (!s) goto done;
      s->line = a->line;
      s->a = a;
      s->b = test;
      r = s;
    }
  } else {
    r = a;
  }
done:
  P->depth--;
  return r;
}

static jnode *parse_primary(parser *P) {
  if (P->cur >= P->n) return perr(P, "unexpected end of template in an expression%s", ""), NULL;
  const jtok *t = &P->t[P->cur++];
  switch (t->kind) {
  case JT_NUMBER: {
    char buf[64];
    if (t->text.n >= sizeof buf) return perr(P, "number literal too long%s", ""), NULL;
    memcpy(buf, t->text.p, t->text.n);
    buf[t->text.n] = '\0';
    int is_float = memchr(buf, '.', t->text.n) != NULL;
    double v = strtod(buf, NULL);
    jnode *x = node(P, is_float ? JN_FLOAT : JN_INT);
    if (!x) return NULL;
    x->line = t->line;
    if (is_float) {
      x->f = v;
    } else {
      if (!(fabs(v) <= (double)JV_MAX_SAFE_INT))
        return perr(P, "unsupported: integer literal beyond 2^53 (%s)", buf), NULL;
      x->i = (int64_t)v;
    }
    return x;
  }
  case JT_STRING: {
    jnode *x = node(P, JN_STR);
    if (!x) return NULL;
    x->line = t->line;
    x->s = t->text;
    if (is_kind(P, JT_STRING)) {
      size_t total = t->text.n;
      for (size_t k = P->cur; k < P->n && P->t[k].kind == JT_STRING; k++) total += P->t[k].text.n;
      char *buf = arena_alloc(P->a, total + 1);
      if (!buf) return poom(P), NULL;
      memcpy(buf, t->text.p, t->text.n);
      size_t off = t->text.n;
      while (is_kind(P, JT_STRING)) {
        memcpy(buf + off, P->t[P->cur].text.p, P->t[P->cur].text.n);
        off += P->t[P->cur].text.n;
        P->cur++;
      }
      x->s.p = buf;
      x->s.n = off;
    }
    return x;
  }
  case JT_IDENT: {
    if (P->in_macro && (jstr_eq_c(t->text, "varargs") || jstr_eq_c(t->text, "kwargs"))) {
      P->cur--;
      return perr(P, "unsupported: a macro reading varargs or kwargs%s", ""), NULL;
    }
    jnode *x = node(P, JN_IDENT);
    if (!x) return NULL;
    x->line = t->line;
    x->s = t->text;
    return x;
  }
  case JT_LPAREN: {
    if (enter(P)) return NULL;
    jnode *x = parse_seq(P, 0);
    P->depth--;
    if (!x || expect(P, JT_RPAREN, "')'")) return NULL;
    return x;
  }
  case JT_LBRACKET: {
    if (enter(P)) return NULL;
    jnode *x = node(P, JN_LIST);
    if (!x) return NULL;
    x->line = t->line;
    nvec v = {0};
    while (!is_kind(P, JT_RBRACKET)) {
      if (P->cur >= P->n) return perr(P, "unexpected end of template in '[...]'%s", ""), NULL;
      jnode *e = parse_expr(P);
      if (!e || vpush(P, &v, e)) return NULL;
      if (is_kind(P, JT_COMMA)) P->cur++;
    }
    P->cur++;
    P->depth--;
    x->kids = v.p;
    x->n_kids = v.n;
    return x;
  }
  case JT_LBRACE: {
    if (enter(P)) return NULL;
    jnode *x = node(P, JN_DICT);
    if (!x) return NULL;
    x->line = t->line;
    nvec v = {0};
    while (!is_kind(P, JT_RBRACE)) {
      if (P->cur >= P->n) return perr(P, "unexpected end of template in '{...}'%s", ""), NULL;
      jnode *k = parse_expr(P);
      if (!k || expect(P, JT_COLON, "':' in a dict literal")) return NULL;
      jnode *e = parse_expr(P);
      if (!e || vpush(P, &v, k) || vpush(P, &v, e)) return NULL;
      if (is_kind(P, JT_COMMA)) P->cur++;
    }
    P->cur++;
    P->depth--;
    x->kids = v.p;
    x->n_kids = v.n;
    return x;
  }
  default:
    P->cur--;
    return perr(P, "unexpected token in an expression%s", ""), NULL;
  }
}

static jnode *parse_if(parser *P) {
  jnode *x = node(P, JN_IF);
  if (!x) return NULL;
  x->a = parse_expr(P);
  if (!x->a || expect(P, JT_CLOSE_STMT, "'%}' after the if condition")) return NULL;
  static const char *const stops[] = {"elif", "else", "endif", NULL};
  nvec body = {0}, alt = {0};
  if (parse_body(P, &body, stops, "if")) return NULL;
  if (is_stmt(P, "elif")) {
    P->cur += 2;
    if (enter(P)) return NULL;
    jnode *e = parse_if(P);
    P->depth--;
    if (!e || vpush(P, &alt, e)) return NULL;
  } else if (is_stmt(P, "else")) {
    P->cur += 2;
    if (expect(P, JT_CLOSE_STMT, "'%}' after else")) return NULL;
    static const char *const end[] = {"endif", NULL};
    if (parse_body(P, &alt, end, "if")) return NULL;
  }
  x->kids = body.p;
  x->n_kids = body.n;
  x->kids2 = alt.p;
  x->n_kids2 = alt.n;
  return x;
}

static jnode *parse_for(parser *P) {
  jnode *x = node(P, JN_FOR);
  if (!x) return NULL;
  x->a = parse_seq(P, 1);
  if (!x->a) return NULL;
  if (x->a->kind != JN_IDENT && x->a->kind != JN_TUPLE)
    return perr(P, "expected a name or names for the loop variable%s", ""), NULL;
  for (size_t i = 0; x->a->kind == JN_TUPLE && i < x->a->n_kids; i++)
    if (x->a->kids[i]->kind != JN_IDENT)
      return perr(P, "unsupported: a loop target that is not a name%s", ""), NULL;
  if (expect_ident(P, "in")) return NULL;
  jnode *it = parse_expr(P);
  if (!it) return NULL;
  if (it->kind == JN_SELECT) {
    x->b = it->a;
    x->c = it->b;
  } else {
    x->b = it;
  }
  if (expect(P, JT_CLOSE_STMT, "'%}' after the for header")) return NULL;
  static const char *const stops[] = {"endfor", "else", NULL};
  nvec body = {0}, alt = {0};
  if (parse_body(P, &body, stops, "for")) return NULL;
  if (is_stmt(P, "else")) {
    P->cur += 2;
    if (expect(P, JT_CLOSE_STMT, "'%}' after else")) return NULL;
    static const char *const end[] = {"endfor", NULL};
    if (parse_body(P, &alt, end, "for")) return NULL;
  }
  x->kids = body.p;
  x->n_kids = body.n;
  x->kids2 = alt.p;
  x->n_kids2 = alt.n;
  return x;
}

static jnode *parse_set(parser *P) {
  jnode *x = node(P, JN_SET);
  if (!x) return NULL;
  x->a = parse_seq(P, 0);
  if (!x->a) return NULL;
  if (x->a->kind == JN_TUPLE) {
    for (size_t i = 0; i < x->a->n_kids; i++)
      if (x->a->kids[i]->kind != JN_IDENT)
        return perr(P, "unsupported: unpacking into something that is not a name%s", ""), NULL;
  } else if (x->a->kind == JN_MEMBER) {
    if (x->a->op || x->a->b->kind != JN_IDENT)
      return perr(P, "unsupported: assigning to an item (only ns.name = ...)%s", ""), NULL;
  } else if (x->a->kind != JN_IDENT) {
    return perr(P, "invalid target for set%s", ""), NULL;
  }
  if (is_kind(P, JT_EQUALS)) {
    P->cur++;
    x->b = parse_seq(P, 0);
    if (!x->b) return NULL;
  } else {
    if (expect(P, JT_CLOSE_STMT, "'=' or '%}' in set")) return NULL;
    static const char *const end[] = {"endset", NULL};
    nvec body = {0};
    if (parse_body(P, &body, end, "set")) return NULL;
    x->kids = body.p;
    x->n_kids = body.n;
    P->cur += 2;
  }
  if (expect(P, JT_CLOSE_STMT, "'%}' closing set")) return NULL;
  return x;
}

static jnode *parse_macro(parser *P) {
  jnode *x = node(P, JN_MACRO);
  if (!x) return NULL;
  jnode *name = parse_primary(P);
  if (!name) return NULL;
  if (name->kind != JN_IDENT) return perr(P, "expected a name after macro%s", ""), NULL;
  x->s = name->s;
  nvec params = {0};
  if (parse_args(P, 1, &params)) return NULL;
  if (expect(P, JT_CLOSE_STMT, "'%}' after the macro's parameters")) return NULL;
  int was = P->in_macro;
  P->in_macro = 1;
  static const char *const end[] = {"endmacro", NULL};
  nvec body = {0};
  if (parse_body(P, &body, end, "macro")) return NULL;
  P->in_macro = was;
  x->kids = body.p;
  x->n_kids = body.n;
  x->kids2 = params.p;
  x->n_kids2 = params.n;
  return x;
}

static jnode *parse_stmt(parser *P) {
  P->cur++; /* {% */
  if (!is_kind(P, JT_IDENT)) return perr(P, "expected a statement name after '{%%'%s", ""), NULL;
  jstr name = P->t[P->cur].text;
  char nm[32];
  snprintf(nm, sizeof nm, "%.*s", (int)(name.n < 24 ? name.n : 24), name.p);
  P->cur++;
  jnode *x = NULL;
  if (jstr_eq_c(name, "set")) {
    return parse_set(P);
  } else if (jstr_eq_c(name, "if")) {
    x = parse_if(P);
    if (!x || expect(P, JT_OPEN_STMT, "'{% endif %}'") || expect_ident(P, "endif") ||
        expect(P, JT_CLOSE_STMT, "'%}'"))
      return NULL;
  } else if (jstr_eq_c(name, "for")) {
    x = parse_for(P);
    if (!x || expect(P, JT_OPEN_STMT, "'{% endfor %}'") || expect_ident(P, "endfor") ||
        expect(P, JT_CLOSE_STMT, "'%}'"))
      return NULL;
  } else if (jstr_eq_c(name, "macro")) {
    x = parse_macro(P);
    if (!x || expect(P, JT_OPEN_STMT, "'{% endmacro %}'") || expect_ident(P, "endmacro") ||
        expect(P, JT_CLOSE_STMT, "'%}'"))
      return NULL;
  } else if (jstr_eq_c(name, "break") || jstr_eq_c(name, "continue")) {
    x = node(P, name.p[0] == 'b' ? JN_BREAK : JN_CONTINUE);
    if (!x || expect(P, JT_CLOSE_STMT, "'%}'")) return NULL;
  } else if (jstr_eq_c(name, "call") || jstr_eq_c(name, "filter")) {
    P->cur--;
    return perr(P, "unsupported statement: %s block", nm), NULL;
  } else {
    P->cur--;
    return perr(P, "unknown statement '%s'", nm), NULL;
  }
  return x;
}

static jnode *parse_any(parser *P) {
  if (enter(P)) return NULL;
  jnode *x = NULL;
  const jtok *t = &P->t[P->cur];
  switch (t->kind) {
  case JT_COMMENT:
    x = node(P, JN_COMMENT);
    P->cur++;
    break;
  case JT_TEXT:
    x = node(P, JN_STR);
    if (x) x->s = t->text;
    P->cur++;
    break;
  case JT_OPEN_STMT:
    x = parse_stmt(P);
    break;
  case JT_OPEN_EXPR:
    P->cur++;
    x = parse_expr(P);
    if (x && expect(P, JT_CLOSE_EXPR, "'}}'")) x = NULL;
    break;
  default:
    perr(P, "unexpected token outside a tag%s", "");
    break;
  }
  P->depth--;
  return x;
}

ph_status jinja_parse_tokens(const jtok *toks, size_t n_toks, const char *origin, arena *a,
                             jnode **root, diag *d) {
  parser P = {toks, n_toks, 0, a, origin, d, 0, 0};
  diag_clear(d);
  jnode *prog = node(&P, JN_PROGRAM);
  if (!prog) return d->status;
  nvec body = {0};
  while (P.cur < P.n) {
    jnode *x = parse_any(&P);
    if (!x || vpush(&P, &body, x)) return d->status != PH_OK ? d->status : PH_ERR_TEMPLATE;
  }
  prog->kids = body.p;
  prog->n_kids = body.n;
  *root = prog;
  return PH_OK;
}
