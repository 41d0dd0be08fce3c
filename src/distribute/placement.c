/* The variable-placement calls (placement.h): each goes to the strategy's
 * table, or does what the net's own host buffers need. */
#include "distribute/placement.h"

#include "distribute/strategy.h"

static const st_var_placement *table(const st_strategy *s) {
  static const st_var_placement none = {.name = "net"};
  return s && s->vars ? s->vars : &none;
}

st_status st__vars_place(st_strategy *s, st_net *m, bool *placed) {
  *placed = table(s)->place != NULL;
  return *placed ? table(s)->place(s, m) : ST_OK;
}

st_status st__vars_gather(st_strategy *s, st_net *m) {
  return table(s)->gather_vars ? table(s)->gather_vars(s, m) : ST_OK;
}

st_status st__vars_gather_slots(st_strategy *s, st_net *m) {
  return table(s)->gather_slots ? table(s)->gather_slots(s, m) : ST_OK;
}

st_status st__vars_expose(st_strategy *s, st_net *m) {
  return table(s)->expose ? table(s)->expose(s, m) : ST_OK;
}

void st__vars_publish(st_strategy *s, st_net *m) {
  if (table(s)->publish) table(s)->publish(s, m);
}

float **st__vars_replica_slots(st_strategy *s, st_net *m, int i) {
  return table(s)->replica_slots ? table(s)->replica_slots(s, i) : m->slots;
}

st_status st__vars_serve(st_strategy *s, st_net *m, bool with_slots, bool *served) {
  *served = false;
  return table(s)->serve ? table(s)->serve(s, m, with_slots, served) : ST_OK;
}

void st__vars_begin(st_strategy *s, st_net *m, bool with_slots) {
  if (table(s)->begin) table(s)->begin(s, m, with_slots);
}

/* The default: the tensor copied from the net's buffers with its backend. */
st_status st__vars_read(st_strategy *s, st_net *m, int layer, int param, int slot, float *buf,
                        const float **data) {
  if (table(s)->read) return table(s)->read(s, m, layer, param, slot, buf, data);
  const st_layer *l = m->layers[layer];
  const float *src = slot < 0 ? st__var_ptr(l, param, m->params, m->state)
                              : m->slots[slot] + l->params[param].offset;
  st__be_to_host(m->be_ctx, buf, src, st_shape_size(l->params[param].shape) * sizeof(float));
  *data = buf;
  return ST_OK;
}

void st__vars_end(st_strategy *s, st_net *m, st_status failed) {
  if (table(s)->end) table(s)->end(s, m, failed);
}
