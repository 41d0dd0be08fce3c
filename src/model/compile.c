/* compile: validate the loss against the model's output, allocate the net's
 * variables and optimizer slots, initialise the weights from the seed, and
 * attach the strategy to the net (creating the default one-device strategy
 * when none was given); destroy, which undoes it. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/vmem.h"
#include "distribute/strategy.h"
#include "model/model.h"

st_compile_options st_compile_default_options(void) {
  st_compile_options o;
  memset(&o, 0, sizeof o);
  o.optimizer = st_optimizer_default_options(ST_OPT_ADAM);
  o.loss = ST_LOSS_SPARSE_CE; /* Keras's string losses: from_logits=False */
  o.nmetrics = 1;
  o.metrics[0] = ST_METRIC_ACCURACY;
  return o;
}


/* Several outputs: one loss and weight per output, each output rank 1, and
 * a strategy that runs them (the reductions across processes and the
 * pipeline's stages carry one output). */
static st_status check_outputs(const st_model *m, const st_compile_options *o) {
  int n = m->net.n_outputs > 1 ? m->net.n_outputs : 1;
  if (o->nlosses != 0 && o->nlosses != n)
    return st_error(ST_ERR_INVALID, "st_model_compile: o->nlosses is %d; the model has %d "
                    "output%s (give one loss per output, or 0: o->loss for each)", o->nlosses, n,
                    n > 1 ? "s" : "");
  if (o->nloss_weights != 0 && (o->nloss_weights != n || n == 1))
    return st_error(ST_ERR_INVALID, "st_model_compile: o->nloss_weights is %d; the model has %d "
                    "output%s (%s)", o->nloss_weights, n, n > 1 ? "s" : "",
                    n > 1 ? "give one weight per output, or 0: 1 each" : "weights need several");
  for (int j = 0; j < o->nlosses; j++)
    if ((unsigned)o->losses[j] >= ST_LOSS_COUNT)
      return st_error(ST_ERR_INVALID, "st_model_compile: o->losses[%d] = %d out of range", j,
                      (int)o->losses[j]);
  for (int j = 0; j < o->nloss_weights; j++)
    if (!(o->loss_weights[j] >= 0.0f) || o->loss_weights[j] > 1e30f)
      return st_error(ST_ERR_INVALID, "st_model_compile: o->loss_weights[%d] = %g (must be "
                      "finite and >= 0)", j, (double)o->loss_weights[j]);
  if (n == 1) return ST_OK;
  for (int j = 0; j < n; j++) {
    const st_net *net = &m->net;
    st_shape sh = st__net_tensor_shape(net, net->outputs[j]);
    const st_layer *l = net->layers[net->nodes[net->outputs[j]].layer];
    if (sh.rank != 1)
      return st_error(ST_ERR_INVALID, "compile: output %d (layer '%s') is %s: each output must "
                      "be rank 1 (add Flatten)", j, l->name,
                      st_shape_format(sh, (char[64]){0}, 64));
  }
  st_strategy_kind k = m->strategy ? m->strategy->opts.kind : ST_STRATEGY_ONE_DEVICE;
  if (k == ST_STRATEGY_MULTI_WORKER_MIRRORED || k == ST_STRATEGY_PARAMETER_SERVER ||
      k == ST_STRATEGY_PIPELINE)
    return st_error(ST_ERR_INVALID, "st_model_compile: a model of %d outputs does not run under "
                    "the %s strategy (one_device, mirrored and central_storage run it)", n,
                    st_strategy_kind_name(k));
  return ST_OK;
}

