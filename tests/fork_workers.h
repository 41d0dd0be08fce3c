/* A job of worker processes for the transport tests that fork one process
 * per worker: fork_workers(n, worker, arg, got, msg, rc) runs worker(arg, r,
 * fd) in child r (it writes one NUL-terminated line to fd and _exits), then
 * reads child r's line into got + r * msg (at most msg - 1 bytes) and its
 * exit code (128 + the signal when killed) into rc[r]. Header-only, like
 * check.h. */
#ifndef STRATA_TESTS_FORK_WORKERS_H
#define STRATA_TESTS_FORK_WORKERS_H
#include <stddef.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static inline void fork_workers(int n, void (*worker)(const void *arg, int rank, int fd),
                                const void *arg, char *got, size_t msg, int *rc) {
  int fds[64][2];
  pid_t pid[64];
  for (int r = 0; r < n && r < 64; r++) {
    if (pipe(fds[r]) != 0) _exit(1);
    if ((pid[r] = fork()) == 0) {
      close(fds[r][0]);
      worker(arg, r, fds[r][1]);
      _exit(0);
    }
    close(fds[r][1]);
  }
  for (int r = 0; r < n && r < 64; r++) {
    char *line = got + (size_t)r * msg;
    ssize_t len = read(fds[r][0], line, msg - 1);
    line[len > 0 ? len : 0] = '\0';
    close(fds[r][0]);
    int st = 0;
    waitpid(pid[r], &st, 0);
    rc[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
}
#endif
