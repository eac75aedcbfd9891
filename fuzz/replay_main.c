/* Replay driver: runs a libFuzzer target over every file of the corpus directories (or files)
 * given on the command line, once each. Used in builds without libFuzzer so the seed corpora
 * stay regression tests. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  if (!buf) {
    fclose(f);
    return 1;
  }
  size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, got);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int n_files = 0, errors = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      errors += run_file(argv[i]);
      n_files++;
      continue;
    }
    DIR *dir = opendir(argv[i]);
    if (!dir) return 1;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      errors += run_file(path);
      n_files++;
    }
    closedir(dir);
  }
  printf("replayed %d inputs\n", n_files);
  return (errors || n_files == 0) ? 1 : 0;
}
