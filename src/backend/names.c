/* Names of the backend's enums: activations and losses, as Keras spells them,
 * with parsers that list the valid names when a name is not understood, and the
 * two properties callers need (whether an activation's backward pass needs its
 * input, whether a loss takes sparse class-index labels). Adding an activation
 * or loss: extend the enum in strata/backend.h and the tables here (the
 * static_asserts fail until you do). Thread-safe, no state. */
#include "base/args.h"
#include "strata/backend.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const k_act_names[] = {
    [ST_ACT_LINEAR] = "linear", [ST_ACT_RELU] = "relu",
    [ST_ACT_SIGMOID] = "sigmoid", [ST_ACT_TANH] = "tanh",
    [ST_ACT_SOFTMAX] = "softmax", [ST_ACT_ELU] = "elu",
    [ST_ACT_GELU] = "gelu", [ST_ACT_RELU6] = "relu6",
    [ST_ACT_LEAKY_RELU] = "leaky_relu", [ST_ACT_GELU_TANH] = "gelu_approximate",
};
static_assert(sizeof k_act_names / sizeof k_act_names[0] == ST_ACT_COUNT,
              "k_act_names must name every st_activation");

/* Canonical Keras names first; short aliases after. */
static const char *const k_loss_names[] = {
    [ST_LOSS_SPARSE_CE_LOGITS] = "sparse_categorical_crossentropy_from_logits",
    [ST_LOSS_SPARSE_CE] = "sparse_categorical_crossentropy",
    [ST_LOSS_CE] = "categorical_crossentropy",
    [ST_LOSS_CE_LOGITS] = "categorical_crossentropy_from_logits",
    [ST_LOSS_BCE] = "binary_crossentropy",
    [ST_LOSS_BCE_LOGITS] = "binary_crossentropy_from_logits",
    [ST_LOSS_MSE] = "mean_squared_error",
};
static_assert(sizeof k_loss_names / sizeof k_loss_names[0] == ST_LOSS_COUNT,
              "k_loss_names must name every st_loss_kind");

static const char *const k_loss_short[] = {
    [ST_LOSS_SPARSE_CE_LOGITS] = "sparse_ce_logits",
    [ST_LOSS_SPARSE_CE] = "sparse_ce",
    [ST_LOSS_CE] = "ce",
    [ST_LOSS_CE_LOGITS] = "ce_logits",
    [ST_LOSS_BCE] = "bce",
    [ST_LOSS_BCE_LOGITS] = "bce_logits",
    [ST_LOSS_MSE] = "mse",
};
static_assert(sizeof k_loss_short / sizeof k_loss_short[0] == ST_LOSS_COUNT,
              "k_loss_short must name every st_loss_kind");

const char *st_activation_name(st_activation a) {
  if ((int)a < 0 || a >= ST_ACT_COUNT) return "unknown";
  return k_act_names[a];
}

/* "a, b, c" of names[0..n) into buf. */
static const char *join_names(const char *const *names, int n, char *buf,
                              size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len < cap; i++) {
    int w = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", names[i]);
    if (w < 0) break;
    len += (size_t)w;
  }
  return buf;
}

st_status st_activation_parse(const char *name, st_activation *out) {
  ST_REQUIRE(name);
  ST_REQUIRE(out);
  char list[256];
  if (name) {
    for (int i = 0; i < ST_ACT_COUNT; i++) {
      if (strcasecmp(name, k_act_names[i]) == 0) {
        *out = (st_activation)i;
        return ST_OK;
      }
    }
    /* Keras also spells linear as None / "none" in some configs. */
    if (strcasecmp(name, "none") == 0) {
      *out = ST_ACT_LINEAR;
      return ST_OK;
    }
  }
  return st_error(ST_ERR_INVALID, "unknown activation '%s' (valid: %s)",
                  name ? name : "(null)",
                  join_names(k_act_names, ST_ACT_COUNT, list, sizeof list));
}

/* Only the GELUs need x: the others' derivatives are functions of y
 * (ELU: dx = dy * (y > 0 ? 1 : y + 1); relu6: 0 < y < 6; leaky: y > 0). */
bool st_activation_needs_input(st_activation a) {
  return a == ST_ACT_GELU || a == ST_ACT_GELU_TANH;
}

const char *st_loss_name(st_loss_kind k) {
  if ((int)k < 0 || k >= ST_LOSS_COUNT) return "unknown";
  return k_loss_names[k];
}

st_status st_loss_parse(const char *name, st_loss_kind *out) {
  ST_REQUIRE(name);
  ST_REQUIRE(out);
  char list[512];
  if (name) {
    for (int i = 0; i < ST_LOSS_COUNT; i++) {
      if (strcasecmp(name, k_loss_names[i]) == 0 ||
          strcasecmp(name, k_loss_short[i]) == 0) {
        *out = (st_loss_kind)i;
        return ST_OK;
      }
    }
  }
  return st_error(ST_ERR_INVALID, "unknown loss '%s' (valid: %s; or %s)",
                  name ? name : "(null)",
                  join_names(k_loss_names, ST_LOSS_COUNT, list, 384),
                  join_names(k_loss_short, ST_LOSS_COUNT, list + 384, 128));
}

bool st_loss_is_sparse(st_loss_kind k) {
  return k == ST_LOSS_SPARSE_CE || k == ST_LOSS_SPARSE_CE_LOGITS;
}