/* The net's per-output losses and weights from o (several outputs). */
static void set_output_losses(st_net *n, const st_compile_options *o) {
  if (o->nlosses == 1 && n->n_outputs <= 1) n->loss = o->losses[0];
  for (int j = 0; j < n->n_outputs; j++) {
    n->out_loss[j] = o->nlosses ? o->losses[j] : o->loss;
    n->out_weight[j] = o->nloss_weights ? o->loss_weights[j] : 1.0f;
  }
  if (n->n_outputs > 1) n->loss = n->out_loss[0];
}
static st_status check_compile(const st_model *m, const st_compile_options *o) {
  st_status s = st__model_check(m, "st_model_compile", false);
  if (s != ST_OK) return s;
  if (!o) return st_error(ST_ERR_INVALID, "st_model_compile: o is NULL");
  if (m->add_error[0])
    return st_error(ST_ERR_INVALID, "st_model_compile: %s", m->add_error);
  if (m->net.nlayers == 0) return st_error(ST_ERR_INVALID, "compile: the model has no layers");
  if (o->loss < 0 || o->loss >= ST_LOSS_COUNT)
    return st_error(ST_ERR_INVALID, "compile: loss kind %d out of range", (int)o->loss);
  if (o->optimizer.kind < 0 || o->optimizer.kind >= ST_OPT_COUNT)
    return st_error(ST_ERR_INVALID, "compile: optimizer kind %d out of range",
                    (int)o->optimizer.kind);
  if (!(o->optimizer.lr.initial > 0.0f))
    return st_error(ST_ERR_INVALID, "compile: learning rate %g (must be > 0)",
                    (double)o->optimizer.lr.initial);
  if ((s = st_schedule_check(&o->optimizer.lr)) != ST_OK)
    return st_error_prefix(s, "st_model_compile: o->optimizer.lr: ");
  if (o->nmetrics < 0 || o->nmetrics > 4)
    return st_error(ST_ERR_INVALID, "compile: %d metrics (at most 4)", o->nmetrics);
  for (int i = 0; i < o->nmetrics; i++)
    if ((unsigned)o->metrics[i] >= ST_METRIC_COUNT)
      return st_error(ST_ERR_INVALID, "st_model_compile: o->metrics[%d] = %d out of range", i,
                      (int)o->metrics[i]);
  if ((s = check_outputs(m, o)) != ST_OK) return s;
  st_shape out = st_model_output_shape(m);
  /* sparse losses take any rank: one class index per position of the last
   * axis (a language model's [T, vocab] with [T] labels), as Keras */
  if (out.rank != 1 && !st_loss_is_sparse(o->loss))
    return st_error(ST_ERR_INVALID, "compile: model output %s must be rank 1 (add Flatten; "
                    "sparse losses take any rank: classes on the last axis)",
                    st_shape_format(out, (char[64]){0}, 64));
  return ST_OK;
}

/* The net's variables and optimizer slots (kind from m->optimizer; none
 * under shard_optimizer: the strategy keeps each replica's shard, the net's
 * slots are only staged for checkpoints, distribute/shard.h). */
static st_status alloc_vars(st_net *m, bool sharded) {
  const st_backend *be = m->be;
  size_t np = (m->n_params ? m->n_params : 1) * sizeof(float);
  size_t ns = (m->n_state ? m->n_state : 1) * sizeof(float);
  m->params = be->alloc(m->be_ctx, np);
  m->state = be->alloc(m->be_ctx, ns);
  if (!m->params || !m->state) return ST_ERR_NOMEM;
  m->n_slots = st_optimizer_slot_count(&m->optimizer);
  for (int i = 0; i < m->n_slots && !sharded; i++) {
    m->slots[i] = be->alloc(m->be_ctx, np);
    if (!m->slots[i]) return ST_ERR_NOMEM;
    be->fill(m->be_ctx, m->n_params, 0.0f, m->slots[i]);
  }
  /* Initialise on the host, then copy to the device. */
  float *hp = calloc(m->n_params + 1, sizeof(float));
  float *hs = calloc(m->n_state + 1, sizeof(float));
  if (!hp || !hs) {
    free(hp);
    free(hs);
    return ST_ERR_NOMEM;
  }
  st__net_init_variables(m, hp, hs);
  st__be_to_device(m->be_ctx, m->params, hp, m->n_params * sizeof(float));
  st__be_to_device(m->be_ctx, m->state, hs, m->n_state * sizeof(float));
  free(hp);
  free(hs);
  return ST_OK;
}

/* The backend (cuda when the strategy's devices are GPUs, else
 * $STRATA_BACKEND or cpu) and the net's own context (replica 0's device)
 * for work on its variables; each replica makes its own. */
static st_status pick_backend(st_net *m, const st_strategy *strategy) {
  const char *name = getenv("STRATA_BACKEND");
  bool gpus = strategy && strategy->on_gpus;
  if (gpus) memcpy(m->replica_device, strategy->gpu_of, sizeof m->replica_device);
  st_status s = st_backend_get(gpus ? "cuda" : name && *name ? name : "cpu", &m->be);
  if (s != ST_OK) return s;
  for (int i = 0; i < m->nlayers; i++) m->layers[i]->device_memory = !st__be_is_host(m->be);
  for (int i = 0; m->be->to_device && i < m->nlayers; i++) /* layer.h: host_loops */
    if (m->layers[i]->vt->host_loops || m->layers[i]->uses_collectives)
      return st_error(ST_ERR_INVALID, "compile: layer '%s' (%s%s) runs on host memory only: "
                      "backend %s has no kernel for it yet (use cpu devices)",
                      m->layers[i]->name, m->layers[i]->vt->class_name,
                      m->layers[i]->uses_collectives ? ", synchronized" : "", m->be->name);
  return st_backend_ctx_create(m->be, m->replica_device[0], 0, &m->be_ctx);
}

