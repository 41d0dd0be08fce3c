/* strata: the command-line entry point. Dispatches to the commands and prints
 * the top-level help. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#include "cli.h"
#include "ps.h"

static void usage(FILE *f) {
  fprintf(f,
          "strata %s - train neural networks in C, on one device or many\n"
          "\n"
          "usage: strata COMMAND [options]\n"
          "\n"
          "commands:\n"
          "  train      train a model (built-in mlp, cnn, resnet20, mobilenet-tiny, or a Keras JSON) on Fashion-MNIST or IDX files\n"
          "  evaluate   evaluate saved weights on the test set\n"
          "  summary    print a model's layers, output shapes and parameter counts\n"
          "  plot       draw loss and accuracy curves of a --report JSON as an SVG\n"
          "  convert    write IDX or CSV data as TFRecord shards (tf.train.Example)\n"
          "  tokenize   write text files as token shards (llm.c's .bin), byte-level or GPT-2 BPE\n"
          "  generate   continue a prompt with a GPT trained by train --model gpt (its --save-llmc file)\n"
          "  server     run a worker or ps task of a parameter-server job (TF_CONFIG)\n"
          "  launch     start a parameter-server cluster on this machine: launch -- train ...\n"
          "  keygen     write CURVE keys for a parameter-server cluster\n"
          "\n"
          "Run 'strata COMMAND --help' for the options of a command.\n"
          "Exit codes: 0 success, 2 bad input or usage (nothing written),\n"
          "4 an output file could not be written, 1 other failure.\n",
          STRATA_VERSION);
}

/* The command's results on stdout must have reached it: a write error
 * (a full disk, /dev/full, a closed pipe) turns a success into exit 4. */
static int finish_stdout(int rc) {
  errno = 0;
  bool bad = fflush(stdout) != 0 || ferror(stdout);
  int err = errno;
  if (fclose(stdout) != 0 && !bad) bad = true, err = errno;
  if (!bad) return rc;
  fprintf(stderr, "strata: cannot write the results to stdout: %s\n",
          err ? strerror(err) : "write error");
  return rc == EXIT_OK ? EXIT_WRITE : rc;
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout);
    return EXIT_OK;
  }
  if (!strcmp(cmd, "--version")) {
    printf("strata %s\n", STRATA_VERSION);
    return EXIT_OK;
  }
  if (!strcmp(cmd, "train")) return cmd_train(argc, argv);
  if (!strcmp(cmd, "evaluate")) return cmd_evaluate(argc, argv);
  if (!strcmp(cmd, "summary")) return cmd_summary(argc, argv);
  if (!strcmp(cmd, "plot")) return cmd_plot(argc, argv);
  if (!strcmp(cmd, "convert")) return cmd_convert(argc, argv);
  if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc, argv);
  if (!strcmp(cmd, "generate")) return cmd_generate(argc, argv);
  if (!strcmp(cmd, "server")) return cmd_server(argc, argv);
  if (!strcmp(cmd, "launch")) return cmd_launch(argc, argv);
  if (!strcmp(cmd, "keygen")) return cmd_keygen(argc, argv);
  fprintf(stderr, "strata: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return EXIT_USAGE;
}

int main(int argc, char **argv) {
  /* Past a file-size limit (ulimit -f) a write fails with EFBIG, reported as
   * exit 4 with the temp file removed, instead of SIGXFSZ killing us. */
  signal(SIGXFSZ, SIG_IGN);
  /* strata launch runs its tasks as /proc/self/exe, whose name ps/top would
   * show as "exe" (issue 29 D15) */
  char comm[16] = "";
  if (prctl(PR_GET_NAME, comm) == 0 && !strcmp(comm, "exe")) prctl(PR_SET_NAME, "strata");
  ps_test_hooks_from_env();
  return finish_stdout(dispatch(argc, argv));
}
