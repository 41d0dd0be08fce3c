/* strata launch: a whole parameter-server cluster on this machine (loopback,
 * free ports, CURVE keys in a temp directory, TF_CONFIG per process), its
 * signals forwarded, torn down when the chief ends (with `--strategy
 * multi_worker_mirrored` after `--`: its workers instead, launch_mw.c); and
 * strata keygen: CURVE keys for a cluster. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ps/cluster.h"
#include "ps/transport.h"
#include "ps.h"
#include "ps/job.h"

#define LAUNCH_USAGE "--workers N --ps M [--insecure] [--restart-failed] -- train [train options]\n" \
  "       strata launch --workers N -- train [train options] --strategy multi_worker_mirrored"

typedef struct launch_cfg {
  long workers, ps;
  bool insecure, restart_failed;
} launch_cfg;

static cli_opt launch_opts[] = {
    CLI_OPT_INT("--workers", "N", launch_cfg, workers, 1, 64, "worker tasks (default 2)"),
    CLI_OPT_INT("--ps", "M", launch_cfg, ps, 1, 64, "parameter-server tasks (default 1)"),
    CLI_OPT_FLAG("--insecure", launch_cfg, insecure, "no CURVE keys (trusted networks only)"),
    CLI_OPT_FLAG("--restart-failed", launch_cfg, restart_failed, "start a worker or ps that dies again (up to 10 times per task); a worker rejoins the job, a ps reloads the latest --backup-dir backup"),
};
#define NLAUNCH ((int)(sizeof launch_opts / sizeof *launch_opts))

static int ps_load_cluster(const char *cmd, const char *cluster_file, const char *task,
                           st_ps_cluster *c);

static volatile sig_atomic_t g_sig;
static void on_sig(int sig) { g_sig = sig; }

/* A free TCP port on 127.0.0.1, below Linux's ephemeral range (32768-60999)
 * so that no outgoing connection takes it between this check and the
 * server's bind: random ports in 20000..32767 until one binds. */
int launch_free_port(st_rng *r) {
  for (int tries = 0; tries < 1000; tries++) {
    int port = 20000 + (int)st_rng_below(r, 12768);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    if (ok) return port;
  }
  return -1;
}

/* Port already given to a task before (role r, index i). */
static bool port_taken(const st_ps_cluster *c, int r, int i, int port) {
  for (int q = 0; q <= r; q++)
    for (int k = 0; k < (q < r ? c->count[q] : i); k++)
      if (c->tasks[q][k].port == port) return true;
  return false;
}

static st_status make_cluster(int nw, int nps, st_ps_cluster *c) {
  memset(c, 0, sizeof *c);
  int n[ST_PS_ROLE_COUNT] = {1, nw, nps};
  st_rng rng = st_rng_make(st__ps_random_u64(), 0);
  for (int r = 0; r < ST_PS_ROLE_COUNT; r++) {
    c->tasks[r] = calloc((size_t)n[r], sizeof(st_ps_task));
    if (!c->tasks[r]) return st_error(ST_ERR_NOMEM, "out of memory");
    c->count[r] = n[r];
    for (int i = 0; i < n[r]; i++) {
      st_ps_task *t = &c->tasks[r][i];
      t->role = (st_ps_role)r, t->index = i;
      for (int tries = 0; tries < 100; tries++) /* not one given to an earlier task */
        if ((t->port = launch_free_port(&rng)) < 0 || !port_taken(c, r, i, t->port)) break;
      snprintf(t->host, sizeof t->host, "127.0.0.1");
      if (t->port < 0) return st_error(ST_ERR_IO, "no free port on 127.0.0.1");
    }
  }
  return ST_OK;
}

pid_t launch_spawn(const char *tf_config, char **argv) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("TF_CONFIG", tf_config, 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "strata launch: cannot run /proc/self/exe: %s\n", strerror(errno));
    _exit(127);
  }
  return pid;
}

/* fork + exec this binary with argv, TF_CONFIG for (role, index). */
static pid_t spawn(const st_ps_cluster *c, int role, int index, char **argv) {
  char *tf = st__ps_cluster_to_tf_config(c, (st_ps_role)role, index);
  pid_t pid = tf ? launch_spawn(tf, argv) : -1;
  free(tf);
  return pid;
}

