/* strata train's memory check (cli_check_memory, cli.h): a run whose
 * training buffers cannot fit is refused before the first step allocates
 * them, naming the estimate, what is available and the flags that lower
 * it, instead of being ended by the OOM killer (Linux overcommits: the
 * allocations succeed, touching the pages kills the process). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

/* "activations 38.9 GiB, weights+gradients+Adam slots 1.9 GiB[, input
 * batches 0.4 GiB]" */
static void parts(const st_memory_estimate *e, const char *opt, char *buf, size_t n) {
  int k = snprintf(buf, n, "activations %.1f GiB, weights+gradients%s%s%s %.1f GiB",
                   gib(e->activation_bytes), e->optimizer_slots ? "+" : "",
                   e->optimizer_slots ? opt : "", e->optimizer_slots ? " slots" : "",
                   gib(e->weight_bytes));
  if (k > 0 && (size_t)k < n && e->input_bytes >= (uint64_t)100 << 20)
    snprintf(buf + k, n - (size_t)k, ", input batches %.1f GiB", gib(e->input_bytes));
}

int cli_check_memory(const char *cmd, const st_model *m, int64_t batch, const char *what,
                     const char *opt, const char *fix) {
  const char *skip = getenv("STRATA_NO_MEMORY_CHECK");
  if (skip && strcmp(skip, "") && strcmp(skip, "0")) return EXIT_OK;
  st_memory_estimate e;
  uint64_t have = 0;
  const char *src = "MemAvailable";
  st_status s = st_model_check_training_memory(m, batch, &e, &have);
  if (s != ST_OK && s != ST_ERR_NOMEM) return cli_fail(cmd, s);
  if (have == 0) return EXIT_OK; /* a GPU's memory, or nothing known */
  uint64_t again;
  (void)st_memory_available(&again, &src); /* the name of the smallest source */
  char p[256];
  parts(&e, opt, p, sizeof p);
  if (s == ST_ERR_NOMEM) {
    fprintf(stderr, "strata %s: the model needs about %.1f GiB for training at batch %lld%s "
            "(%s); this %s %.1f GiB available besides the weights (%s): %s "
            "(STRATA_NO_MEMORY_CHECK=1 skips this "
            "check)\n", cmd, gib(e.total_bytes), (long long)batch, what, p,
            strcmp(src, "MemAvailable") ? "process has" : "machine has", gib(have), src, fix);
    return EXIT_USAGE;
  }
  if (e.total_bytes - e.weight_bytes > have / 5 * 4) /* the weights are allocated */
    fprintf(stderr, "strata %s: warning: the model needs about %.1f GiB for training at batch "
            "%lld%s (%s): the activations take %.0f%% of the %.1f GiB available besides the "
            "weights (%s)\n", cmd, gib(e.total_bytes), (long long)batch, what, p,
            100.0 * (double)(e.total_bytes - e.weight_bytes) / (double)have, gib(have), src);
  return EXIT_OK;
}
