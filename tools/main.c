/* pagedhybrid — the command-line tool. Dispatches to one function per command (cmd_*.c), then
 * closes stdout with every write checked (cli_finish_stdout): output that did not reach its
 * file is exit 1, whatever the command. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} command;

static const command COMMANDS[] = {
    {"inspect", cmd_inspect, "summarise a checkpoint: architecture, geometry, state and memory"},
    {"make-tiny", cmd_make_tiny, "write a deterministic random-weight checkpoint in HF layout"},
    {"generate", cmd_generate,
     "generation from text (--prompt, --chat) or token ids (--tokens), printed as it comes"},
    {"tokenize", cmd_tokenize, "the model's tokenizer: text to ids, --decode ids, --chat render"},
    {"export", cmd_export, "write an ONNX Runtime GenAI package (model.onnx + data + config)"},
    {"run", cmd_run, "offline batch inference of a requests JSONL file through the engine"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)"},
    {"bench", cmd_bench, "prefill/decode throughput and TTFT next to this machine's limits"},
    {"demo", cmd_demo, "the main job on an embedded default model (make demo runs this)"},
};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
  fprintf(f, "usage: pagedhybrid COMMAND [options]   (pagedhybrid COMMAND --help)\n\ncommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
  fprintf(f, "\npagedhybrid %s\n", ph_version_string());
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
    usage(stdout);
    return cli_finish_stdout(CLI_EXIT_OK);
  }
  if (strcmp(name, "--version") == 0) {
    printf("pagedhybrid %s\n", ph_version_string());
    return cli_finish_stdout(CLI_EXIT_OK);
  }
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(COMMANDS[i].name, name) == 0)
      return cli_finish_stdout(COMMANDS[i].run(argc - 2, argv + 2));
  const char *names[N_COMMANDS];
  for (size_t i = 0; i < N_COMMANDS; i++) names[i] = COMMANDS[i].name;
  const char *close = cli_closest(name, strlen(name), names, (int)N_COMMANDS);
  if (close)
    fprintf(stderr, "pagedhybrid: unknown command \"%s\"; did you mean %s?\n", name, close);
  else
    fprintf(stderr, "pagedhybrid: unknown command \"%s\"\n", name);
  usage(stderr);
  return CLI_EXIT_USAGE;
}
