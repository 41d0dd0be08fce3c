/* Backend registry: st_backend_get maps a name to a backend table; contexts
 * are made here (st_backend_ctx_create), with the optional ctx_create slot's
 * fallback. A backend that was not built answers ST_ERR_NOT_BUILT.
 *
 * Adding a backend touches seven files (scripts/check_complete.py, run by
 * tests/test_completeness.sh, fails on any of those marked *):
 *  1. its table (backend/impl.h) in its own file(s), with the
 *     _Static_assert on ST__BACKEND_SLOTS (the compiler then names a slot
 *     left out) and a context (ctx_create) if it keeps state;
 *  2. a row in backends[] below, and its name in st_backend_get's message;
 *  3. CMakeLists.txt: its sources (or a module loaded with dlopen, like cuda);
 *  4. tests/test_kernels.c: its name in k_backends, so every kernel is
 *     compared with the reference*;
 *  5. how a device string reaches it (gpu:N -> cuda in src/distribute/
 *     gpu_devices.c; STRATA_BACKEND in src/model/compile.c);
 *  6. the README's "backends" row* and docs (docs/GPU.md for cuda). */
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "backend/cuda.h"
#include "backend/impl.h"

/* "cuda": the module loaded at run time (cuda_load.c); its failures name what
 * is missing (module not built, no driver, ...). */
static st_status get_cuda(const st_backend **out) {
  const st__cuda_module *m = NULL;
  st_status s = st__cuda_load(&m);
  if (s != ST_OK) return st_error_prefix(s, "backend 'cuda': ");
  if (!m->backend || !st__backend_table_complete(m->backend))
    return st_error(ST_ERR_NOT_BUILT, "backend 'cuda': the loaded CUDA module has no complete "
                    "backend table");
  *out = m->backend;
  return ST_OK;
}

static st_status get_cpu(const st_backend **out) {
  *out = st_backend_cpu();
  return ST_OK;
}

static st_status get_reference(const st_backend **out) {
  *out = st_backend_reference();
  return ST_OK;
}

static const struct {
  const char *name;
  st_status (*get)(const st_backend **out);
} backends[] = {
    {"cpu", get_cpu},
    {"reference", get_reference},
    {"cuda", get_cuda},
};

/* Any thread. *out is set only on success. */
st_status st_backend_get(const char *name, const st_backend **out) {
  if (!name || !out)
    return st_error(ST_ERR_INVALID, "st_backend_get: NULL name or out");
  for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
    if (strcmp(name, backends[i].name) == 0) return backends[i].get(out);
  return st_error(ST_ERR_INVALID,
                  "unknown backend '%s' (valid: cpu, reference, cuda)", name);
}

bool st__backend_table_complete(const st_backend *be) {
  const unsigned char *base = (const unsigned char *)be;
  for (size_t off = offsetof(st_backend, alloc); off < sizeof *be; off += sizeof(st__any_fn)) {
    st__any_fn f;
    memcpy(&f, base + off, sizeof f);
    if (!f) return false;
  }
  return true;
}

/* Any thread. *out is NULL on failure. The common part is ours; the
 * backend's own part (the optional ctx_create slot) hangs from ctx->impl. */
st_status st_backend_ctx_create(const st_backend *be, int device_index,
                                int threads, st_backend_ctx **out) {
  ST_REQUIRE(be);
  ST_REQUIRE(out);
  *out = NULL;
  if (device_index < 0 || threads < 0)
    return st_error(ST_ERR_INVALID, "st_backend_ctx_create: device %d, threads %d (must be >= 0)",
                    device_index, threads);
  st_backend_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx)
    return st_error(ST_ERR_NOMEM, "%s:%d: out of memory for a backend context",
                    be->name, device_index);
  ctx->be = be;
  ctx->device_index = device_index;
  ctx->threads = threads;
  st_status s = ST_OK;
  if (be->ctx_create && (s = be->ctx_create(device_index, threads, &ctx->impl)) != ST_OK)
    goto fail_impl;
  *out = ctx;
  return ST_OK;
fail_impl:
  free(ctx);
  return s;
}

/* The thread that owns ctx, once no kernel runs on it. */
void st_backend_ctx_destroy(st_backend_ctx *ctx) {
  if (!ctx) return;
  if (ctx->be->ctx_destroy) ctx->be->ctx_destroy(ctx->impl);
  free(ctx);
}
