/* The CPU backend's vectorised GELU (src/backend/cpu_gelu.c: erfc and exp
 * by polynomials) against the reference backend (double erf) on a dense
 * grid of x in [-16, 16] (step 1/256) and on special values. Forward: within
 * 1e-6 relative (8 float roundings) of the exact value x erfc(-x/sqrt 2)/2
 * in double (0 for values below 2^-124: e^x is 0 below -87, training
 * threads flush subnormals); and within
 * 1e-6 of the reference plus 1e-15 (the reference's own 1 + erf cancels to 0
 * below x ~ -9). Backward: within 2e-6 of max(|gelu'(x)|, 0.1) (gelu'
 * crosses zero near x = -0.75, where any float evaluation of Phi(x) + x
 * phi(x) cancels). NaN where the reference gives NaN (NaN, and -inf * 0 at
 * the infinities, as glibc's erff gave). The random-data comparison of every
 * activation is in test_kernels. */
#include <math.h>
#include <stdlib.h>

#include "backend/impl.h"
#include "check.h"

enum { GRID = 32 * 256 + 1, NSPECIAL = 12, N = GRID + NSPECIAL };

static float X[N], Y[N], WANT[N], G[N], DX[N], DWANT[N];

static void fill(void) {
  for (int i = 0; i < GRID; i++) X[i] = -16.0f + (float)i / 256.0f;
  const float special[NSPECIAL] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f,
                                   40.0f, -40.0f, 100.0f, -100.0f, INFINITY, -INFINITY};
  for (int i = 0; i < NSPECIAL; i++) X[GRID + i] = special[i];
  for (int i = 0; i < N; i++) G[i] = 1.0f;
}

static st_backend_ctx *make(const st_backend *be) {
  st_backend_ctx *c = NULL;
  CHECK_OK(st_backend_ctx_create(be, 0, 0, &c));
  return c;
}

static void test_forward(void) {
  st_backend_ctx *cpu = make(st_backend_cpu()), *ref = make(st_backend_reference());
  if (!cpu || !ref) return;
  st_backend_cpu()->act_forward(cpu, ST_ACT_GELU, 1, N, X, Y);
  st_backend_reference()->act_forward(ref, ST_ACT_GELU, 1, N, X, WANT);
  double worst = 0.0;
  int bad = 0;
  for (int i = 0; i < N; i++) {
    if (isinf(X[i])) continue; /* below */
    double x = X[i], exact = 0.5 * x * erfc(-x / sqrt(2.0));
    double err = fabs((double)Y[i] - exact), err_ref = fabs((double)Y[i] - (double)WANT[i]);
    double rel = 1e-6;
    bool ok = err <= rel * fabs(exact) + 0x1p-124 &&
              err_ref <= 1e-6 * fabs((double)WANT[i]) + 1e-15;
    if (!ok && bad++ < 5)
      fprintf(stderr, "gelu(%.9g): got %.9g exact %.9g reference %.9g\n", X[i], Y[i], exact,
              WANT[i]);
    if (fabs(exact) > 0x1p-124 && err / fabs(exact) > worst) worst = err / fabs(exact);
  }
  printf("forward: worst relative error %.3g (float epsilon %.3g)\n", worst, 0x1p-23);
  CHECK_EQ(bad, 0);
  CHECK(isinf(Y[N - 2]) && Y[N - 2] > 0); /* +inf */
  CHECK(isnan(Y[N - 1]) && isnan(WANT[N - 1])); /* -inf * 0 */
  float nan_in = NAN, nan_out = 0.0f;
  st_backend_cpu()->act_forward(cpu, ST_ACT_GELU, 1, 1, &nan_in, &nan_out);
  CHECK(isnan(nan_out));
  st_backend_ctx_destroy(cpu), st_backend_ctx_destroy(ref);
}

static void test_backward(void) {
  st_backend_ctx *cpu = make(st_backend_cpu()), *ref = make(st_backend_reference());
  if (!cpu || !ref) return;
  st_backend_cpu()->act_backward(cpu, ST_ACT_GELU, 1, N, X, NULL, G, DX);
  st_backend_reference()->act_backward(ref, ST_ACT_GELU, 1, N, X, NULL, G, DWANT);
  double worst = 0.0;
  int bad = 0;
  for (int i = 0; i < N; i++) {
    double want = DWANT[i], err = fabs((double)DX[i] - want);
    if (isinf(X[i])) continue; /* below */
    double scale = fabs(want) > 0.1 ? fabs(want) : 0.1;
    if (err > 2e-6 * scale && bad++ < 5)
      fprintf(stderr, "gelu'(%.9g): got %.9g want %.9g\n", X[i], DX[i], DWANT[i]);
    if (err / scale > worst) worst = err / scale;
  }
  printf("backward: worst error %.3g of max(|gelu'|, 0.1)\n", worst);
  CHECK_EQ(bad, 0);
  CHECK(isnan(DX[N - 2]) == isnan(DWANT[N - 2])); /* +inf: inf * 0 */
  CHECK(isnan(DX[N - 1]) == isnan(DWANT[N - 1]));
  float dy = 2.0f, dx_in_place = 2.0f, x1 = 1.0f;
  st_backend_cpu()->act_backward(cpu, ST_ACT_GELU, 1, 1, &x1, NULL, &dy, &dx_in_place);
  CHECK(fabsf(dx_in_place - 2.0f * 1.0833155f) < 1e-6f); /* Phi(1) + phi(1) = 1.0833155 */
  st_backend_ctx_destroy(cpu), st_backend_ctx_destroy(ref);
}

static const check_case cases[] = {CHECK_CASE(test_forward), CHECK_CASE(test_backward)};

int main(int argc, char **argv) {
  fill();
  return CHECK_MAIN(argc, argv, cases);
}
