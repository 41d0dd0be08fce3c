/* The public API's two conventions, checked across every callback kind and
 * every destroy: (1) one function frees any callback — st_callback_destroy on
 * the progress, CSVLogger, EarlyStopping, LearningRateScheduler,
 * ModelCheckpoint and TensorBoard callbacks, on a hand-made one, on a zeroed
 * one and on NULL (valgrind/ASan builds catch a leak or a bad free); (2) a
 * fallible call returns st_status with a message and writes its result through
 * an out-pointer (zeroed on failure): every callback constructor and every
 * layer constructor on bad input, st_model_summary, st_model_set_learning_rate
 * (the dataset transforms: test_data.c); every _destroy accepts NULL. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "strata/strata.h"

static char g_dir[] = "/tmp/strata_test_api_XXXXXX";

static bool is_zeroed(const st_callback *cb) {
  static const st_callback zero;
  return memcmp(cb, &zero, sizeof zero) == 0;
}

/* Destroys cb, checks it is zeroed, and destroys it again (harmless). */
static void destroy_twice(st_callback *cb, const char *what) {
  st_callback_destroy(cb);
  CHECK_MSG(is_zeroed(cb), "%s: not zeroed by st_callback_destroy", what);
  st_callback_destroy(cb);
}

/* The status and message of a failed constructor, and its zeroed output. */
static void check_refused(st_status s, const st_callback *cb, st_status want,
                          const char *needle, const char *what) {
  CHECK_MSG(s == want, "%s: got %s, want %s", what, st_status_string(s),
            st_status_string(want));
  CHECK_MSG(strstr(st_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
            st_last_error(), needle);
  CHECK_MSG(is_zeroed(cb), "%s: output not zeroed on failure", what);
}

static double keep_lr(void *user, int epoch, double lr) {
  (void)user, (void)epoch;
  return lr;
}

static int g_destroyed;
static void count_destroy(void *user) {
  CHECK(user == &g_destroyed);
  g_destroyed++;
}

static void test_every_kind_destroyed(void) {
  char path[512];
  st_callback cb;
  FILE *sink = fopen("/dev/null", "w");
  CHECK(sink != NULL);
  if (sink) {
    CHECK_OK(st_progress_create(sink, false, 3, &cb));
    CHECK(cb.user && cb.destroy && cb.on_epoch_end);
    destroy_twice(&cb, "progress");
  }
  snprintf(path, sizeof path, "%s/log.csv", g_dir);
  CHECK_OK(st_csv_logger_create(path, &cb));
  CHECK(cb.user && cb.destroy);
  destroy_twice(&cb, "CSVLogger");
  st_early_stopping_options eo = st_early_stopping_default_options();
  eo.restore_best_weights = true;
  CHECK_OK(st_early_stopping_create(eo, &cb));
  CHECK(cb.user && cb.destroy);
  destroy_twice(&cb, "EarlyStopping");
  CHECK_OK(st_lr_scheduler_create(keep_lr, NULL, &cb));
  CHECK(cb.user && cb.destroy);
  destroy_twice(&cb, "LearningRateScheduler");
  snprintf(path, sizeof path, "%s/ckpt", g_dir);
  CHECK_OK(st_model_checkpoint_create(path, "loss", true, 2, &cb));
  CHECK(cb.user && cb.destroy);
  destroy_twice(&cb, "ModelCheckpoint");
  st_tensorboard *tb = NULL;
  snprintf(path, sizeof path, "%s/tb", g_dir);
  CHECK_OK(st_tensorboard_create(path, &tb));
  if (tb) {
    CHECK_OK(st_tensorboard_callback_create(tb, 1, &cb));
    CHECK(cb.user && cb.destroy);
    destroy_twice(&cb, "TensorBoard");
  }
  st_tensorboard_destroy(tb); /* after its callback: the callback borrows it */
  /* a hand-made callback's destroy runs once; zeroed and NULL are no-ops */
  st_callback own = {.user = &g_destroyed, .destroy = count_destroy};
  destroy_twice(&own, "hand-made");
  CHECK(g_destroyed == 1);
  st_callback zero = {0};
  st_callback_destroy(&zero);
  st_callback_destroy(NULL);
  if (sink) fclose(sink);
}

static void test_constructors_refuse_bad_input(void) {
  st_callback cb;
  check_refused(st_progress_create(NULL, false, 1, &cb), &cb, ST_ERR_INVALID, "stream",
                "progress without a stream");
  check_refused(st_csv_logger_create(NULL, &cb), &cb, ST_ERR_INVALID, "CSVLogger",
                "CSVLogger NULL path");
  check_refused(st_csv_logger_create("", &cb), &cb, ST_ERR_INVALID, "CSVLogger",
                "CSVLogger empty path");
  st_early_stopping_options eo = st_early_stopping_default_options();
  eo.monitor = "val_acc";
  check_refused(st_early_stopping_create(eo, &cb), &cb, ST_ERR_INVALID, "'val_acc'",
                "EarlyStopping unknown monitor");
  eo = st_early_stopping_default_options();
  eo.patience = -1;
  check_refused(st_early_stopping_create(eo, &cb), &cb, ST_ERR_INVALID, "patience -1",
                "EarlyStopping negative patience");
  check_refused(st_lr_scheduler_create(NULL, NULL, &cb), &cb, ST_ERR_INVALID,
                "no schedule function", "LearningRateScheduler without fn");
  check_refused(st_model_checkpoint_create(NULL, NULL, false, 1, &cb), &cb, ST_ERR_INVALID,
                "no directory", "ModelCheckpoint NULL dir");
  check_refused(st_model_checkpoint_create(g_dir, "val_acc", true, 1, &cb), &cb,
                ST_ERR_INVALID, "'val_acc'", "ModelCheckpoint unknown monitor");
  char *longdir = malloc(5000);
  if (longdir) {
    memset(longdir, 'd', 4999);
    longdir[4999] = 0;
    check_refused(st_model_checkpoint_create(longdir, NULL, false, 1, &cb), &cb,
                  ST_ERR_INVALID, "4999 bytes", "ModelCheckpoint long dir");
    free(longdir);
  }
  /* the monitor only matters with save_best_only (as in Keras) */
  CHECK_OK(st_model_checkpoint_create(g_dir, "val_acc", false, 1, &cb));
  st_callback_destroy(&cb);
  check_refused(st_tensorboard_callback_create(NULL, 0, &cb), &cb, ST_ERR_INVALID,
                "no event writer", "TensorBoard callback without writer");
  st_tensorboard *tb = NULL;
  char path[512];
  snprintf(path, sizeof path, "%s/tb2", g_dir);
  CHECK_OK(st_tensorboard_create(path, &tb));
  if (tb)
    check_refused(st_tensorboard_callback_create(tb, -1, &cb), &cb, ST_ERR_INVALID,
                  "update_freq -1", "TensorBoard callback negative update_freq");
  st_tensorboard_destroy(tb);
}

/* CSVLogger opens its file at the first epoch's end (Keras opens it at
 * on_train_begin), so a path in a missing directory is accepted at create
 * and reported by the hook, naming the path. */
static void test_csv_logger_missing_dir(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/no/such/dir/log.csv", g_dir);
  st_callback cb;
  CHECK_OK(st_csv_logger_create(path, &cb));
  st_epoch_logs l = {.epoch = 0, .loss = 1.0, .accuracy = 0.5, .lr = 0.01};
  CHECK_OK(cb.on_epoch_begin(cb.user, NULL, 0));
  CHECK(cb.on_epoch_end(cb.user, NULL, &l) == ST_ERR_IO);
  CHECK_MSG(strstr(st_last_error(), path) != NULL, "%s", st_last_error());
  st_callback_destroy(&cb);
}

static void test_model_calls(void) {
  char *text = (char *)"untouched";
  CHECK(st_model_summary(NULL, &text) == ST_ERR_INVALID && text == NULL);
  st_model_options mo = st_model_default_options(st_shape1(4));
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&mo, &m));
  if (!m) return;
  st_layer *l = NULL;
  CHECK_OK(st_dense(2, ST_ACT_LINEAR, &l));
  CHECK_OK(st_model_add(m, l));
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  CHECK_OK(st_model_compile(m, &co));
  CHECK_OK(st_model_summary(m, &text));
  CHECK(text && strstr(text, "Total params: 10"));
  free(text);
  CHECK_OK(st_model_set_learning_rate(m, 0.5));
  CHECK_NEAR(st_model_learning_rate(m), 0.5, 0);
  const double bad[4] = {0.0, -1.0, NAN, 1e300};
  for (int i = 0; i < 4; i++) {
    CHECK(st_model_set_learning_rate(m, bad[i]) == ST_ERR_INVALID);
    CHECK_MSG(strstr(st_last_error(), "learning rate") != NULL, "%s", st_last_error());
    CHECK_NEAR(st_model_learning_rate(m), 0.5, 0); /* unchanged */
  }
  st_model_destroy(m);
}

