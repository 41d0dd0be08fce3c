/* Internal, tests only: the parameter server's test hooks (RELIABILITY.md
 * P1-P5), set by the caller (the CLI sets them from the environment variables
 * STRATA_PS_TEST_CHUNK_BYTES, STRATA_PS_TEST_FAULT,
 * STRATA_PS_TEST_STEP_DELAY_MS and STRATA_PS_TEST_NET, tools/ps_test_hooks.c;
 * a C test calls st__ps_set_test_hooks itself). The library never reads the
 * environment for them. Unset (the default): no hook. Set them before a job
 * starts, not while one runs. */
#ifndef STRATA_PS_TEST_HOOKS_H
#define STRATA_PS_TEST_HOOKS_H

typedef struct st__ps_test_hooks {
  long long chunk_bytes; /* SNAPSHOT / RESTORE chunks of this many bytes (0: 64 MiB) */
  char fault[64];        /* "kill|stop:WORKER:STEP": that worker raises SIGKILL /
                            SIGSTOP before that global step ("": none) */
  int step_delay_ms;     /* every worker step sleeps this long (0: none) */
  char net[128];         /* the transport's test faults, "drop=P,dup=P,reorder=P,seed=S"
                            (st_ps_transport_options.test_faults; "": none) */
} st__ps_test_hooks;

/* Copy h into the hooks (NULL: clear them). */
void st__ps_set_test_hooks(const st__ps_test_hooks *h);
/* The hooks now set (all zero when none). */
const st__ps_test_hooks *st__ps_get_test_hooks(void);

#endif
