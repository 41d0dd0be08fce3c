/* The parameter server's test hooks (ps/test_hooks.h): one process-wide copy,
 * set by a test or the CLI before a job starts. */
#include "ps/test_hooks.h"

#include <string.h>

static st__ps_test_hooks hooks;

void st__ps_set_test_hooks(const st__ps_test_hooks *h) {
  if (h) hooks = *h;
  else memset(&hooks, 0, sizeof hooks);
}

const st__ps_test_hooks *st__ps_get_test_hooks(void) { return &hooks; }