/* One warning when the output layer's activation and the loss disagree on
 * logits against probabilities (the loss still runs: a user may mean it). */
static void warn_loss_activation(const st_model *m, st_loss_kind loss) {
  const st_layer *l = NULL;
  for (int k = m->net.output; k >= 0; k = m->net.nodes[k].in[0]) { /* past layers that keep values */
    l = m->net.layers[m->net.nodes[k].layer];
    if (strcmp(l->vt->class_name, "Dropout") != 0 && strcmp(l->vt->class_name, "Flatten") != 0)
      break;
  }
  st_activation act = st_layer_output_activation(l);
  bool sets_act = l && (l->out_activation != ST_ACT_LINEAR ||
                        strcmp(l->vt->class_name, "Dense") == 0 ||
                        strcmp(l->vt->class_name, "Conv2D") == 0 ||
                        strcmp(l->vt->class_name, "Conv1D") == 0 ||
                        strcmp(l->vt->class_name, "DepthwiseConv2D") == 0 ||
                        strcmp(l->vt->class_name, "Activation") == 0);
  if (act == ST_ACT_SOFTMAX && (loss == ST_LOSS_SPARSE_CE_LOGITS || loss == ST_LOSS_CE_LOGITS))
    st_log(ST_LOG_WARN,
           "st_model_compile: the last layer applies softmax but the loss expects logits "
           "(from_logits): softmax is applied twice; use %s",
           loss == ST_LOSS_CE_LOGITS ? "ST_LOSS_CE" : "ST_LOSS_SPARSE_CE");
  else if (sets_act && act == ST_ACT_LINEAR && (loss == ST_LOSS_SPARSE_CE || loss == ST_LOSS_CE))
    st_log(ST_LOG_WARN,
           "st_model_compile: the last layer is linear (outputs logits) but the loss expects "
           "probabilities; use %s (or end the model with softmax)",
           loss == ST_LOSS_CE ? "ST_LOSS_CE_LOGITS" : "ST_LOSS_SPARSE_CE_LOGITS");
}

/* A second compile's new settings: optimizer (iterations 0: schedules and
 * Adam's bias correction restart), loss and metrics; the slots are the
 * caller's to make. */
static void adopt_compile_options(st_model *m, const st_compile_options *o) {
  st_net *n = &m->net;
  m->compile = *o;
  n->optimizer = o->optimizer;
  n->loss = o->loss;
  set_output_losses(n, o);
  n->nmetrics = o->nmetrics;
  memcpy(n->metrics, o->metrics, sizeof n->metrics);
  n->step = 0;
  st__train_position_clear(&m->last_pos);
  n->n_slots = st_optimizer_slot_count(&n->optimizer);
}

/* recompile of a net whose variables are reserved (a pipeline stage across
 * processes, base/vmem.h): the four slot layouts stay reserved; the new
 * optimizer's slots are the stage's share again, zero. The strategy stays
 * attached: a stage's buffers and transports do not depend on the
 * optimizer, and detaching would free the MPI communicators while the
 * peers' LEAVE messages may still be in flight, then duplicate new ones
 * (MPI_Comm_dup hung in 3 runs of 4: tests/test_pipeline_recompile_mpi.c). */
static st_status recompile_reserved(st_model *m, const st_compile_options *o) {
  st_net *n = &m->net;
  adopt_compile_options(m, o);
  for (int i = 0; i < 4; i++) {
    st__vm_keep_only(n->slots[i], n->n_params, 0, 0);
    st_status s = i < n->n_slots ? st__vm_commit(n->slots[i], n->n_params, n->own_p, n->own_np,
                                                 "the stage's optimizer slots")
                                 : ST_OK;
    if (s != ST_OK) return s;
  }
  st_status s = m->strategy->net == n ? ST_OK : m->strategy->vt->attach(m->strategy, n);
  if (s != ST_OK) return s;
  m->compiled = true;
  return ST_OK;
}

