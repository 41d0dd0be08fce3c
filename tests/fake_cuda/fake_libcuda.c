/* An empty library built as fake_cuda/libcuda.so.1: on LD_LIBRARY_PATH it
 * passes the loader's driver check (src/backend/cuda_load.c) so that
 * tests/test_gpu_devices.sh reaches the checks after it with fake_module.c.
 * Test fixture: never installed. */
int st__fake_libcuda_marker(void);
int st__fake_libcuda_marker(void) { return 1; }
