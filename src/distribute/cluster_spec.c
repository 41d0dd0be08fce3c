/* A TensorFlow cluster: TF_CONFIG or a cluster file, parsed and checked
 * completely before any socket opens (cluster_spec.h lists the rules). */
#include "distribute/cluster_spec.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"

static const char *const k_roles[ST_TASK_ROLE_COUNT] = {"chief", "worker", "ps", "evaluator"};

const char *st__task_role_name(st_task_role r) {
  return (unsigned)r < ST_TASK_ROLE_COUNT ? k_roles[r] : NULL;
}

static int role_of(const char *name) {
  for (int i = 0; i < ST_TASK_ROLE_COUNT; i++)
    if (!strcmp(name, k_roles[i])) return i;
  return -1;
}

void st__cluster_spec_free(st_cluster_spec *c) {
  if (!c) return;
  for (int i = 0; i < ST_TASK_ROLE_COUNT; i++) free(c->tasks[i]);
  memset(c, 0, sizeof *c);
}

/* "host:port": host of [A-Za-z0-9.-_], port 1..65535 in decimal. */
static st_status parse_address(const char *src, const char *field, const char *a, st_cluster_task *t) {
  const char *colon = strrchr(a, ':');
  size_t hl = colon ? (size_t)(colon - a) : 0;
  if (!colon || hl == 0 || hl > ST_CLUSTER_MAX_HOST)
    return st_error(ST_ERR_INVALID, "%s: %s: address '%.80s' is not host:port", src, field, a);
  for (size_t i = 0; i < hl; i++) {
    char ch = a[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          ch == '.' || ch == '-' || ch == '_'))
      return st_error(ST_ERR_INVALID, "%s: %s: address '%.80s': bad character in host", src,
                      field, a);
  }
  long port = 0;
  const char *p = colon + 1;
  if (!*p) return st_error(ST_ERR_INVALID, "%s: %s: address '%.80s' has no port", src, field, a);
  for (; *p; p++) {
    if (*p < '0' || *p > '9' || port > 65535) {
      port = -1;
      break;
    }
    port = port * 10 + (*p - '0');
  }
  if (port < 1 || port > 65535)
    return st_error(ST_ERR_INVALID, "%s: %s: address '%.80s': port out of range 1..65535", src,
                    field, a);
  memcpy(t->host, a, hl);
  t->host[hl] = '\0';
  t->port = (int)port;
  return ST_OK;
}

/* The earlier task with the same host:port, or NULL. */
static const st_cluster_task *find_dup(const st_cluster_spec *c, const st_cluster_task *t) {
  for (int r = 0; r < ST_TASK_ROLE_COUNT; r++)
    for (int i = 0; i < c->count[r]; i++) {
      const st_cluster_task *o = &c->tasks[r][i];
      if (o != t && o->port == t->port && !strcmp(o->host, t->host)) return o;
    }
  return NULL;
}

static st_status parse_role(const char *src, st_cluster_spec *c, int r, json_t *list) {
  char field[64];
  snprintf(field, sizeof field, "cluster.%s", k_roles[r]);
  if (!json_is_array(list))
    return st_error(ST_ERR_INVALID, "%s: %s: expected a list of \"host:port\" strings", src, field);
  size_t n = json_array_size(list);
  if (n > ST_CLUSTER_MAX_TASKS)
    return st_error(ST_ERR_INVALID, "%s: %s: %zu tasks, over the limit of %d", src, field, n,
                    ST_CLUSTER_MAX_TASKS);
  if (n == 0) return ST_OK;
  c->tasks[r] = calloc(n, sizeof(st_cluster_task));
  if (!c->tasks[r]) return st_error(ST_ERR_NOMEM, "%s: out of memory", src);
  c->count[r] = (int)n;
  for (size_t i = 0; i < n; i++) {
    snprintf(field, sizeof field, "cluster.%s[%zu]", k_roles[r], i);
    json_t *a = json_array_get(list, i);
    if (!json_is_string(a))
      return st_error(ST_ERR_INVALID, "%s: %s: expected a \"host:port\" string", src, field);
    st_cluster_task *t = &c->tasks[r][i];
    t->role = (st_task_role)r;
    t->index = (int)i;
    st_status s = parse_address(src, field, json_string_value(a), t);
    if (s != ST_OK) return s;
  }
  return ST_OK;
}