static void remove_keys(const char *dir, const st_ps_cluster *c) {
  if (!dir[0]) return;
  for (int r = 0; r < ST_PS_ROLE_COUNT; r++)
    for (int i = 0; i < c->count[r]; i++)
      for (int k = 0; k < 2; k++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s-%d.%s", dir, st__ps_role_name((st_ps_role)r), i, k ? "secret" : "pub");
        unlink(p);
      }
  rmdir(dir);
}

/* The keys directory outlives launch only while launch lives: a child
 * that waits for the end of a pipe launch holds (closed however launch
 * ends, kill -9 included) and then removes it (issue 29 D15). Returns the
 * pipe's write end (-1 when none could be made: launch removes the keys
 * itself as before). */
static int keys_janitor(const char *dir, const st_ps_cluster *c) {
  int fds[2];
  if (!dir[0] || pipe2(fds, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[1]);
    signal(SIGINT, SIG_IGN), signal(SIGTERM, SIG_IGN), signal(SIGHUP, SIG_IGN);
    char b;
    while (read(fds[0], &b, 1) != 0 && errno == EINTR) {
    }
    remove_keys(dir, c);
    _exit(0);
  }
  close(fds[0]);
  if (pid < 0) {
    close(fds[1]);
    return -1;
  }
  return fds[1];
}

/* Wait up to `seconds` for the servers still running (pid > 0; set to 0
 * once reaped). */
static void reap(pid_t *servers, int n, double seconds) {
  double deadline = st_now_seconds() + seconds;
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++)
      if (servers[i] > 0 && waitpid(servers[i], NULL, WNOHANG) == servers[i]) servers[i] = 0;
      else left += servers[i] > 0;
    if (!left || st_now_seconds() >= deadline) return;
    usleep(20000);
  }
}

/* The servers launch started: pid (0 once reaped), task, restarts so far. */
typedef struct launched {
  pid_t *pid;
  int *role, *index, *restarts;
  int n;
  const st_ps_cluster *c;
  char **argv;          /* the server command line */
  bool restart_failed;  /* --restart-failed: a worker or ps that dies is started again */
  pid_t chief;
  int refused;          /* a server that exited 2 (its task cannot run: stop the job), or -1 */
} launched;

/* Server pid p ended with status: a worker or ps that failed (a signal or a
 * non-zero exit; exit 0 is the chief's STOP) is started again with
 * --restart-failed, at most 10 times per task (a worker rejoins; a ps gets
 * the JOB and the latest backup from the chief, with --backup-dir);
 * otherwise it is forgotten. */
static void server_ended(launched *l, pid_t p, int status) {
  for (int i = 0; i < l->n; i++) {
    if (l->pid[i] != p) continue;
    l->pid[i] = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_USAGE && l->refused < 0) {
      /* its task cannot run (it cannot listen, its keys, its data): the
       * chief would wait for it until its JOB timeout (issue 29 D9) */
      l->refused = i;
      fprintf(stderr, "strata launch: %s:%d (pid %d) exited with 2 (its error is above): stopping "
              "the job\n", st__ps_role_name((st_ps_role)l->role[i]), l->index[i], (int)p);
      if (l->chief > 0) kill(l->chief, SIGTERM);
      return;
    }
    bool failed = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
    if (!failed || !l->restart_failed || l->restarts[i] >= 10) return;
    l->restarts[i]++;
    l->pid[i] = spawn(l->c, l->role[i], l->index[i], l->argv);
    fprintf(stderr, "strata launch: %s:%d (pid %d) %s %d: restarted as pid %d\n",
            st__ps_role_name((st_ps_role)l->role[i]), l->index[i], (int)p,
            WIFSIGNALED(status) ? "killed by signal" : "exited with", WIFSIGNALED(status) ? WTERMSIG(status) :
            WEXITSTATUS(status), (int)l->pid[i]);
    return;
  }
}

/* Wait for the chief, forwarding signals (and restarting workers with
 * --restart-failed); then stop the servers. Returns the chief's exit code. */