/* A second compile, as Keras's: new optimizer (fresh slots, iterations 0:
 * schedules and Adam's bias correction restart), loss and metrics; the
 * weights and BatchNorm statistics stay. The strategy is detached and
 * attached again so its replicas see the new optimizer. */
static st_status recompile(st_model *m, const st_compile_options *o) {
  st_net *n = &m->net;
  m->compiled = false;
  if (n->reserved) return recompile_reserved(m, o);
  if (m->strategy->net == n) m->strategy->vt->detach(m->strategy);
  for (int i = 0; i < n->n_slots; i++) n->be->free(n->be_ctx, n->slots[i]);
  memset(n->slots, 0, sizeof n->slots); /* NULL: none staged (shard_optimizer) */
  adopt_compile_options(m, o);
  for (int i = 0; i < n->n_slots && !m->strategy->opts.shard_optimizer; i++) {
    n->slots[i] = n->be->alloc(n->be_ctx, (n->n_params ? n->n_params : 1) * sizeof(float));
    if (!n->slots[i]) {
      n->n_slots = i;
      return st_error(ST_ERR_NOMEM, "st_model_compile: out of memory for the optimizer slots");
    }
    n->be->fill(n->be_ctx, n->n_params, 0.0f, n->slots[i]);
  }
  st_status s = m->strategy->vt->attach(m->strategy, n);
  if (s != ST_OK) return s;
  m->compiled = true;
  return ST_OK;
}

/* Issue 31's pieces not wired into every strategy yet: a sparse loss over
 * [T, classes] outputs (st__net_loss) and global_clipnorm (st__clip_grads;
 * the pipeline's: pipeline_clip.c) are refused, naming both, where the
 * strategy's step would not honour them. */
static st_status check_strategy_fits(const st_model *m) {
  st_strategy_kind k = m->strategy->opts.kind;
  bool ps = k == ST_STRATEGY_PARAMETER_SERVER;
  if (ps && st__net_loss_positions(&m->net) > 1)
    return st_error(ST_ERR_INVALID, "compile: a sparse loss over positions (output [%d, %d]) is "
                    "not supported by the %s strategy yet", (int)st__net_loss_positions(&m->net),
                    st__net_loss_cols(&m->net), st_strategy_kind_name(k));
  if (m->net.optimizer.global_clipnorm > 0.0f && (ps || m->strategy->opts.shard_optimizer))
    return st_error(ST_ERR_INVALID, "compile: optimizer.global_clipnorm is not supported by the "
                    "%s strategy%s yet", st_strategy_kind_name(k),
                    m->strategy->opts.shard_optimizer ? " with shard_optimizer" : "");
  return ST_OK;
}