static st_status check_duplicates(const char *src, const st_cluster_spec *c) {
  for (int r = 0; r < ST_TASK_ROLE_COUNT; r++)
    for (int i = 0; i < c->count[r]; i++) {
      const st_cluster_task *t = &c->tasks[r][i], *d = find_dup(c, t);
      if (d && (d->role < t->role || (d->role == t->role && d->index < t->index)))
        return st_error(ST_ERR_INVALID, "%s: cluster.%s[%d]: duplicate address %s:%d (also cluster.%s[%d])",
                        src, k_roles[r], i, t->host, t->port, k_roles[d->role], d->index);
    }
  return ST_OK;
}

static st_status parse_cluster(const char *src, json_t *cl, const st_cluster_policy *p,
                               st_cluster_spec *c) {
  if (!json_is_object(cl))
    return st_error(ST_ERR_INVALID, "%s: cluster: expected an object of role: [addresses]", src);
  const char *key;
  json_t *v;
  json_object_foreach(cl, key, v) {
    int r = role_of(key);
    if (r < 0)
      return st_error(ST_ERR_INVALID, "%s: cluster.%.60s: unknown role (expected chief, worker, "
                      "ps or evaluator)", src, key);
    st_status s = parse_role(src, c, r, v);
    if (s != ST_OK) return s;
  }
  for (int r = 0; r < ST_TASK_ROLE_COUNT; r++)
    if (c->count[r] < p->min[r] || c->count[r] > p->max[r])
      return st_error(ST_ERR_INVALID, "%s: cluster.%s: %s, got %d", src, k_roles[r], p->why[r],
                      c->count[r]);
  return check_duplicates(src, c);
}

/* A role the job takes no task of (max 0) is no role of its for the task. */
static st_status set_task(const char *src, st_cluster_spec *c, const st_cluster_policy *p,
                          const char *type, long long index, const char *field) {
  int r = role_of(type);
  if (r < 0 || p->max[r] == 0)
    return st_error(ST_ERR_INVALID, "%s: %s.type: unknown role '%.60s' (expected %s)", src, field,
                    type, p->roles);
  if (index < 0 || index >= c->count[r])
    return st_error(ST_ERR_INVALID, "%s: %s.index: %lld out of range for %s (0..%d)", src, field,
                    index, type, c->count[r] - 1);
  c->self_role = (st_task_role)r;
  c->self_index = (int)index;
  return ST_OK;
}

static st_status load_json(const char *src, const char *text, size_t len, json_t **out) {
  json_error_t e;
  *out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
  if (!*out)
    return st_error(ST_ERR_FORMAT, "%s: line %d, column %d: bad JSON: %s", src, e.line, e.column,
                    e.text);
  if (!json_is_object(*out)) {
    json_decref(*out);
    return st_error(ST_ERR_INVALID, "%s: expected a JSON object", src);
  }
  return ST_OK;
}

static st_status parse_tf_config(const char *src, json_t *root, const st_cluster_policy *p,
                                 st_cluster_spec *c) {
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "cluster") && strcmp(key, "task") && strcmp(key, "environment") &&
        strcmp(key, "rpc_layer"))
      return st_error(ST_ERR_INVALID, "%s: %.60s: unknown field (expected cluster and task)", src, key);
  }
  json_t *cl = json_object_get(root, "cluster"), *task = json_object_get(root, "task");
  if (!cl) return st_error(ST_ERR_INVALID, "%s: cluster: missing", src);
  st_status s = parse_cluster(src, cl, p, c);
  if (s != ST_OK) return s;
  if (!json_is_object(task))
    return st_error(ST_ERR_INVALID, "%s: task: missing (expected {\"type\": ..., \"index\": ...})", src);
  json_t *type = json_object_get(task, "type"), *index = json_object_get(task, "index");
  if (!json_is_string(type)) return st_error(ST_ERR_INVALID, "%s: task.type: missing or not a string", src);
  if (index && !json_is_integer(index))
    return st_error(ST_ERR_INVALID, "%s: task.index: not an integer", src);
  return set_task(src, c, p, json_string_value(type), index ? json_integer_value(index) : 0,
                  "task");
}