/* Each layer constructor refuses a bad option with ST_ERR_INVALID, a message
 * naming it, and *out = NULL. */
static void check_layer_refused(st_status s, st_layer *l, const char *needle, const char *what) {
  CHECK_MSG(s == ST_ERR_INVALID, "%s: got %s", what, st_status_string(s));
  CHECK_MSG(strstr(st_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
            st_last_error(), needle);
  CHECK_MSG(l == NULL, "%s: *out not NULL on failure", what);
}

static void test_layer_constructors(void) {
  st_layer *l = NULL;
  check_layer_refused(st_dense(0, ST_ACT_RELU, &l), l, "units", "Dense units 0");
  check_layer_refused(st_conv2d(0, 3, ST_ACT_RELU, &l), l, "filters", "Conv2D filters 0");
  check_layer_refused(st_maxpool2d(0, &l), l, "pool size", "MaxPooling2D pool 0");
  check_layer_refused(st_avgpool2d(-1, &l), l, "pool size", "AveragePooling2D pool -1");
  check_layer_refused(st_dropout(1.5f, &l), l, "rate", "Dropout rate 1.5");
  check_layer_refused(st_activation_layer((st_activation)999, &l), l, "999", "Activation 999");
  st_shape bad = {.rank = 0};
  check_layer_refused(st_reshape(bad, &l), l, "rank", "Reshape rank 0");
  st_batchnorm_options bo = st_batchnorm_default_options();
  bo.epsilon = 0;
  check_layer_refused(st_batchnorm_ex(bo, &l), l, "epsilon", "BatchNormalization epsilon 0");
  st_dense_options dn = st_dense_default_options(4);
  char longname[200];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  dn.name = longname;
  check_layer_refused(st_dense_ex(dn, &l), l, "longer than", "Dense long name");
  CHECK_OK(st_flatten(&l));
  CHECK(l != NULL);
  st_layer_destroy(l);
  l = NULL;
  /* issue 28, helper B: Conv1D, DepthwiseConv2D, Embedding, LayerNormalization, Conv2D */
  st_conv1d_options c1 = st_conv1d_default_options(4, 0);
  check_layer_refused(st_conv1d_ex(c1, &l), l, "kernel_size", "Conv1D kernel_size 0");
  c1 = st_conv1d_default_options(0, 3);
  check_layer_refused(st_conv1d_ex(c1, &l), l, "filters", "Conv1D filters 0");
  c1 = st_conv1d_default_options(4, 3);
  c1.strides = -1;
  check_layer_refused(st_conv1d_ex(c1, &l), l, "strides", "Conv1D strides -1");
  c1.strides = 1, c1.padding = (st_padding)7;
  check_layer_refused(st_conv1d_ex(c1, &l), l, "padding", "Conv1D padding 7");
  c1.padding = ST_PAD_CAUSAL, c1.kernel_init = (st_init)99;
  check_layer_refused(st_conv1d_ex(c1, &l), l, "kernel_init", "Conv1D init 99");
  CHECK(st_conv1d_ex(st_conv1d_default_options(4, 3), NULL) == ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "out") != NULL);
  st_depthwise_conv2d_options dw = st_depthwise_conv2d_default_options(3, 3);
  dw.depth_multiplier = 0;
  check_layer_refused(st_depthwise_conv2d_ex(dw, &l), l, "depth_multiplier", "Depthwise dm 0");
  dw = st_depthwise_conv2d_default_options(3, 0);
  check_layer_refused(st_depthwise_conv2d_ex(dw, &l), l, "kernel_size", "Depthwise kw 0");
  dw = st_depthwise_conv2d_default_options(3, 3);
  dw.sh = 0;
  check_layer_refused(st_depthwise_conv2d_ex(dw, &l), l, "strides", "Depthwise stride 0");
  dw.sh = 1, dw.padding = ST_PAD_CAUSAL;
  check_layer_refused(st_depthwise_conv2d_ex(dw, &l), l, "padding", "Depthwise causal");
  dw.padding = ST_PAD_SAME, dw.activation = (st_activation)999;
  check_layer_refused(st_depthwise_conv2d_ex(dw, &l), l, "activation", "Depthwise act 999");
  CHECK(st_depthwise_conv2d_ex(st_depthwise_conv2d_default_options(3, 3), NULL) == ST_ERR_INVALID);
  check_layer_refused(st_embedding(0, 4, &l), l, "input_dim", "Embedding input_dim 0");
  check_layer_refused(st_embedding(10, -2, &l), l, "output_dim", "Embedding output_dim -2");
  st_embedding_options eo = st_embedding_default_options(10, 4);
  eo.embeddings_init = ST_INIT_COUNT;
  check_layer_refused(st_embedding_ex(eo, &l), l, "embeddings_init", "Embedding init");
  CHECK(st_embedding(10, 4, NULL) == ST_ERR_INVALID);
  check_layer_refused(st_position_embedding(0, &l), l, "sequence_length", "PositionEmbedding 0");
  st_position_embedding_options po = st_position_embedding_default_options(8);
  po.initializer = ST_INIT_COUNT;
  check_layer_refused(st_position_embedding_ex(po, &l), l, "initializer", "PositionEmbedding init");
  CHECK(st_position_embedding(8, NULL) == ST_ERR_INVALID);
  check_layer_refused(st_reversible_embedding(NULL, &l), l, "embedding is NULL", "ReversibleEmbedding NULL");
  CHECK(st_reversible_embedding(NULL, NULL) == ST_ERR_INVALID);
  st_layernorm_options ln = st_layernorm_default_options();
  ln.epsilon = -1.0f;
  check_layer_refused(st_layernorm_ex(ln, &l), l, "epsilon", "LayerNormalization epsilon -1");
  CHECK(st_layernorm(NULL) == ST_ERR_INVALID);
  st_conv2d_options c2 = st_conv2d_default_options(2, 3, 3);
  c2.padding = ST_PAD_CAUSAL;
  check_layer_refused(st_conv2d_ex(c2, &l), l, "padding", "Conv2D causal");
  CHECK(st_conv2d_ex(st_conv2d_default_options(2, 3, 3), NULL) == ST_ERR_INVALID);
  CHECK_OK(st_layernorm(&l));
  CHECK(l != NULL && strcmp(st_layer_class(l), "LayerNormalization") == 0);
  st_layer_destroy(l);
}

