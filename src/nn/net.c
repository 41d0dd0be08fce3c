/* The network's derived figures (output shape and size, largest activation,
 * whether a layer runs collectives) and the seeded initialisation of its
 * variables. Pure functions of the net; any thread. */
#include "nn/net.h"

st_shape st__net_output_shape(const st_net *m) {
  return m->nlayers ? m->layers[m->nlayers - 1]->out_shape : m->input_shape;
}

size_t st__net_output_size(const st_net *m) {
  return st_shape_size(st__net_output_shape(m));
}

bool st__net_uses_collectives(const st_net *m) {
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i]->uses_collectives) return true;
  return false;
}

size_t st__net_max_activation(const st_net *m) {
  size_t mx = st_shape_size(m->input_shape);
  for (int i = 0; i < m->nlayers; i++) {
    size_t s = st_shape_size(m->layers[i]->out_shape);
    if (s > mx) mx = s;
  }
  return mx;
}

void st__net_init_variables(const st_net *m, float *params, float *state) {
  for (int i = 0; i < m->nlayers; i++) {
    const st_layer *l = m->layers[i];
    for (int p = 0; p < l->nparams; p++) {
      st_rng rng = st_rng_make(m->seed, (uint64_t)i * ST_LAYER_MAX_PARAMS + (uint64_t)p);
      st__init_fill(l->params[p].init, l->params[p].shape,
                    st__var_ptr(l, p, params, state), &rng);
    }
  }
}
