/* Internal: run-time loaded OpenBLAS (see blas.c). The loader chooses
 * OPENBLAS_CORETYPE before the library is loaded, then resolves the few symbols
 * Strata uses. All functions may be called from any thread. */
#ifndef STRATA_SRC_BACKEND_BLAS_H
#define STRATA_SRC_BACKEND_BLAS_H

#include "strata/backend.h"

/* Load OpenBLAS once (thread-safe). ST_OK when cblas_sgemm is available; else
 * ST_ERR_NOT_BUILT with the dlerror text and the fix in st_last_error(). Later
 * calls return the same status (and set the same message again on failure). */
st_status st__blas_load(void);

/* Row-major C[m,n] = alpha * op(A) op(B) + beta * C (the backend gemm contract).
 * Uses OpenBLAS when loaded, else a portable blocked loop. */
void st__sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb, float beta,
               float *c, int ldc);

/* Core OpenBLAS is running ("Haswell", "SkylakeX", ...); "none" if not loaded. */
const char *st__blas_corename(void);
/* OpenBLAS build configuration string; "none" if not loaded. */
const char *st__blas_config(void);

#endif
