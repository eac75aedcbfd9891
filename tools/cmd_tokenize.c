/* pagedhybrid tokenize --model DIR [--ids] TEXT | --file F | --decode 1,2,3 | --chat FILE — the
 * model's own tokenizer and chat template from the command line (llama.cpp's llama-tokenize).
 *
 * Output (stdout; docs/cli.md):
 *   TEXT, --file F   one line per token: its id, a tab, and the token's own text as a JSON
 *                    string ("Hello", " world", "<|im_start|>"; a token that is part of a UTF-8
 *                    character shows U+FFFD, as decoding it alone gives); --ids: the ids as one
 *                    JSON array ([9707, 11, 1879]) and a newline
 *   --decode LIST    the text, exactly (no newline added); LIST is 1,2,3 or the JSON array --ids
 *                    prints ([1, 2, 3]); --skip-special leaves special tokens out
 *   --chat FILE      the chat rendered by the model's template, exactly (no newline added);
 *                    --ids: its ids (encoded without adding special tokens: the template writes
 *                    them)
 * Text is encoded with add_special 1 (a BOS when tokenizer_config.json's add_bos_token says so,
 * what generate --prompt does); --no-add-special encodes with 0. Special tokens written in the
 * text are recognised either way.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pagedhybrid.h"
#include "text_input.h"
#include "tools_api.h"

static const cli_option OPTIONS[] = {
    {"model", "DIR", "checkpoint or package directory holding tokenizer.json"},
    {"file", "F", "tokenize the bytes of file F instead of TEXT"},
    {"ids", NULL, "print only the ids, as one JSON array"},
    {"no-add-special", NULL,
     "encode without what the tokenizer adds (the BOS of add_bos_token); special tokens written "
     "in the text are still recognised"},
    {"decode", "LIST",
     "print the text of these ids (1,2,3, or the JSON array --ids prints), exactly"},
    {"skip-special", NULL, "--decode: leave special tokens out"},
    {"chat", "FILE",
     "print the chat of FILE (a messages array, or {\"messages\": [...], template variables}) "
     "rendered by the model's template; with --ids its ids"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static void print_ids(const int64_t *ids, int64_t n) {
  printf("[");
  for (int64_t i = 0; i < n; i++) printf("%s%lld", i ? ", " : "", (long long)ids[i]);
  printf("]\n");
}

/* s[n] as a JSON string: quotes, backslashes and control bytes escaped; other bytes as they are
 * (the decoder hands out UTF-8). */
static void print_json_string(const char *s, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) {
    const unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c == '\n')
      printf("\\n");
    else if (c == '\t')
      printf("\\t");
    else if (c == '\r')
      printf("\\r");
    else if (c < 0x20 || c == 0x7f)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

/* One line per token: id, tab, the token decoded alone. */
static ph_status print_pieces(const ph_tokenizer *tok, const int64_t *ids, int64_t n, diag *d) {
  for (int64_t i = 0; i < n; i++) {
    char *t = NULL;
    size_t len = 0;
    const ph_status s = ph_tokenizer_decode(tok, &ids[i], 1, 0, &t, &len);
    if (s != PH_OK) {
      ph_free(t);
      return diag_set(d, s, "decoding token %lld: %s", (long long)ids[i], ph_status_message(s));
    }
    printf("%lld\t", (long long)ids[i]);
    print_json_string(t, len);
    putchar('\n');
    ph_free(t);
  }
  return PH_OK;
}

/* The text of the ids. Ids beyond the tokenizer's vocabulary give no text (the library drops
 * them, as Hugging Face's decode does: a model's vocabulary may be padded beyond the
 * tokenizer's); a note on stderr says so, since a person typing ids may have mistyped one. */
static ph_status decode(const ph_tokenizer *tok, const int64_t *ids, int64_t n, int skip, diag *d) {
  char *t = NULL;
  size_t len = 0;
  const ph_status s = ph_tokenizer_decode(tok, ids, n, skip, &t, &len);
  if (s != PH_OK) {
    ph_free(t);
    return diag_set(d, s, "--decode: %s", ph_status_message(s));
  }
  fwrite(t, 1, len, stdout);
  ph_free(t);
  ph_tokenizer_info info;
  if (ph_tokenizer_get_info(tok, &info) == PH_OK) {
    int64_t beyond = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
      if (ids[i] >= info.vocab_size && beyond++ == 0) first = ids[i];
    if (beyond)
      fprintf(stderr,
              "tokenize: note: %lld id%s at or beyond the tokenizer's vocabulary size %lld (the "
              "first: %lld) give no text, as in Hugging Face's decode\n",
              (long long)beyond, beyond > 1 ? "s" : "", (long long)info.vocab_size,
              (long long)first);
  }
  return PH_OK;
}

/* --decode "[1, 2, 3]": the JSON array --ids prints, so that `tokenize --decode "$(tokenize --ids
 * TEXT)"` gives TEXT back. Non-negative integers only (a usage error otherwise, as for 1,2,3). */
