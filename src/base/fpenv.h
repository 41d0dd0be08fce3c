/* Flush-to-zero / denormals-are-zero for the threads that train, as
 * TensorFlow's thread pools set them: on x86 every operation that reads or
 * produces a subnormal float (|x| < 1.2e-38) takes a microcode assist of
 * ~100 cycles, and Adam's moments of parameters whose gradient stopped (the
 * mlp's weights from always-black border pixels) decay into that range: the
 * update then ran several times slower. Results differ from IEEE only where
 * a value is subnormal, and identically on every thread and process, so runs
 * stay reproducible. A no-op on other architectures. */
#ifndef STRATA_BASE_FPENV_H
#define STRATA_BASE_FPENV_H

#if defined(__SSE2__)
#include <xmmintrin.h>
#define ST__MXCSR_FTZ_DAZ 0x8040u
/* Set FTZ and DAZ on the calling thread; returns the previous state. */
static inline unsigned st__ftz_enter(void) {
  unsigned old = _mm_getcsr();
  _mm_setcsr(old | ST__MXCSR_FTZ_DAZ);
  return old;
}
static inline void st__ftz_leave(unsigned old) { _mm_setcsr(old); }
/* The calling thread's whole floating-point control state, and setting it. */
static inline unsigned st__fp_state(void) { return _mm_getcsr(); }
static inline void st__fp_set_state(unsigned state) { _mm_setcsr(state); }
#else
static inline unsigned st__ftz_enter(void) { return 0; }
static inline void st__ftz_leave(unsigned old) { (void)old; }
static inline unsigned st__fp_state(void) { return 0; }
static inline void st__fp_set_state(unsigned state) { (void)state; }
#endif

#endif
