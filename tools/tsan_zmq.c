/* ThreadSanitizer suppressions for libzmq, compiled into the CLI (a no-op
 * outside TSan builds: the runtime calls this hook when it is there).
 * libzmq (and libsodium, its CURVE crypto) is not built with TSan: its lock-free pipes between our threads and
 * its I/O threads are invisible to it, so a message's bytes written by
 * libzmq (memcpy) and read by Strata after zmq_msg_recv are reported as races.
 * Only libzmq's own frames and its calls into intercepted functions are
 * named; a race between two of Strata's threads is still reported.
 * tests/test_ps_transport.c carries the same list. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
  return "called_from_lib:libzmq.so\n"
         "called_from_lib:libsodium.so\n" /* CURVE's decryption, called by libzmq */
         "race:libzmq.so\n"
         "race:libsodium.so\n";
}