/* ---- issue 28, layers-a: global pooling, ZeroPadding2D, ReLU, LeakyReLU ---- */
static void test_layers_a_constructors(void) {
  st_layer *l = NULL;
  check_layer_refused(st_global_avgpool2d(NULL), NULL, "out", "GlobalAveragePooling2D NULL out");
  check_layer_refused(st_global_maxpool2d(NULL), NULL, "out", "GlobalMaxPooling2D NULL out");
  check_layer_refused(st_global_avgpool1d(NULL), NULL, "out", "GlobalAveragePooling1D NULL out");
  check_layer_refused(st_global_maxpool1d(NULL), NULL, "out", "GlobalMaxPooling1D NULL out");
  st_zeropad2d_options zo = st_zeropad2d_default_options(1);
  zo.left = -1;
  check_layer_refused(st_zeropad2d_ex(zo, &l), l, "left -1", "ZeroPadding2D left -1");
  check_layer_refused(st_zeropad2d(-2, &l), l, "padding", "ZeroPadding2D -2");
  check_layer_refused(st_zeropad2d(1, NULL), NULL, "out", "ZeroPadding2D NULL out");
  st_relu_options ro = st_relu_default_options();
  ro.max_value = -1.0f;
  check_layer_refused(st_relu_ex(ro, &l), l, "max_value", "ReLU max_value -1");
  ro.max_value = NAN;
  check_layer_refused(st_relu_ex(ro, &l), l, "max_value", "ReLU max_value NaN");
  ro = st_relu_default_options();
  ro.negative_slope = -0.1f;
  check_layer_refused(st_relu_ex(ro, &l), l, "negative_slope", "ReLU negative_slope -0.1");
  ro = st_relu_default_options();
  ro.threshold = NAN;
  check_layer_refused(st_relu_ex(ro, &l), l, "threshold", "ReLU threshold NaN");
  check_layer_refused(st_relu_ex(st_relu_default_options(), NULL), NULL, "out", "ReLU NULL out");
  check_layer_refused(st_leaky_relu(-0.3f, &l), l, "negative_slope", "LeakyReLU -0.3");
  check_layer_refused(st_leaky_relu(INFINITY, &l), l, "negative_slope", "LeakyReLU inf");
  check_layer_refused(st_leaky_relu(0.3f, NULL), NULL, "out", "LeakyReLU NULL out");
  /* a wrong input rank is refused when the model builds the layer */
  st_model *m = NULL;
  CHECK_OK(st_sequential_create(&(st_model_options){.input_shape = st_shape1(8)}, &m));
  CHECK_OK(st_global_avgpool2d(&l));
  CHECK(m && st_model_add(m, l) == ST_ERR_INVALID);
  CHECK_MSG(strstr(st_last_error(), "GlobalAveragePooling2D") && strstr(st_last_error(), "(None, 8)"),
            "message: %s", st_last_error());
  CHECK_OK(st_zeropad2d(1, &l));
  CHECK(m && st_model_add(m, l) == ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "ZeroPadding2D") != NULL);
  st_model_destroy(m);
  /* options come back as given */
  ro = st_relu_default_options();
  ro.max_value = 6.0f, ro.threshold = 0.5f;
  CHECK_OK(st_relu_ex(ro, &l));
  st_layer_options lo;
  CHECK_OK(st_layer_get_options(l, &lo));
  CHECK(lo.relu.max_value == 6.0f && lo.relu.threshold == 0.5f && lo.relu.negative_slope == 0);
  CHECK(strcmp(st_layer_class(l), "ReLU") == 0);
  st_layer_destroy(l);
  CHECK_OK(st_leaky_relu(0.25f, &l));
  CHECK_OK(st_layer_get_options(l, &lo));
  CHECK(lo.relu.negative_slope == 0.25f && isinf(lo.relu.max_value));
  st_layer_destroy(l);
  zo = st_zeropad2d_default_options(0);
  zo.bottom = 3;
  CHECK_OK(st_zeropad2d_ex(zo, &l));
  CHECK_OK(st_layer_get_options(l, &lo));
  CHECK(lo.zeropad2d.bottom == 3 && lo.zeropad2d.top == 0 && lo.zeropad2d.name == NULL);
  st_layer_destroy(l);
}
/* ---- end of layers-a ---- */
/* ---- merge layers and attention (issue 28) ---- */
static void test_merge_attention_constructors(void) {
  st_layer *l = NULL;
  check_layer_refused(st_concatenate(0, &l), l, "batch axis", "Concatenate axis 0");
  check_layer_refused(st_concatenate(99, &l), l, "axis 99", "Concatenate axis 99");
  check_layer_refused(st_multi_head_attention(0, 4, &l), l, "num_heads 0", "MHA heads 0");
  check_layer_refused(st_multi_head_attention(2, -1, &l), l, "key_dim -1", "MHA key_dim -1");
  st_mha_options o = st_multi_head_attention_default_options(2, 4);
  o.value_dim = -1;
  check_layer_refused(st_multi_head_attention_ex(o, &l), l, "value_dim -1", "MHA value_dim");
  o = st_multi_head_attention_default_options(2, 4);
  o.output_dim = -2;
  check_layer_refused(st_multi_head_attention_ex(o, &l), l, "output_shape -2", "MHA output");
  o = st_multi_head_attention_default_options(2, 4);
  o.dropout = NAN;
  check_layer_refused(st_multi_head_attention_ex(o, &l), l, "dropout", "MHA dropout NaN");
  o.dropout = 1.0f;
  check_layer_refused(st_multi_head_attention_ex(o, &l), l, "dropout", "MHA dropout 1");
  o = st_multi_head_attention_default_options(2, 4);
  o.kernel_init = (st_init)77;
  check_layer_refused(st_multi_head_attention_ex(o, &l), l, "initializer", "MHA init 77");
  char longname[100];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  o = st_multi_head_attention_default_options(2, 4);
  o.name = longname;
  check_layer_refused(st_multi_head_attention_ex(o, &l), l, "longer than", "MHA long name");
  /* a NULL out is refused, not written */
  CHECK(st_add(NULL) == ST_ERR_INVALID && strstr(st_last_error(), "out is NULL"));
  CHECK(st_subtract(NULL) == ST_ERR_INVALID);
  CHECK(st_multiply(NULL) == ST_ERR_INVALID);
  CHECK(st_concatenate(-1, NULL) == ST_ERR_INVALID);
  CHECK(st_multi_head_attention(2, 4, NULL) == ST_ERR_INVALID);
  st_status (*make[3])(st_layer **) = {st_add, st_subtract, st_multiply};
  const char *cls[3] = {"Add", "Subtract", "Multiply"};
  for (int i = 0; i < 3; i++) {
    CHECK_OK(make[i](&l));
    CHECK_STREQ(st_layer_class(l), cls[i]);
    st_layer_destroy(l);
  }
  CHECK_OK(st_concatenate(-2, &l));
  st_layer_options opt;
  CHECK_OK(st_layer_get_options(l, &opt));
  CHECK_EQ(opt.concat_axis, -2);
  st_layer_destroy(l);
  o = st_multi_head_attention_default_options(2, 4);
  o.use_causal_mask = true;
  o.name = "att";
  CHECK_OK(st_multi_head_attention_ex(o, &l));
  CHECK_STREQ(st_layer_name(l), "att");
  CHECK_OK(st_layer_get_options(l, &opt));
  CHECK(opt.mha.use_causal_mask && opt.mha.num_heads == 2 && opt.mha.name == NULL);
  st_layer_destroy(l);
}
/* ---- end of merge layers and attention ---- */

