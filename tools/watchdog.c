/* The start-up watchdog (issue 29 D7): a rank of an MPI job that dies or
 * stops while the others are in MPI_Init_thread (under mpirun
 * --enable-recovery, which keeps them running) leaves them there forever:
 * MPI's start-up has no timeout and the library cannot leave a call it is
 * blocked in. The CLI arms this watchdog around strategy creation; if that
 * has not returned within --collective-timeout plus a margin, the process
 * says why on stderr and exits 3 (a peer lost, as after any collective
 * timeout). */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static bool g_done, g_running;
static pthread_t g_thread;
static double g_seconds;
static char g_what[256];

static void *watch(void *arg) {
  (void)arg;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)g_seconds;
  until.tv_nsec += (long)((g_seconds - (double)(time_t)g_seconds) * 1e9);
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&g_mu);
  int rc = 0;
  while (!g_done && rc == 0) rc = pthread_cond_timedwait(&g_cv, &g_mu, &until);
  bool fire = !g_done;
  pthread_mutex_unlock(&g_mu);
  if (fire) {
    fprintf(stderr, "%s\n", g_what);
    fflush(stderr);
    _exit(EXIT_PEER);
  }
  return NULL;
}

void cli_watchdog_arm(double seconds, const char *what) {
  pthread_mutex_lock(&g_mu);
  g_done = false;
  g_seconds = seconds;
  snprintf(g_what, sizeof g_what, "%s", what);
  pthread_mutex_unlock(&g_mu);
  g_running = pthread_create(&g_thread, NULL, watch, NULL) == 0;
}

void cli_watchdog_disarm(void) {
  if (!g_running) return;
  pthread_mutex_lock(&g_mu);
  g_done = true;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
  pthread_join(g_thread, NULL);
  g_running = false;
}