static int supervise(pid_t chief, launched *l) {
  pid_t *servers = l->pid;
  int n = l->n;
  int status = 0, rc = EXIT_FAIL;
  for (;;) {
    pid_t p = waitpid(-1, &status, 0);
    if (p == chief) break;
    if (p > 0) {
      server_ended(l, p, status);
    } else if (p < 0 && errno == EINTR && g_sig) {
      int sig = g_sig == SIGHUP ? SIGTERM : g_sig; /* a closed terminal stops the job too */
      kill(chief, sig);
      for (int i = 0; i < n; i++)
        if (servers[i] > 0) kill(servers[i], sig);
      g_sig = 0;
    } else if (p < 0 && errno != EINTR) {
      break;
    }
  }
  if (WIFEXITED(status)) rc = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) rc = 128 + WTERMSIG(status);
  if (l->refused >= 0) rc = EXIT_USAGE; /* the server's error, not the chief's stop */
  /* the chief sent STOP: 1 s to exit on their own, then SIGTERM (a server
   * in the middle of a request stops at once), 2 s more, then SIGKILL */
  reap(servers, n, 1.0);
  for (int i = 0; i < n; i++)
    if (servers[i] > 0) kill(servers[i], SIGTERM);
  reap(servers, n, 2.0);
  for (int i = 0; i < n; i++)
    if (servers[i] > 0) {
      kill(servers[i], SIGKILL);
      waitpid(servers[i], NULL, 0);
    }
  return rc;
}

