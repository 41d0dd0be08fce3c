/* Internal view of src/base/crc32c.c: the portable (table) path alone, so tests
 * can check it against the hardware path that st_crc32c may pick at run time. */
#ifndef STRATA_BASE_CRC32C_H
#define STRATA_BASE_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Same contract as st_crc32c, always the slicing-by-8 table path. Any thread. */
uint32_t st__crc32c_portable(uint32_t crc, const void *data, size_t n);
/* True when st_crc32c uses the SSE4.2 crc32 instruction on this machine. */
bool st__crc32c_hardware(void);

#endif