/* Every destroy of the public API accepts NULL. */
static void test_destroy_null(void) {
  st_threadpool_destroy(NULL);
  st_tensor_destroy(NULL);
  st_mnist_destroy(NULL);
  st_dataset_destroy(NULL);
  st_iterator_destroy(NULL);
  st_layer_destroy(NULL);
  st_strategy_destroy(NULL);
  st_model_destroy(NULL);
  st_history_destroy(NULL);
  st_tensorboard_destroy(NULL);
  st_callback_destroy(NULL);
  st_history h = {0};
  st_history_destroy(&h);
  st_tensor t = {0};
  st_tensor_destroy(&t);
  CHECK(t.data == NULL);
}

static const check_case cases[] = {
    CHECK_CASE(test_every_kind_destroyed), CHECK_CASE(test_constructors_refuse_bad_input),
    CHECK_CASE(test_csv_logger_missing_dir), CHECK_CASE(test_model_calls),
    CHECK_CASE(test_layer_constructors), CHECK_CASE(test_destroy_null),
    CHECK_CASE(test_layers_a_constructors),
    CHECK_CASE(test_merge_attention_constructors)};

int main(int argc, char **argv) {
  if (!mkdtemp(g_dir)) check_skip("cannot create a temporary directory");
  int rc = CHECK_MAIN(argc, argv, cases);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return rc;
}
