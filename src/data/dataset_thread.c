/* Background threads of the input pipeline (prefetch producers, parallel map
 * and interleave workers): each marks itself SCHED_BATCH (Linux), the policy
 * for "non-interactive, CPU-bound" threads, whose wake-ups do not preempt the
 * running thread. Without it, handing a prefetch producer a free slot woke it
 * straight onto the consumer's core when the compute threads held the
 * others, so the training step waited for the producer's whole next item
 * (docs/BENCHMARKS.md, "Time a cnn step waits for input"). Failure (a
 * kernel without the policy) is ignored: the thread just runs as before. */
#define _GNU_SOURCE
#include "data/dataset_impl.h"

#include <pthread.h>
#include <sched.h>

void st__ds_background_thread(void) {
  struct sched_param sp = {0};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
}
