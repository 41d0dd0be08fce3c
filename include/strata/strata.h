/* Strata: train neural networks in C and spread the training over devices and
 * machines. Umbrella header: include this one. */
#ifndef STRATA_H
#define STRATA_H
#include "strata/version.h"
#include "strata/base.h"
#include "strata/backend.h"
#include "strata/nn.h"
#include "strata/data.h"
#include "strata/distribute.h"
#include "strata/train.h"
#include "strata/ps.h"
#endif
