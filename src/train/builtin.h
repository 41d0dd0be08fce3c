/* Internal: the built-in graph models (builtin_graphs.c), reached through
 * st_builtin_model_create (builtin_models.c). */
#ifndef STRATA_TRAIN_BUILTIN_H
#define STRATA_TRAIN_BUILTIN_H

#include "strata/train.h"

/* "resnet20" or "mobilenet-tiny" for o->input_shape ([h, w, c]; another rank
 * gives 28x28x1), named after the model unless o names it. */
st_status st__builtin_graph_create(const char *name, const st_model_options *o, st_model **out);

#endif