st_status st_model_compile(st_model *m, const st_compile_options *o) {
  st_status s = check_compile(m, o);
  if (s != ST_OK) return s;
  if (m->net.n_outputs <= 1) /* several outputs: each its own loss, no one last layer */
    warn_loss_activation(m, o->nlosses == 1 ? o->losses[0] : o->loss);
  if (m->compiled) return recompile(m, o);
  m->compile = *o;
  m->net.optimizer = o->optimizer;
  m->net.loss = o->loss;
  set_output_losses(&m->net, o);
  m->net.nmetrics = o->nmetrics;
  memcpy(m->net.metrics, o->metrics, sizeof m->net.metrics);
  /* the refusals first: nothing allocated yet, so a compile after one
   * starts afresh (the default strategy made below refuses nothing) */
  if (m->strategy && m->strategy->net)
    return st_error(ST_ERR_INVALID, "compile: the strategy is already bound to another model");
  if (m->strategy && (s = check_strategy_fits(m)) != ST_OK) return s;
  if ((s = pick_backend(&m->net, m->strategy)) != ST_OK) return s;
  if (m->net.n_outputs > 1 && m->net.be->to_device)
    return st_error(ST_ERR_INVALID, "st_model_compile: a model of several outputs runs on the "
                    "cpu backend only (backend %s)", m->net.be->name);
  bool placed = false; /* by the strategy (a pipeline stage: its share) */
  if ((s = st__vars_place(m->strategy, &m->net, &placed)) != ST_OK) return s;
  if (!placed && (s = alloc_vars(&m->net, m->strategy && m->strategy->opts.shard_optimizer)) != ST_OK &&
      !st__be_is_host(m->net.be)) /* the device's message says which and how much */
    return st_error_prefix(s, "compile: %zu parameters: ", m->net.n_params);
  if (s != ST_OK && !placed)
    return st_error(s, "compile: out of memory for %zu parameters (%zu bytes of variables and "
                    "%d optimizer slots)", m->net.n_params,
                    (m->net.n_params * (size_t)(1 + st_optimizer_slot_count(&m->net.optimizer)) +
                     m->net.n_state) * sizeof(float), st_optimizer_slot_count(&m->net.optimizer));
  if (m->pending_vars && m->net.reserved) { /* only the stage's share */
    st__be_to_device(m->net.be_ctx, m->net.params + m->net.own_p,
                     m->pending_vars + m->net.own_p, m->net.own_np * sizeof(float));
    st__be_to_device(m->net.be_ctx, m->net.params + m->net.tie_p, /* a tied table (net.h) */
                     m->pending_vars + m->net.tie_p, m->net.tie_np * sizeof(float));
    st__be_to_device(m->net.be_ctx, m->net.state + m->net.own_s,
                     m->pending_vars + m->net.n_params + m->net.own_s,
                     m->net.own_ns * sizeof(float));
    free(m->pending_vars);
    m->pending_vars = NULL;
  }
  if (m->pending_vars) { /* st_model_load_weights before compile */
    st__be_to_device(m->net.be_ctx, m->net.params, m->pending_vars,
                     m->net.n_params * sizeof(float));
    st__be_to_device(m->net.be_ctx, m->net.state, m->pending_vars + m->net.n_params,
                     m->net.n_state * sizeof(float));
    free(m->pending_vars);
    m->pending_vars = NULL;
  }
  if (!m->strategy) {
    st_strategy_options so = st_strategy_default_options(ST_STRATEGY_ONE_DEVICE);
    if ((s = st_strategy_create(&so, &m->strategy)) != ST_OK) return s;
    m->owns_strategy = true;
  }
  int threads = m->strategy->opts.threads;
  st_blas_init(threads);
  if ((s = m->strategy->vt->attach(m->strategy, &m->net)) != ST_OK) return s;
  m->compiled = true;
  return ST_OK;
}

/* The net's layers and variables. */
static void free_net(st_net *m) {
  for (int i = 0; i < m->nlayers; i++) st__layer_free(m->layers[i]);
  free(m->layers);
  free(m->nodes);
  if (m->be_ctx && m->reserved) {
    st__vm_release(m->params, m->n_params);
    st__vm_release(m->state, m->n_state);
    for (int i = 0; i < 4; i++) st__vm_release(m->slots[i], m->n_params);
    st_backend_ctx_destroy(m->be_ctx);
  } else if (m->be_ctx) {
    m->be->free(m->be_ctx, m->params);
    m->be->free(m->be_ctx, m->state);
    for (int i = 0; i < m->n_slots; i++) m->be->free(m->be_ctx, m->slots[i]);
    st_backend_ctx_destroy(m->be_ctx);
  }
}

/* Unbinds the strategy first (its replicas reference the net's variables),
 * so model and strategy may be destroyed in either order. */
void st_model_destroy(st_model *m) {
  if (!m) return;
  if (m->strategy && m->strategy->net == &m->net) m->strategy->vt->detach(m->strategy);
  free_net(&m->net);
  for (int j = 0; j < m->n_input_nodes; j++) free(m->input_nodes[j]);
  if (m->owns_strategy) st_strategy_destroy(m->strategy); /* freed once unheld */
  if (m->holds_strategy) st__strategy_release(m->strategy); /* frees it if destroyed */
  st__train_position_clear(&m->last_pos);
  free(m->pending_vars);
  free(m);
}

/* Training control read and set by callbacks during fit. */
void st_model_stop_training(st_model *m) {
  if (m) m->stop_training = true;
}

double st_model_learning_rate(const st_model *m) {
  return m ? st_schedule_lr(&m->net.optimizer.lr, m->net.step) : 0.0;
}

/* The optimizer keeps the rate as a float: it must stay finite and > 0. */
st_status st_model_set_learning_rate(st_model *m, double lr) {
  if (!m) return st_error(ST_ERR_INVALID, "st_model_set_learning_rate: m is NULL");
  if (!isfinite(lr) || lr <= 0 || lr > FLT_MAX || (float)lr <= 0.0f)
    return st_error(ST_ERR_INVALID, "learning rate %g (must be finite and > 0 as a float)", lr);
  m->net.optimizer.lr = st_schedule_constant((float)lr);
  return ST_OK;
}

void st__train_position_clear(st_train_position *p) {
  free(p->logs);
  memset(p, 0, sizeof *p);
}
