/* The device lists of the strategy options ("cpu:0,cpu:1", gpu:N) and the
 * replica counts they give, checked for the strategies' check functions
 * (below the strategies: it calls nothing of theirs). */
#include "distribute/devices.h"

#include <string.h>

#include "base/sysinfo.h"
#include "distribute/collective/collective.h"
#include "distribute/gpu_devices.h"
#include "backend/cuda.h"

/* "cpu", "cpu:N" -> ST_OK; a GPU -> checked by gpu_devices.c (logical: GPUs
 * per physical GPU; *gpu set when it exists); anything else invalid. */
st_status st__check_device(const char *dev, int len, int logical, bool *gpu) {
  if ((len == 3 && !strncmp(dev, "cpu", 3)) || (len > 4 && !strncmp(dev, "cpu:", 4) &&
                                                (int)strspn(dev + 4, "0123456789") == len - 4))
    return ST_OK;
  bool is_gpu = false;
  st_status s = st__gpu_device_check(dev, len, logical, &is_gpu);
  if (is_gpu && s == ST_OK) *gpu = true;
  if (is_gpu) return s;
  return st_error(ST_ERR_INVALID, "device '%.*s': expected cpu:N or gpu:N", len, dev);
}

/* "cpu:0,cpu:1" -> 2 replicas; devices must be distinct. */
static st_status count_devices(const char *list, int logical, int *n) {
  *n = 0;
  bool gpu = false;
  for (const char *p = list; *p;) {
    int len = (int)strcspn(p, ",");
    st_status s = st__check_device(p, len, logical, &gpu);
    if (s != ST_OK) return s;
    for (const char *q = list; q < p; q += strcspn(q, ",") + 1)
      if ((int)strcspn(q, ",") == len && !strncmp(q, p, (size_t)len))
        return st_error(ST_ERR_INVALID, "devices '%s': '%.*s' is listed twice", list, len, p);
    (*n)++;
    p += len;
    if (*p == ',') p++;
  }
  if (*n == 0) return st_error(ST_ERR_INVALID, "devices '%s': no device given", list);
  return ST_OK;
}

st_status st__device_plan(const st_strategy_options *o, int n, st__device_plan_t *out) {
  memset(out, 0, sizeof *out);
  const char *list = o->devices ? o->devices : o->device;
  if (!list) return ST_OK;
  int logical = o->logical_gpus > 0 ? o->logical_gpus : 1, i = 0, cpus = 0;
  for (const char *p = list; *p && i < ST_MAX_REPLICAS;) {
    int len = (int)strcspn(p, ","), index = 0;
    if (st__gpu_device_parse(p, len, &index) > 0) {
      out->gpu_of[i] = index / logical;
      out->gpus++;
    } else {
      cpus++;
    }
    i++;
    p += len;
    if (*p == ',') p++;
  }
  (void)n;
  if (out->gpus && cpus)
    return st_error(ST_ERR_INVALID, "devices '%.64s': CPU and GPU devices mixed; give GPUs only "
                    "(the replicas of one strategy run on one kind of device)", list);
  out->on_gpus = out->gpus > 0;
  return ST_OK;
}

/* Entries of a device list as count_devices walks it (a trailing comma ends
 * the list), in one pass over the string: size_t, so any length is safe. */
static size_t count_entries(const char *list) {
  size_t n = *list != '\0';
  for (const char *p = list; (p = strchr(p, ',')) != NULL; p++) n += p[1] != '\0';
  return n;
}

/* The one check of the local replica count against ST_MAX_REPLICAS (the
 * per-replica tables are sized by it), before anything walks the list. */
static st_status check_replica_limit(const st_strategy_options *o) {
  if (o->devices) {
    size_t n = count_entries(o->devices);
    if (n > ST_MAX_REPLICAS)
      return st_error(ST_ERR_INVALID, "devices '%.32s%s': %zu devices given, at most %d "
                      "(ST_MAX_REPLICAS)", o->devices, strlen(o->devices) > 32 ? "..." : "",
                      n, ST_MAX_REPLICAS);
  }
  if (o->replicas > ST_MAX_REPLICAS)
    return st_error(ST_ERR_INVALID, "replicas: %d replicas given, at most %d (ST_MAX_REPLICAS)",
                    o->replicas, ST_MAX_REPLICAS);
  if (o->replicas < 0)
    return st_error(ST_ERR_INVALID, "replicas: %d given, expected 1..%d (ST_MAX_REPLICAS; 0 = one "
                    "per core)", o->replicas, ST_MAX_REPLICAS);
  return ST_OK;
}

st_status st__replica_count(const st_strategy_options *o, int *n) {
  if (o->devices && o->replicas)
    return st_error(ST_ERR_INVALID, "strategy: give devices or replicas, not both");
  st_status s = check_replica_limit(o);
  if (s != ST_OK) return s;
  if (o->devices) return count_devices(o->devices, o->logical_gpus, n);
  *n = o->replicas ? o->replicas : st__cpu_count();
  if (*n > ST_MAX_REPLICAS) *n = ST_MAX_REPLICAS;
  return ST_OK;
}

st_status st__check_replicas(const st_strategy_options *o, int *n, int *cross) {
  st_status s = st__replica_count(o, n);
  if (s == ST_OK && o->cross_device_ops)
    s = st__cross_device_ops_parse(o->cross_device_ops, (st_cross_device_ops *)cross);
  return s;
}
