/* cli — option parsing and error reporting shared by the commands. See cli.h. */
#include "cli.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools_api.h"

static int find_option(const cli_args *a, const char *name, size_t len) {
  for (int i = 0; i < a->n_options; i++)
    if (strlen(a->options[i].name) == len && strncmp(a->options[i].name, name, len) == 0) return i;
  return -1;
}

int cli_usage_error(const cli_args *a, const char *fmt, ...) {
  fprintf(stderr, "pagedhybrid %s: ", a->command);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nrun 'pagedhybrid %s --help' for usage\n", a->command);
  return CLI_EXIT_USAGE;
}

int cli_lib_error(ph_status s, const char *detail) {
  if (detail && *detail)
    fprintf(stderr, "error: %s: %s\n", ph_status_name(s), detail);
  else
    fprintf(stderr, "error: %s: %s\n", ph_status_name(s), ph_status_message(s));
  return CLI_EXIT_ERROR;
}

/* "unknown option" with the closest name of the table (--help included) when one is close. */
static int unknown_option(const cli_args *a, const char *arg, const char *name, size_t len) {
  const char *names[CLI_MAX_OPTIONS + 1];
  for (int i = 0; i < a->n_options; i++) names[i] = a->options[i].name;
  names[a->n_options] = "help";
  const char *best = cli_closest(name, len, names, a->n_options + 1);
  const size_t shown = (size_t)(name - arg) + len;
  if (best)
    return cli_usage_error(a, "unknown option \"%.*s\"; did you mean --%s?", (int)shown, arg, best);
  return cli_usage_error(a, "unknown option \"%.*s\"", (int)shown, arg);
}

int cli_parse(cli_args *a, const char *command, const cli_option *options, int n_options, int argc,
              char **argv) {
  memset(a, 0, sizeof *a);
  a->command = command;
  a->options = options;
  a->n_options = n_options < CLI_MAX_OPTIONS ? n_options : CLI_MAX_OPTIONS;
  int only_positional = 0;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (only_positional || arg[0] != '-' || arg[1] == '\0') {
      if (a->n_positional == CLI_MAX_POSITIONAL)
        return cli_usage_error(a, "too many arguments (\"%s\")", arg);
      a->positional[a->n_positional++] = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      only_positional = 1;
      continue;
    }
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      a->help = 1;
      continue;
    }
    /* the one short option: "-o DIR" means --out for every command that has --out */
    if (strcmp(arg, "-o") == 0 && find_option(a, "out", 3) >= 0) arg = "--out";
    const char *name = arg + (arg[1] == '-' ? 2 : 1);
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    int k = arg[1] == '-' ? find_option(a, name, len) : -1;
    if (k < 0) return unknown_option(a, arg, name, len);
    const cli_option *o = &a->options[k];
    if (!o->arg) {
      if (eq) return cli_usage_error(a, "option --%s takes no value", o->name);
      a->values[k] = "1";
      continue;
    }
    const size_t arg_len = strlen(o->arg);
    const int repeatable = arg_len > 3 && strcmp(o->arg + arg_len - 3, "...") == 0;
    if (a->values[k] && !repeatable) return cli_usage_error(a, "option --%s given twice", o->name);
    /* "[FILE]": the value is optional; it is the next argument unless that is an option */
    const int optional = o->arg[0] == '[';
    if (eq) {
      a->values[k] = eq + 1;
    } else if (optional && (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] != '\0'))) {
      a->values[k] = "";
    } else {
      if (i + 1 >= argc)
        return cli_usage_error(a, "option --%s needs a value (%s)", o->name, o->arg);
      a->values[k] = argv[++i];
    }
    if (repeatable) {
      if (a->n_repeats == CLI_MAX_REPEATS)
        return cli_usage_error(a, "too many repeated options (at most %d)", CLI_MAX_REPEATS);
      a->repeat_option[a->n_repeats] = k;
      a->repeats[a->n_repeats++] = a->values[k];
    }
  }
  return CLI_EXIT_OK;
}

int cli_get_all(const cli_args *a, const char *name, const char **out, int max) {
  int k = find_option(a, name, strlen(name)), n = 0;
  for (int i = 0; k >= 0 && i < a->n_repeats; i++)
    if (a->repeat_option[i] == k && n < max) out[n++] = a->repeats[i];
  if (k >= 0 && n == 0 && a->values[k] && max > 0) out[n++] = a->values[k];
  return n;
}

