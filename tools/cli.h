/* cli — the pagedhybrid command line: a table-driven option parser shared by every command,
 * the exit-code policy, and the command entry points.
 *
 * Exit codes: 0 success; 1 a library error (prints "error: PH_ERR_NAME: detail"), including a
 * failed write to stdout; 2 a usage error (unknown flag, missing or bad value; prints what was
 * wrong and how to get help). A value that is wrong on its own (not a number, out of range, a
 * page size that is not a power of two, an option the command or layout does not take) is a
 * usage error, found here before the library sees it; what can only be judged against the
 * model or a file (a context beyond the checkpoint's, a missing tensor) is the library's.
 * Every command accepts --help. Options are "--name value" or "--name=value"; flags take no
 * value; "-o DIR" is the one short option, an alias of --out where a command has --out.
 * Positional arguments are collected in order. An unknown option names the closest one.
 * Numbers are strict: digits with an optional sign, nothing around them (" 5", "5 ", "1e3" for
 * an integer, "0x10" are refused).
 */
#ifndef PH_TOOLS_CLI_H
#define PH_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "pagedhybrid.h"

#define CLI_EXIT_OK    0
#define CLI_EXIT_ERROR 1
#define CLI_EXIT_USAGE 2

typedef struct cli_option {
  const char *name; /* without the leading "--" */
  const char *arg;  /* value placeholder for help ("N"), NULL for a flag */
  const char *help;
} cli_option;
/* An option whose placeholder ends in "..." ("LIST...") may be given several times
 * (cli_get_all); any other option given twice is a usage error. An option whose placeholder is
 * in brackets ("[FILE]") may be given without its value: then the next argument is its value
 * only when it does not start with '-', and cli_get returns "" when none was given. */

#define CLI_MAX_OPTIONS    64
#define CLI_MAX_POSITIONAL 8
#define CLI_MAX_REPEATS    64 /* values of repeatable options, all together */

typedef struct cli_args {
  const char *command;
  const cli_option *options;
  int n_options;
  const char *values[CLI_MAX_OPTIONS]; /* value given for option i (flags: "1"), or NULL */
  const char *positional[CLI_MAX_POSITIONAL];
  int n_positional;
  const char *repeats[CLI_MAX_REPEATS]; /* every value of a repeatable option, in order */
  int repeat_option[CLI_MAX_REPEATS];   /* its option index */
  int n_repeats;
  int help;
} cli_args;

/* Parses argv (after the command name). Returns CLI_EXIT_OK or CLI_EXIT_USAGE (message
 * printed; an unknown option says "did you mean --x?" when one of the table is close). */
int cli_parse(cli_args *a, const char *command, const cli_option *options, int n_options, int argc,
              char **argv);

void cli_print_help(const cli_args *a, const char *usage, const char *description);

/* Lookups; name must be in the table. Value parsers print a usage error and return
 * CLI_EXIT_USAGE on bad input, leaving *out untouched when the option is absent. */
const char *cli_get(const cli_args *a, const char *name); /* the last value given */
/* Every value of a repeatable option, in command-line order, into out[max]; returns the count. */
int cli_get_all(const cli_args *a, const char *name, const char **out, int max);
int cli_flag(const cli_args *a, const char *name);
int cli_get_int(const cli_args *a, const char *name, int64_t min, int64_t max, int64_t *out);
int cli_get_u64(const cli_args *a, const char *name, uint64_t *out);
int cli_get_double(const cli_args *a, const char *name, double min, double max, double *out);
int cli_get_dtype(const cli_args *a, const char *name, ph_dtype *out);
/* Comma-separated integers, exactly n of them. */
int cli_get_int_list(const cli_args *a, const char *name, int n, int64_t *out);

/* s as comma-separated non-negative integers (token ids) into *out (malloc'ed, *n of them; free()).
 * A malformed list is a usage error naming the option (--name); out of memory, a library error. */
int cli_parse_ids(const cli_args *a, const char *name, const char *s, int64_t **out, int64_t *n);

/* Prints a usage error for this command; returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_args *a, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prints "error: PH_ERR_NAME: detail" (detail may be NULL or ""); returns CLI_EXIT_ERROR. */
int cli_lib_error(ph_status s, const char *detail);

/* Strict integer at s: [+-]?[0-9]+ (no leading space, no exponent), within int64. Returns 1 with
 * *out and *end (the first character after the digits), 0 when s does not start with one. */
int cli_parse_i64(const char *s, const char **end, int64_t *out);

/* The candidate closest to word[0, len) by edit distance (insertions, deletions, substitutions,
 * adjacent swaps), or a candidate word is the only prefix of; NULL when none is close enough to
 * be a likely typo. */
const char *cli_closest(const char *word, size_t len, const char *const *candidates, int n);

/* ---- stdout: every write checked ----
 * Output goes through stdio's buffer, so a write error (a full disk, a closed pipe) can surface
 * at any later printf, at fflush or at fclose; the stream's error flag keeps it. These check it
 * and print "error: PH_ERR_IO: writing stdout failed: <reason>" once. */
/* Flushes stdout; CLI_EXIT_OK, or CLI_EXIT_ERROR (reported) when any write so far failed. For a
 * command that must report a stdout failure before something else (say, a later error). */
int cli_flush_stdout(void);
/* The end of every command (main calls it): flushes and closes stdout, checking both. Returns
 * rc, or CLI_EXIT_ERROR when rc was CLI_EXIT_OK and stdout failed. A second call returns rc. */
int cli_finish_stdout(int rc);

/* ---- model paths ---- */
/* Refuses a model path we cannot read for a reason the library would hide behind "config.json
 * not found": a .gguf file, or a directory of .gguf files without config.json or model.onnx.
 * Prints "error: PH_ERR_UNSUPPORTED: ... GGUF is not read ..." naming what is read and returns
 * CLI_EXIT_ERROR; CLI_EXIT_OK for anything else (the library judges it). */
int cli_check_model_path(const char *path);

/* ---- sizes: one style everywhere ----
 * Binary units with one decimal: "512 B", "47.2 KiB", "2.6 MiB", "1.5 GiB", "1.2 TiB". Every
 * size a command prints for people goes through this (JSON keeps exact byte counts). */
#define CLI_BYTES_BUF 32
const char *cli_bytes(uint64_t bytes, char *buf, size_t n);

int cmd_inspect(int argc, char **argv);
int cmd_make_tiny(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif /* PH_TOOLS_CLI_H */
