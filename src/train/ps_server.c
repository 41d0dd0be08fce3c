/* st_ps_server_run (strata/ps.h): a worker or ps task of a parameter-server
 * job. The server loop is ps/server.c's; this gives it the job's model
 * (train/ps_model.c) and the caller's data, message and stop callbacks. */
#include <math.h>
#include <string.h>

#include "base/args.h"
#include "ps/cluster.h"
#include "ps/server.h"
#include "ps/transport.h"
#include "strata/ps.h"
#include "train/ps_model.h"

st_ps_server_options st_ps_server_default_options(void) {
  st_ps_server_options o;
  memset(&o, 0, sizeof o);
  o.job_timeout = 120;
  return o;
}

static st_status data(void *user, const st__ps_job *j, st_shape input, const st_tensor **x,
                      const st_tensor **y, int64_t *n_train) {
  const st_ps_server_options *o = user;
  st_ps_data_request r = {j->data, j->val_split, j->train_examples, j->batch, (uint64_t)j->seed, input};
  return o->data(o->data_user, &r, x, y, n_train);
}

static void message(void *user, const char *line) {
  const st_ps_server_options *o = user;
  o->on_message(o->message_user, line);
}

static bool should_stop(void *user) {
  const st_ps_server_options *o = user;
  return o->should_stop(o->stop_user);
}

st_status st_ps_keygen(const char *tf_config, const char *cluster_file, const char *dir) {
  ST_REQUIRE(dir);
  st_ps_cluster c;
  st_status s = st__ps_cluster_load(tf_config, cluster_file, cluster_file ? "chief:0" : NULL,
                                    "st_ps_keygen", &c);
  if (s != ST_OK) return s;
  s = st__ps_keygen(&c, dir);
  st__ps_cluster_free(&c);
  return s;
}

st_status st_ps_server_run(const st_ps_server_options *o) {
  ST_REQUIRE(o);
  if (!isfinite(o->job_timeout) || o->job_timeout <= 0 || o->job_timeout > 1e6)
    return st_error(ST_ERR_INVALID, "st_ps_server_options.job_timeout: %g (must be in (0, 1e6] s)",
                    o->job_timeout);
  st__ps_server_config c = {o->tf_config, o->cluster_file, o->task, o->keys_dir, o->insecure,
                            o->job_timeout, st__ps_build_model, (void *)o,
                            o->data ? data : NULL, o->on_message ? message : NULL,
                            o->should_stop ? should_stop : NULL};
  return st__ps_serve(&c);
}