int cmd_launch(int argc, char **argv) {
  int dd = 0;
  for (int i = 2; i < argc && !dd; i++)
    if (!strcmp(argv[i], "--")) dd = i;
  if (!dd || dd + 1 >= argc || strcmp(argv[dd + 1], "train")) {
    if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
      cli_print_help("launch", LAUNCH_USAGE, launch_opts, NLAUNCH);
      return EXIT_OK;
    }
    fprintf(stderr, "strata launch: expected '-- train [options]' after the launch options\n");
    return EXIT_USAGE;
  }
  int rc = cli_parse("launch", LAUNCH_USAGE, dd, argv, launch_opts, NLAUNCH);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  launch_cfg o = {2, 1, false, false};
  if (!cli_store("launch", launch_opts, NLAUNCH, &o)) return EXIT_USAGE;
  long nw = o.workers, nps = o.ps;
  bool insecure = o.insecure;
  for (int i = dd + 2; i < argc; i++)
    if (!strcmp(argv[i - 1], "--strategy") && !strcmp(argv[i], "multi_worker_mirrored"))
      return launch_multi_worker(argc, argv, dd, nw, cli_get(launch_opts, NLAUNCH, "--ps") != NULL);
  if (!st__ps_transport_built()) {
    fprintf(stderr, "strata launch: this build of Strata has no ZeroMQ: install libzmq3-dev and rebuild\n");
    return EXIT_USAGE;
  }
  st_ps_cluster c;
  char keys[512] = "";
  st_status s = make_cluster((int)nw, (int)nps, &c);
  if (s == ST_OK && !insecure) {
    const char *tmp = getenv("TMPDIR");
    snprintf(keys, sizeof keys, "%s/strata-keys-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(keys)) s = st_error(ST_ERR_IO, "%s: cannot create: %s", keys, strerror(errno)), keys[0] = 0;
    else s = st__ps_keygen(&c, keys);
  }
  if (s != ST_OK) {
    rc = cli_fail("launch", s);
    remove_keys(keys, &c);
    st__ps_cluster_free(&c);
    return rc;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sig;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  int janitor = keys_janitor(keys, &c);
  char *sargv[6] = {argv[0], "server", insecure ? "--insecure" : "--keys", insecure ? NULL : keys, NULL};
  int nserv = (int)(nw + nps), k = 0;
  pid_t *servers = calloc((size_t)nserv, sizeof(pid_t));
  int *info = calloc((size_t)nserv * 3, sizeof(int));
  launched l = {servers, info, info ? info + nserv : NULL, info ? info + 2 * nserv : NULL, nserv, &c, sargv,
                o.restart_failed, 0, -1};
  for (int r = ST_PS_PS; servers && info && r >= ST_PS_WORKER; r--)
    for (int i = 0; i < c.count[r]; i++) {
      l.role[k] = r, l.index[k] = i;
      servers[k] = spawn(&c, r, i, sargv);
      fprintf(stderr, "strata launch: %s:%d on 127.0.0.1:%d, pid %d\n", st__ps_role_name((st_ps_role)r), i,
              c.tasks[r][i].port, (int)servers[k]);
      k++;
    }
  /* the chief: strata train ARGS --strategy parameter_server --keys DIR */
  int nt = argc - dd - 1;
  char **targv = calloc((size_t)nt + 8, sizeof(char *));
  int t = 0;
  targv[t++] = argv[0];
  for (int i = dd + 1; i < argc; i++) targv[t++] = argv[i];
  bool has_strategy = false;
  for (int i = dd + 1; i < argc; i++) has_strategy |= !strcmp(argv[i], "--strategy");
  if (!has_strategy) targv[t++] = "--strategy", targv[t++] = "parameter_server";
  if (insecure) targv[t++] = "--insecure";
  else targv[t++] = "--keys", targv[t++] = keys;
  pid_t chief = spawn(&c, ST_PS_CHIEF, 0, targv);
  l.chief = chief;
  fprintf(stderr, "strata launch: chief:0 on 127.0.0.1:%d, pid %d\n", c.tasks[0][0].port, (int)chief);
  rc = chief > 0 && info ? supervise(chief, &l) : EXIT_FAIL;
  free(info);
  remove_keys(keys, &c);
  if (janitor >= 0) close(janitor); /* it finds the directory gone */
  free(targv);
  free(servers);
  st__ps_cluster_free(&c);
  return rc;
}

/* ---- keygen ---- */
typedef struct keygen_cfg {
  const char *cluster;
} keygen_cfg;

static cli_opt keygen_opts[] = {
    CLI_OPT_STR("--cluster", "FILE", keygen_cfg, cluster, "the cluster JSON (default: TF_CONFIG's cluster)"),
};
#define NKEYGEN ((int)(sizeof keygen_opts / sizeof *keygen_opts))

int cmd_keygen(int argc, char **argv) {
  const char *pos[1];
  int npos = 0;
  int rc = cli_parse_args("keygen", "DIR [--cluster FILE]", argc, argv, keygen_opts, NKEYGEN, pos, 1,
                          &npos);
  if (rc) return rc < 0 ? EXIT_OK : rc;
  if (npos != 1) {
    fprintf(stderr, "strata keygen: expected the key directory (strata keygen DIR)\n");
    return EXIT_USAGE;
  }
  st_ps_cluster c;
  keygen_cfg k = {NULL};
  cli_store("keygen", keygen_opts, NKEYGEN, &k); /* strings only: never fails */
  const char *file = k.cluster;
  if ((rc = ps_load_cluster("keygen", file, file ? "chief:0" : NULL, &c))) return rc;
  st_status s = st__ps_keygen(&c, pos[0]);
  if (s == ST_OK)
    printf("wrote %d key pairs to %s (<role>-<index>.pub and .secret)\n",
           c.count[0] + c.count[1] + c.count[2], pos[0]);
  st__ps_cluster_free(&c);
  return s == ST_OK ? EXIT_OK : cli_fail("keygen", s);
}

/* The cluster of this process: --cluster FILE with --task, or TF_CONFIG.
 * Prints the error and returns EXIT_USAGE on failure. */
static int ps_load_cluster(const char *cmd, const char *cluster_file, const char *task,
                           st_ps_cluster *c) {
  st_status s;
  if (cluster_file || task) {
    if (!cluster_file || !task) {
      fprintf(stderr, "strata %s: --cluster and --task go together\n", cmd);
      return EXIT_USAGE;
    }
    s = st__ps_cluster_parse_file(cluster_file, task, c);
  } else {
    s = st__ps_cluster_from_env(c);
  }
  if (s == ST_OK) return EXIT_OK;
  fprintf(stderr, "strata %s: %s\n", cmd, st_last_error());
  return s == ST_ERR_NOMEM ? EXIT_FAIL : EXIT_USAGE;
}

int ps_load_task(const char *cmd, const char *cluster_file, const char *task, const char **role,
                 int *index) {
  st_ps_cluster c;
  int rc = ps_load_cluster(cmd, cluster_file, task, &c);
  if (rc) return rc;
  *role = st__ps_role_name(c.self_role), *index = c.self_index;
  st__ps_cluster_free(&c);
  return EXIT_OK;
}