void cli_print_help(const cli_args *a, const char *usage, const char *description) {
  printf("usage: pagedhybrid %s %s\n\n%s\n", a->command, usage, description);
  if (a->n_options) printf("\noptions:\n");
  for (int i = 0; i < a->n_options; i++) {
    char left[64];
    const cli_option *o = &a->options[i];
    snprintf(left, sizeof left, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    printf("  %-30s %s\n", left, o->help);
  }
  printf("  %-30s %s\n", "--help", "show this help");
}

static int index_of(const cli_args *a, const char *name) {
  int k = find_option(a, name, strlen(name));
  if (k < 0) {
    fprintf(stderr, "internal error: option --%s not in the table of %s\n", name, a->command);
    abort(); /* a programming error in the CLI itself, never input-driven */
  }
  return k;
}

const char *cli_get(const cli_args *a, const char *name) { return a->values[index_of(a, name)]; }

int cli_flag(const cli_args *a, const char *name) { return cli_get(a, name) != NULL; }

int cli_parse_i64(const char *s, const char **end, int64_t *out) {
  const char *p = s;
  if (*p == '+' || *p == '-') p++;
  if (!isdigit((unsigned char)*p)) return 0; /* strtoll would skip spaces first */
  char *e = NULL;
  errno = 0;
  long long x = strtoll(s, &e, 10);
  if (errno) return 0;
  *out = x;
  *end = e;
  return 1;
}

int cli_get_int(const cli_args *a, const char *name, int64_t min, int64_t max, int64_t *out) {
  const char *v = cli_get(a, name);
  if (!v) return CLI_EXIT_OK;
  const char *end = NULL;
  int64_t x = 0;
  if (!cli_parse_i64(v, &end, &x) || *end != '\0')
    return cli_usage_error(a, "--%s expects an integer, got \"%s\"", name, v);
  if (x < min || x > max)
    return cli_usage_error(a, "--%s must be in [%" PRId64 ", %" PRId64 "], got %" PRId64, name, min,
                           max, x);
  *out = x;
  return CLI_EXIT_OK;
}

int cli_get_u64(const cli_args *a, const char *name, uint64_t *out) {
  const char *v = cli_get(a, name);
  if (!v) return CLI_EXIT_OK;
  char *end = NULL;
  errno = 0;
  /* strtoull skips spaces and negates "-1"; only plain digits pass */
  unsigned long long x = isdigit((unsigned char)v[0]) ? strtoull(v, &end, 10) : 0;
  if (!isdigit((unsigned char)v[0]) || errno || *end != '\0')
    return cli_usage_error(a, "--%s expects a non-negative integer, got \"%s\"", name, v);
  *out = x;
  return CLI_EXIT_OK;
}

/* A decimal number as people write it: [+-]?digits[.digits][e[+-]digits]; strtod also takes
 * leading spaces, hex, "inf" and "nan", none of which an option value means. */
static int is_decimal(const char *s) {
  const char *p = s;
  if (*p == '+' || *p == '-') p++;
  int digits = 0;
  while (isdigit((unsigned char)*p)) p++, digits++;
  if (*p == '.')
    for (p++; isdigit((unsigned char)*p); p++) digits++;
  if (!digits) return 0;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
  }
  return *p == '\0';
}

int cli_get_double(const cli_args *a, const char *name, double min, double max, double *out) {
  const char *v = cli_get(a, name);
  if (!v) return CLI_EXIT_OK;
  char *end = NULL;
  errno = 0;
  double x = is_decimal(v) ? strtod(v, &end) : 0.0;
  if (!is_decimal(v) || errno || *end != '\0' || x != x)
    return cli_usage_error(a, "--%s expects a number, got \"%s\"", name, v);
  if (x < min || x > max)
    return cli_usage_error(a, "--%s must be in [%g, %g], got %g", name, min, max, x);
  *out = x;
  return CLI_EXIT_OK;
}

int cli_get_dtype(const cli_args *a, const char *name, ph_dtype *out) {
  const char *v = cli_get(a, name);
  if (!v) return CLI_EXIT_OK;
  ph_dtype dt = dtype_from_name(v);
  if (dt != PH_DTYPE_F32 && dt != PH_DTYPE_F16 && dt != PH_DTYPE_BF16)
    return cli_usage_error(a, "--%s must be f32, f16 or bf16, got \"%s\"", name, v);
  *out = dt;
  return CLI_EXIT_OK;
}

int cli_get_int_list(const cli_args *a, const char *name, int n, int64_t *out) {
  const char *v = cli_get(a, name);
  if (!v) return CLI_EXIT_OK;
  int64_t tmp[16];
  int k = 0;
  const char *p = v;
  while (k < 16) {
    const char *end = NULL;
    int64_t x = 0;
    if (!cli_parse_i64(p, &end, &x)) break;
    tmp[k++] = x;
    if (*end == '\0') {
      p = end;
      break;
    }
    if (*end != ',') {
      p = end;
      break;
    }
    p = end + 1;
  }
  if (*p != '\0' || k != n)
    return cli_usage_error(a, "--%s expects %d comma-separated integers, got \"%s\"", name, n, v);
  memcpy(out, tmp, (size_t)n * sizeof *out);
  return CLI_EXIT_OK;
}

int cli_parse_ids(const cli_args *a, const char *name, const char *s, int64_t **out, int64_t *n) {
  int64_t count = 1;
  for (const char *p = s; *p; p++) count += *p == ',';
  int64_t *t = malloc((size_t)count * sizeof *t);
  if (!t) return cli_lib_error(PH_ERR_NO_MEMORY, "out of memory");
  const char *p = s;
  for (int64_t i = 0; i < count; i++) {
    const char *end = NULL;
    int64_t v = 0;
    if (!cli_parse_i64(p, &end, &v) || (*end != ',' && *end != '\0') || v < 0) {
      free(t);
      return cli_usage_error(
          a, "--%s expects non-negative integers separated by commas, got \"%s\"", name, s);
    }
    t[i] = v;
    p = *end ? end + 1 : end;
  }
  *out = t;
  *n = count;
  return CLI_EXIT_OK;
}