st_status st__cluster_spec_parse_tf_config(const char *json, size_t len, const char *source,
                                           const st_cluster_policy *p, st_cluster_spec *out) {
  memset(out, 0, sizeof *out);
  json_t *root;
  st_status s = load_json(source, json, len, &root);
  if (s != ST_OK) return s;
  s = parse_tf_config(source, root, p, out);
  json_decref(root);
  if (s != ST_OK) st__cluster_spec_free(out);
  return s;
}

/* "TYPE:INDEX" into the cluster's task. */
static st_status parse_task_spec(const char *spec, const st_cluster_policy *p,
                                 st_cluster_spec *c) {
  const char *colon = spec ? strchr(spec, ':') : NULL;
  char type[16];
  if (!colon || (size_t)(colon - spec) >= sizeof type || !colon[1])
    return st_error(ST_ERR_INVALID, "--task: '%.60s' is not TYPE:INDEX (e.g. worker:0)",
                    spec ? spec : "(none)");
  memcpy(type, spec, (size_t)(colon - spec));
  type[colon - spec] = '\0';
  char *end;
  long long idx = strtoll(colon + 1, &end, 10);
  if (*end || end == colon + 1)
    return st_error(ST_ERR_INVALID, "--task: index '%.20s' is not an integer", colon + 1);
  return set_task("--task", c, p, type, idx, "task");
}

st_status st__cluster_spec_parse_file(const char *path, const char *task,
                                      const st_cluster_policy *p, st_cluster_spec *out) {
  memset(out, 0, sizeof *out);
  char *text = NULL;
  size_t len = 0;
  st_status s = st__read_all(path, 1 << 20, &text, &len);
  if (s != ST_OK) return s;
  json_t *root;
  s = load_json(path, text, len, &root);
  free(text);
  if (s != ST_OK) return s;
  json_t *cl = json_object_get(root, "cluster");
  s = parse_cluster(path, cl ? cl : root, p, out);
  json_decref(root);
  if (s == ST_OK) s = parse_task_spec(task, p, out);
  if (s != ST_OK) st__cluster_spec_free(out);
  return s;
}

const st_cluster_task *st__cluster_spec_task(const st_cluster_spec *c, st_task_role r, int index) {
  if ((unsigned)r >= ST_TASK_ROLE_COUNT || index < 0 || index >= c->count[r]) return NULL;
  return &c->tasks[r][index];
}

char *st__cluster_spec_to_tf_config(const st_cluster_spec *c, st_task_role r, int index) {
  json_t *root = json_object(), *cl = json_object(), *task = json_object();
  for (int k = 0; k < ST_TASK_ROLE_COUNT; k++) {
    if (!c->count[k] && k == ST_TASK_EVALUATOR) continue;
    json_t *list = json_array();
    for (int i = 0; i < c->count[k]; i++) {
      char a[ST_CLUSTER_MAX_HOST + 16];
      snprintf(a, sizeof a, "%s:%d", c->tasks[k][i].host, c->tasks[k][i].port);
      json_array_append_new(list, json_string(a));
    }
    json_object_set_new(cl, k_roles[k], list);
  }
  json_object_set_new(task, "type", json_string(k_roles[r]));
  json_object_set_new(task, "index", json_integer(index));
  json_object_set_new(root, "cluster", cl);
  json_object_set_new(root, "task", task);
  char *s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  return s;
}
