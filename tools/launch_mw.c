/* strata launch --workers N -- train ... --strategy multi_worker_mirrored:
 * N workers on this machine, started as TensorFlow's launchers start them:
 * one process each with its TF_CONFIG (free loopback ports), for users
 * without mpirun. The workers join through the Gloo transport; this process
 * forwards SIGINT/SIGTERM to them, waits for every one (a worker that fails
 * makes the others exit 3 within their --collective-timeout) and exits with
 * the chief's code, or the first failure's when the chief succeeded. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ps.h"

static volatile sig_atomic_t g_sig;
static void on_sig(int sig) { g_sig = sig; }

/* {"cluster": {"worker": [...]}, "task": {"type": "worker", "index": i}} */
static char *tf_config(const int *ports, int n, int i) {
  size_t cap = 96 + (size_t)n * 24;
  char *s = malloc(cap);
  if (!s) return NULL;
  size_t k = (size_t)snprintf(s, cap, "{\"cluster\": {\"worker\": [");
  for (int w = 0; w < n; w++)
    k += (size_t)snprintf(s + k, cap - k, "%s\"127.0.0.1:%d\"", w ? ", " : "", ports[w]);
  snprintf(s + k, cap - k, "]}, \"task\": {\"type\": \"worker\", \"index\": %d}}", i);
  return s;
}

static int code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Wait for every worker, forwarding signals; the exit code as above. */
static int supervise(pid_t *pid, int n) {
  int rc0 = -1, first_bad = 0, left = n;
  while (left > 0) {
    int status = 0;
    pid_t p = waitpid(-1, &status, 0);
    if (p < 0 && errno == EINTR && g_sig) {
      for (int i = 0; i < n; i++)
        if (pid[i] > 0) kill(pid[i], g_sig);
      g_sig = 0;
      continue;
    }
    if (p < 0 && errno != EINTR) break;
    for (int i = 0; p > 0 && i < n; i++) {
      if (pid[i] != p) continue;
      int rc = code_of(status);
      pid[i] = 0;
      left--;
      if (i == 0) rc0 = rc;
      if (rc && !first_bad) first_bad = rc;
      if (rc && i) fprintf(stderr, "strata launch: worker:%d (pid %d) %s %d\n", i, (int)p,
                           WIFSIGNALED(status) ? "killed by signal" : "exited with",
                           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
  }
  return rc0 > 0 ? rc0 : first_bad;
}

int launch_multi_worker(int argc, char **argv, int dd, long workers, bool ps_given) {
  if (ps_given) {
    fprintf(stderr, "strata launch: --ps is for --strategy parameter_server; "
            "multi_worker_mirrored has workers only\n");
    return EXIT_USAGE;
  }
  int n = (int)workers, *ports = calloc((size_t)n, sizeof *ports);
  pid_t *pid = calloc((size_t)n, sizeof *pid);
  char **targv = calloc((size_t)(argc - dd) + 1, sizeof *targv);
  st_rng rng = st_rng_make((uint64_t)getpid() << 32 ^ (uint64_t)(st_now_seconds() * 1e6), 0);
  int rc = ports && pid && targv ? EXIT_OK : EXIT_FAIL;
  for (int i = 0; rc == EXIT_OK && i < n; i++) {
    ports[i] = launch_free_port(&rng);
    for (int j = 0; j < i; j++) ports[i] = ports[i] == ports[j] ? launch_free_port(&rng) : ports[i];
    if (ports[i] < 0) fprintf(stderr, "strata launch: no free port on 127.0.0.1\n"), rc = EXIT_FAIL;
  }
  int t = 0;
  if (targv) targv[t++] = argv[0];
  for (int i = dd + 1; targv && i < argc; i++) targv[t++] = argv[i];
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sig;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  for (int i = 0; rc == EXIT_OK && i < n; i++) {
    char *tf = tf_config(ports, n, i);
    pid[i] = tf ? launch_spawn(tf, targv) : -1;
    free(tf);
    if (pid[i] < 0) rc = EXIT_FAIL;
    else fprintf(stderr, "strata launch: worker:%d on 127.0.0.1:%d, pid %d\n", i, ports[i], (int)pid[i]);
  }
  if (rc == EXIT_OK) rc = supervise(pid, n);
  else
    for (int i = 0; pid && i < n; i++)
      if (pid[i] > 0) kill(pid[i], SIGTERM), waitpid(pid[i], NULL, 0);
  free(ports);
  free(pid);
  free(targv);
  return rc;
}