/* ---- closest option ------------------------------------------------------------------------ */

/* Optimal string alignment distance (Levenshtein plus adjacent swaps); names are short. */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb) {
  enum { MAXN = 64 };
  if (na >= MAXN || nb >= MAXN) return (size_t)-1;
  size_t d[MAXN][MAXN];
  for (size_t i = 0; i <= na; i++) d[i][0] = i;
  for (size_t j = 0; j <= nb; j++) d[0][j] = j;
  for (size_t i = 1; i <= na; i++)
    for (size_t j = 1; j <= nb; j++) {
      const size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      size_t best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[na][nb];
}

const char *cli_closest(const char *word, size_t len, const char *const *candidates, int n) {
  const char *best = NULL, *prefix_of = NULL;
  size_t best_d = (size_t)-1;
  int n_prefix = 0;
  for (int i = 0; i < n; i++) {
    const size_t nc = strlen(candidates[i]);
    const size_t dist = edit_distance(word, len, candidates[i], nc);
    if (dist < best_d) {
      best_d = dist;
      best = candidates[i];
    }
    if (len >= 3 && len < nc && strncmp(candidates[i], word, len) == 0) {
      prefix_of = candidates[i];
      n_prefix++;
    }
  }
  /* a typo: at most two edits, and few for the length ("out" is not a typo of "cut") */
  const size_t longer = best && strlen(best) > len ? strlen(best) : len;
  if (best && best_d <= 2 && 3 * best_d <= longer) return best;
  return n_prefix == 1 ? prefix_of : NULL;
}

/* ---- stdout --------------------------------------------------------------------------------- */

static int g_stdout_failed, g_stdout_closed;

static int stdout_failed(int err) {
  if (!g_stdout_failed) {
    char msg[160];
    snprintf(msg, sizeof msg, "writing stdout failed: %s", err ? strerror(err) : "write error");
    cli_lib_error(PH_ERR_IO, msg);
  }
  g_stdout_failed = 1;
  return CLI_EXIT_ERROR;
}

int cli_flush_stdout(void) {
  if (g_stdout_failed) return CLI_EXIT_ERROR;
  if (g_stdout_closed) return CLI_EXIT_OK;
  errno = 0;
  const int bad = fflush(stdout) != 0;
  const int err = errno;
  /* a write that failed earlier leaves the error flag set even when this flush succeeds */
  if (bad || ferror(stdout)) return stdout_failed(err);
  return CLI_EXIT_OK;
}

int cli_finish_stdout(int rc) {
  if (g_stdout_closed) return rc;
  int s = cli_flush_stdout();
  g_stdout_closed = 1;
  errno = 0;
  if (fclose(stdout) != 0 && s == CLI_EXIT_OK) s = stdout_failed(errno);
  return rc != CLI_EXIT_OK ? rc : s;
}

/* ---- model paths ---------------------------------------------------------------------------- */

static int ends_with_gguf(const char *name) {
  const size_t n = strlen(name);
  if (n < 5) return 0;
  for (size_t i = 0; i < 5; i++)
    if (tolower((unsigned char)name[n - 5 + i]) != ".gguf"[i]) return 0;
  return 1;
}

static int dir_has_gguf(const char *path) {
  DIR *dir = opendir(path);
  if (!dir) return 0;
  int found = 0;
  const struct dirent *e;
  while (!found && (e = readdir(dir)) != NULL) found = ends_with_gguf(e->d_name);
  closedir(dir);
  return found;
}

int cli_check_model_path(const char *path) {
  if (!path) return CLI_EXIT_OK;
  char config[4096], onnx[4096];
  diag d;
  int gguf = ends_with_gguf(path) && !path_is_dir(path);
  if (!gguf && path_is_dir(path) &&
      path_join(config, sizeof config, path, "config.json", &d) == PH_OK &&
      path_join(onnx, sizeof onnx, path, "model.onnx", &d) == PH_OK)
    gguf = !path_exists(config) && !path_exists(onnx) && dir_has_gguf(path);
  if (!gguf) return CLI_EXIT_OK;
  char msg[4096 + 256];
  snprintf(msg, sizeof msg,
           "%s: GGUF is not read. Give a Hugging Face checkpoint directory (config.json + "
           "*.safetensors) or a package written by 'pagedhybrid export' (model.onnx)",
           path);
  return cli_lib_error(PH_ERR_UNSUPPORTED, msg);
}

/* ---- sizes ---------------------------------------------------------------------------------- */

const char *cli_bytes(uint64_t bytes, char *buf, size_t n) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(buf, n, "%llu B", (unsigned long long)bytes);
    return buf;
  }
  double v = (double)bytes / 1024.0;
  int u = 0;
  /* 1023.95 KiB would print as "1024.0 KiB": move up before rounding gets there */
  while (v >= 1023.95 && u < 5) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, n, "%.1f %s", v, units[u]);
  return buf;
}
