/* cli — option parsing and error reporting shared by the commands. See cli.h. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/dtype.h"

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
    if (arg[1] != '-') return cli_usage_error(a, "unknown option \"%s\"", arg);
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    int k = find_option(a, name, len);
    if (k < 0) return cli_usage_error(a, "unknown option \"--%.*s\"", (int)len, name);
    const cli_option *o = &a->options[k];
    if (!o->arg) {
      if (eq) return cli_usage_error(a, "option --%s takes no value", o->name);
      a->values[k] = "1";
      continue;
    }
    const size_t arg_len = strlen(o->arg);
    const int repeatable = arg_len > 3 && strcmp(o->arg + arg_len - 3, "...") == 0;
    if (a->values[k] && !repeatable) return cli_usage_error(a, "option --%s given twice", o->name);
    if (eq) {
      a->values[k] = eq + 1;
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

int cli_get_int(const cli_args *a, const char *name, int64_t min, int64_t max, int64_t *out) {
  const char *v = cli_get(a, name);
  if (!v) return CLI_EXIT_OK;
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end != '\0')
    return cli_usage_error(a, "--%s expects an integer, got \"%s\"", name, v);
  if (x < min || x > max)
    return cli_usage_error(a, "--%s must be in [%" PRId64 ", %" PRId64 "], got %lld", name, min,
                           max, x);
  *out = x;
  return CLI_EXIT_OK;
}

int cli_get_u64(const cli_args *a, const char *name, uint64_t *out) {
  const char *v = cli_get(a, name);
  if (!v) return CLI_EXIT_OK;
  char *end = NULL;
  errno = 0;
  if (v[0] == '-')
    return cli_usage_error(a, "--%s expects a non-negative integer, got \"%s\"", name, v);
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end != '\0')
    return cli_usage_error(a, "--%s expects a non-negative integer, got \"%s\"", name, v);
  *out = x;
  return CLI_EXIT_OK;
}

int cli_get_double(const cli_args *a, const char *name, double min, double max, double *out) {
  const char *v = cli_get(a, name);
  if (!v) return CLI_EXIT_OK;
  char *end = NULL;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end != '\0' || x != x)
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
    char *end = NULL;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (errno || end == p) break;
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