static int parse_id_array(const cli_args *a, const char *s, int64_t **out, int64_t *n) {
  json_error_t e;
  json_t *arr = json_loads(s, 0, &e);
  size_t i = 0;
  json_t *v = NULL;
  int ok = json_is_array(arr);
  json_array_foreach(arr, i, v) ok = ok && json_is_integer(v) && json_integer_value(v) >= 0;
  if (!ok) {
    json_decref(arr);
    return cli_usage_error(a,
                           "--decode expects non-negative integers separated by commas, or a "
                           "JSON array of them as --ids prints, got \"%s\"",
                           s);
  }
  const size_t count = json_array_size(arr);
  int64_t *t = malloc((count ? count : 1) * sizeof *t);
  if (!t) {
    json_decref(arr);
    return cli_lib_error(PH_ERR_NO_MEMORY, "out of memory");
  }
  json_array_foreach(arr, i, v) t[i] = json_integer_value(v);
  json_decref(arr);
  *out = t;
  *n = (int64_t)count;
  return CLI_EXIT_OK;
}

int cmd_tokenize(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "tokenize", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "--model DIR [--ids] [--no-add-special] TEXT | --file F | --decode LIST | --chat FILE",
        "The model's own tokenizer (tokenizer.json) and chat template. TEXT or --file F:\n"
        "one line per token, its id, a tab and its text as a JSON string (--ids: the ids as\n"
        "one JSON array). --decode 1,2,3 (or [1, 2, 3], as --ids prints): the text of the\n"
        "ids. --chat FILE: the chat rendered by the template (--ids: its ids). Text and\n"
        "rendered chats are printed exactly, with no newline added.");
    return CLI_EXIT_OK;
  }
  const char *dir = cli_get(&a, "model"), *file = cli_get(&a, "file");
  const char *dec = cli_get(&a, "decode"), *chat = cli_get(&a, "chat");
  if (!dir) return cli_usage_error(&a, "--model DIR is required");
  if (a.n_positional > 1)
    return cli_usage_error(&a, "one TEXT argument (quote it), got %d", a.n_positional);
  const int n_inputs = (a.n_positional == 1) + (file != NULL) + (dec != NULL) + (chat != NULL);
  if (n_inputs != 1)
    return cli_usage_error(&a, n_inputs ? "give one of TEXT, --file, --decode, --chat"
                                        : "nothing to do: give TEXT, --file F, --decode LIST or "
                                          "--chat FILE");
  if (cli_flag(&a, "skip-special") && !dec)
    return cli_usage_error(&a, "--skip-special applies to --decode");
  if (dec && (cli_flag(&a, "ids") || cli_flag(&a, "no-add-special")))
    return cli_usage_error(&a, "--decode prints text: --ids and --no-add-special do not apply");
  if (chat && cli_flag(&a, "no-add-special"))
    return cli_usage_error(&a, "--chat encodes without adding special tokens already (the "
                               "template writes them)");
  int64_t *ids = NULL, n = 0;
  if (dec && (rc = dec[0] == '[' ? parse_id_array(&a, dec, &ids, &n)
                                 : cli_parse_ids(&a, "decode", dec, &ids, &n)))
    return rc;

  diag d;
  diag_clear(&d);
  ph_tokenizer *tok = NULL;
  char *text = NULL, *messages = NULL, *extra = NULL;
  size_t len = 0;
  const char *what = dec ? "--decode" : chat ? "--chat" : "tokenize";
  ph_status s = text_open_tokenizer(dir, what, NULL, &tok, &d);
  if (s == PH_OK && dec) {
    s = decode(tok, ids, n, cli_flag(&a, "skip-special"), &d);
  } else if (s == PH_OK && chat) {
    int add_gen = 1;
    s = text_read_chat_file(chat, &messages, &extra, &add_gen, &d);
    if (s == PH_OK) s = text_render_chat(tok, messages, extra, add_gen, &text, &len, &d);
    if (s == PH_OK && cli_flag(&a, "ids")) {
      s = text_encode(tok, text, len, 0, &ids, &n, &d);
      if (s == PH_OK) print_ids(ids, n);
    } else if (s == PH_OK) {
      fwrite(text, 1, len, stdout);
    }
  } else if (s == PH_OK) {
    const int add_special = !cli_flag(&a, "no-add-special");
    if (file) {
      s = file_read_all(file, (size_t)1 << 30, &text, &len, &d);
    } else {
      len = strlen(a.positional[0]);
      text = malloc(len + 1);
      if (text)
        memcpy(text, a.positional[0], len + 1);
      else
        s = diag_set(&d, PH_ERR_NO_MEMORY, "out of memory");
    }
    if (s == PH_OK) s = text_encode(tok, text, len, add_special, &ids, &n, &d);
    if (s == PH_OK && cli_flag(&a, "ids"))
      print_ids(ids, n);
    else if (s == PH_OK)
      s = print_pieces(tok, ids, n, &d);
  }
  rc = s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
  free(ids);
  free(text);
  free(messages);
  free(extra);
  ph_tokenizer_free(tok);
  return rc;
}
