/* GPT probe for tests/test_gpt_torch.sh (a test helper, not installed): a GPT
 * of the given config with GPT-2's initialisation, one batch of random
 * tokens, written for the PyTorch twin (tests/gpt_torch_check.py):
 *   OUT/tokens.i32   B*T+1 token ids (int32): row b of the batch is x =
 *                    tokens [b T, b T + T), y = the next tokens (llm.c's loader)
 *   OUT/init.bin     the initial weights (llm.c checkpoint)
 *   OUT/grads.bin    the gradients of the mean loss on the batch, in the
 *                    same layout (llm.c checkpoint of the gradients)
 *   OUT/logits.f32   the initial model's logits on the batch, float32 [B, T, V]
 *   OUT/final.bin    the weights after K AdamW steps (torch form) on it
 *   stdout           "loss0 X" then "step k loss X" for each step
 * Usage: gpt_probe L H C T V B K LR WD CLIP OUTDIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "nn/net.h"
#include "strata/strata.h"

static int fail(const char *what) {
  fprintf(stderr, "gpt_probe: %s: %s\n", what, st_last_error());
  return 1;
}

static st_status on_epoch(void *user, st_model *m, const st_epoch_logs *l) {
  (void)user, (void)m;
  printf("step %d loss %.9g\n", l->epoch, l->loss);
  return ST_OK;
}

/* The gradients of the mean loss of batch (x, y) into grads.bin. */
static int write_grads(st_model *m, const st_gpt_config *g, const float *x, const float *y,
                       int B, const char *dir) {
  st_replica *r = NULL;
  if (st__replica_create(&m->net, m->net.be, 0, B, m->net.params, m->net.state, &r) != ST_OK)
    return fail("replica");
  st__replica_forward(&m->net, r, x, B, true, 0);
  double loss = st__replica_loss_backward(&m->net, r, x, y, B, B, 0, NULL, NULL);
  printf("loss0 %.9g\n", loss / B);
  size_t n = st_model_weights_size(m);
  float *w = malloc(n * sizeof *w), *gw = calloc(n, sizeof *gw);
  memcpy(gw, r->grads, m->net.n_params * sizeof(float));
  char path[4096];
  snprintf(path, sizeof path, "%s/grads.bin", dir);
  int rc = st_model_get_weights(m, w) != ST_OK || st_model_set_weights(m, gw) != ST_OK ||
           st_gpt_save_llmc(m, g, path) != ST_OK || st_model_set_weights(m, w) != ST_OK;
  free(w), free(gw);
  st__replica_destroy(r);
  return rc ? fail("grads.bin") : 0;
}

int main(int argc, char **argv) {
  if (argc != 12) {
    fprintf(stderr, "usage: gpt_probe L H C T V B K LR WD CLIP OUTDIR\n");
    return 2;
  }
  st_gpt_config g = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5])};
  int B = atoi(argv[6]), K = atoi(argv[7]), T = g.seq_len;
  const char *dir = argv[11];
  st_model_options mo = st_model_default_options(st_shape1(T));
  st_model *m = NULL;
  if (st_gpt_create(&g, &mo, &m) != ST_OK) return fail("st_gpt_create");
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS;
  co.optimizer = st_optimizer_default_options(ST_OPT_ADAMW);
  co.optimizer.torch_form = true;
  co.optimizer.epsilon = 1e-8f;
  co.optimizer.lr = st_schedule_constant((float)atof(argv[8]));
  co.optimizer.weight_decay = (float)atof(argv[9]);
  co.optimizer.global_clipnorm = (float)atof(argv[10]);
  if (st_model_compile(m, &co) != ST_OK || st_gpt_init_weights(m, 1) != ST_OK) return fail("compile");
  int ntok = B * T + 1;
  int32_t *tok = malloc((size_t)ntok * sizeof *tok);
  float *x = malloc((size_t)B * T * sizeof *x), *y = malloc((size_t)B * T * sizeof *y);
  st_rng rng = st_rng_make(42, 0);
  for (int i = 0; i < ntok; i++) tok[i] = (int32_t)st_rng_below(&rng, (uint64_t)g.vocab);
  for (int i = 0; i < B * T; i++) x[i] = (float)tok[i], y[i] = (float)tok[i + 1];
  char path[4096];
  snprintf(path, sizeof path, "%s/tokens.i32", dir);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(tok, sizeof *tok, (size_t)ntok, f) != (size_t)ntok || fclose(f)) return fail(path);
  snprintf(path, sizeof path, "%s/init.bin", dir);
  if (st_gpt_save_llmc(m, &g, path) != ST_OK) return fail(path);
  if (write_grads(m, &g, x, y, B, dir)) return 1;
  st_tensor xt = {ST_F32, 2, {B, T}, x}, yt = {ST_F32, 2, {B, T}, y};
  st_dataset *ds = NULL;
  if (st_dataset_from_tensor_slices(&xt, &yt, 1.0f, true, &ds) != ST_OK ||
      st_dataset_batch(ds, B, false, &ds) != ST_OK)
    return fail("dataset");
  st_tensor lg = {0};
  snprintf(path, sizeof path, "%s/logits.f32", dir);
  size_t nl = (size_t)B * (size_t)T * (size_t)g.vocab;
  if (st_model_predict(m, ds, &lg) != ST_OK) return fail("predict");
  f = fopen(path, "wb");
  if (!f || fwrite(lg.data, sizeof(float), nl, f) != nl || fclose(f)) return fail(path);
  st_tensor_destroy(&lg);
  st_callback cb = {.on_epoch_end = on_epoch};
  st_fit_options fo = st_fit_default_options();
  fo.epochs = K;
  fo.callbacks = &cb;
  fo.ncallbacks = 1;
  st_history h = {0};
  if (st_model_fit(m, ds, &fo, &h) != ST_OK) return fail("fit");
  snprintf(path, sizeof path, "%s/final.bin", dir);
  if (st_gpt_save_llmc(m, &g, path) != ST_OK) return fail(path);
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  st_model_destroy(m);
  free(tok), free(x), free(y);
  return 0;
}
