/* The parameter-server cluster description (src/ps/cluster.c) and
 * frame header (frame.c): TF_CONFIG and --cluster/--task parsing with every
 * error of issue 13 item 1 named by field, and the frame checks. */
#define _DEFAULT_SOURCE
#include <unistd.h>

#include "check.h"
#include "ps/cluster.h"
#include "ps/frame.h"
#include "strata/base.h"

#define GOOD_CLUSTER \
  "\"cluster\": {\"chief\": [\"127.0.0.1:5000\"], \"worker\": [\"127.0.0.1:5001\", " \
  "\"localhost:5002\"], \"ps\": [\"127.0.0.1:5003\"]}"

static st_status parse(const char *json, st_ps_cluster *c) {
  return st__ps_cluster_parse_tf_config(json, strlen(json), "TF_CONFIG", c);
}

static void test_valid_tf_config(void) {
  st_ps_cluster c;
  CHECK_OK(parse("{" GOOD_CLUSTER ", \"task\": {\"type\": \"worker\", \"index\": 1}}", &c));
  CHECK_EQ(c.count[ST_PS_CHIEF], 1);
  CHECK_EQ(c.count[ST_PS_WORKER], 2);
  CHECK_EQ(c.count[ST_PS_PS], 1);
  CHECK_EQ((int)c.self_role, (int)ST_PS_WORKER);
  CHECK_EQ(c.self_index, 1);
  const st_ps_task *t = st__ps_cluster_task(&c, ST_PS_WORKER, 1);
  CHECK(t != NULL);
  if (t) {
    CHECK_STREQ(t->host, "localhost");
    CHECK_EQ(t->port, 5002);
  }
  CHECK(st__ps_cluster_task(&c, ST_PS_PS, 1) == NULL);
  /* round trip through the serialiser */
  char *s = st__ps_cluster_to_tf_config(&c, ST_PS_PS, 0);
  st_ps_cluster d;
  CHECK(s != NULL);
  CHECK_OK(parse(s, &d));
  CHECK_EQ((int)d.self_role, (int)ST_PS_PS);
  CHECK_EQ(d.tasks[ST_PS_WORKER][1].port, 5002);
  free(s);
  st__ps_cluster_free(&d);
  st__ps_cluster_free(&c);
}

/* Each bad document fails with the status and a message naming the field. */
static void expect_error(const char *json, st_status want, const char *field) {
  st_ps_cluster c;
  st_status s = parse(json, &c);
  CHECK_MSG(s == want, "%s -> %s (want %s): %s", json, st_status_string(s), st_status_string(want),
            st_last_error());
  CHECK_MSG(strstr(st_last_error(), field) != NULL, "'%s' does not name %s", st_last_error(), field);
  CHECK_EQ(c.count[0] + c.count[1] + c.count[2], 0); /* left empty */
}

static void test_errors_name_the_field(void) {
  expect_error("{\"cluster\": ", ST_ERR_FORMAT, "line 1");
  expect_error("[1, 2]", ST_ERR_INVALID, "JSON object");
  expect_error("{\"task\": {\"type\": \"ps\"}}", ST_ERR_INVALID, "cluster: missing");
  expect_error("{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": [\"a:2\"], \"ps\": [\"a:3\"], "
               "\"boss\": [\"a:4\"]}, \"task\": {\"type\": \"ps\"}}",
               ST_ERR_INVALID, "cluster.boss: unknown role");
  expect_error("{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": [\"a:2\"], \"ps\": [\"a:3\"], "
               "\"evaluator\": [\"a:4\"]}, \"task\": {\"type\": \"ps\"}}",
               ST_ERR_INVALID, "cluster.evaluator");
  expect_error("{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": [\"a:2\"]}, \"task\": "
               "{\"type\": \"worker\"}}", ST_ERR_INVALID, "cluster.ps: no ps");
  expect_error("{\"cluster\": {\"chief\": [\"a:1\"], \"ps\": [\"a:2\"]}, \"task\": "
               "{\"type\": \"ps\"}}", ST_ERR_INVALID, "cluster.worker: no worker");
  expect_error("{\"cluster\": {\"worker\": [\"a:1\"], \"ps\": [\"a:2\"]}, \"task\": "
               "{\"type\": \"ps\"}}", ST_ERR_INVALID, "cluster.chief");
  expect_error("{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": [\"a:2\", \"b:3\"], \"ps\": "
               "[\"a:2\"]}, \"task\": {\"type\": \"ps\"}}",
               ST_ERR_INVALID, "cluster.ps[0]: duplicate address a:2 (also cluster.worker[0])");
  expect_error("{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": [\"a:70000\"], \"ps\": [\"a:3\"]}, "
               "\"task\": {\"type\": \"ps\"}}", ST_ERR_INVALID, "cluster.worker[0]: address 'a:70000'");
  expect_error("{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": [\"nohost\"], \"ps\": [\"a:3\"]}, "
               "\"task\": {\"type\": \"ps\"}}", ST_ERR_INVALID, "cluster.worker[0]");
  expect_error("{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": [7], \"ps\": [\"a:3\"]}, "
               "\"task\": {\"type\": \"ps\"}}", ST_ERR_INVALID, "cluster.worker[0]");
  expect_error("{" GOOD_CLUSTER ", \"task\": {\"type\": \"worker\", \"index\": 2}}", ST_ERR_INVALID,
               "task.index: 2 out of range");
  expect_error("{" GOOD_CLUSTER ", \"task\": {\"type\": \"worker\", \"index\": -1}}", ST_ERR_INVALID,
               "task.index");
  expect_error("{" GOOD_CLUSTER ", \"task\": {\"type\": \"evaluator\"}}", ST_ERR_INVALID,
               "task.type: unknown role");
  expect_error("{" GOOD_CLUSTER "}", ST_ERR_INVALID, "task: missing");
  expect_error("{" GOOD_CLUSTER ", \"task\": {\"type\": \"ps\", \"index\": \"0\"}}", ST_ERR_INVALID,
               "task.index: not an integer");
  expect_error("{" GOOD_CLUSTER ", \"task\": {\"type\": \"ps\"}, \"task\": {\"type\": \"ps\"}}",
               ST_ERR_FORMAT, "duplicate");
}

static void test_cluster_file_and_task(void) {
  char path[] = "/tmp/strata_cluster_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  const char *doc = "{\"chief\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"], \"ps\": "
                    "[\"127.0.0.1:3\", \"127.0.0.1:4\"]}";
  CHECK(write(fd, doc, strlen(doc)) == (ssize_t)strlen(doc));
  close(fd);
  st_ps_cluster c;
  CHECK_OK(st__ps_cluster_parse_file(path, "ps:1", &c));
  CHECK_EQ((int)c.self_role, (int)ST_PS_PS);
  CHECK_EQ(c.self_index, 1);
  st__ps_cluster_free(&c);
  CHECK_EQ(st__ps_cluster_parse_file(path, "ps:2", &c), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "index: 2 out of range") != NULL);
  CHECK_EQ(st__ps_cluster_parse_file(path, "ps", &c), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "--task") != NULL);
  CHECK_EQ(st__ps_cluster_parse_file(path, "ps:x", &c), ST_ERR_INVALID);
  unlink(path);
  CHECK(st__ps_cluster_parse_file(path, "ps:0", &c) != ST_OK);
}

static size_t make_frame(uint8_t *buf, uint16_t type, uint16_t role, uint16_t index, size_t plen) {
  st_ps_header h = {.type = type, .job_id = 42, .sender_role = role, .sender_index = index,
                    .incarnation = 7, .seq = 1, .closure = 3, .step = 9, .payload_len = plen};
  st__ps_header_write(&h, buf);
  memset(buf + ST_PS_HEADER_BYTES, 0xab, plen);
  return ST_PS_HEADER_BYTES + plen;
}

static void test_frame_checks(void) {
  st_ps_cluster c;
  CHECK_OK(parse("{" GOOD_CLUSTER ", \"task\": {\"type\": \"ps\"}}", &c));
  uint8_t buf[256];
  st_ps_header h;
  size_t n = make_frame(buf, ST_PS_MSG_PUSH, ST_PS_WORKER, 1, 16);
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 42, 1024, &c, &h), (int)ST_PS_DROP_NONE);
  CHECK_EQ(h.closure, 3u);
  CHECK_EQ(h.step, 9u);
  CHECK_EQ(h.incarnation, 7u);
  CHECK_EQ(h.payload_len, 16u);
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 43, 1024, &c, &h), (int)ST_PS_DROP_JOB);
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 0, 1024, &c, &h), (int)ST_PS_DROP_NONE);
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 42, 8, &c, &h), (int)ST_PS_DROP_LENGTH);
  CHECK_EQ((int)st__ps_frame_parse(buf, n - 1, 42, 1024, &c, &h), (int)ST_PS_DROP_LENGTH);
  CHECK_EQ((int)st__ps_frame_parse(buf, 10, 42, 1024, &c, &h), (int)ST_PS_DROP_SHORT);
  n = make_frame(buf, ST_PS_MSG_PUSH, ST_PS_WORKER, 2, 0); /* worker 2 does not exist */
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 42, 1024, &c, &h), (int)ST_PS_DROP_SENDER);
  n = make_frame(buf, ST_PS_MSG_PUSH, 3, 0, 0);
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 42, 1024, NULL, &h), (int)ST_PS_DROP_SENDER);
  n = make_frame(buf, ST_PS_MSG_TYPE_END, ST_PS_WORKER, 0, 0);
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 42, 1024, &c, &h), (int)ST_PS_DROP_TYPE);
  n = make_frame(buf, ST_PS_MSG_PULL, ST_PS_WORKER, 0, 0);
  buf[4] = 2; /* version */
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 42, 1024, &c, &h), (int)ST_PS_DROP_VERSION);
  buf[0] ^= 1;
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 42, 1024, &c, &h), (int)ST_PS_DROP_MAGIC);
  /* a payload_len that wraps the size check */
  n = make_frame(buf, ST_PS_MSG_PULL, ST_PS_WORKER, 0, 0);
  memset(buf + 56, 0xff, 8);
  CHECK_EQ((int)st__ps_frame_parse(buf, n, 42, UINT64_MAX, &c, &h), (int)ST_PS_DROP_LENGTH);
  st__ps_cluster_free(&c);
}

int main(int argc, char **argv) {
  static const check_case cases[] = {
      CHECK_CASE(test_valid_tf_config), CHECK_CASE(test_errors_name_the_field),
      CHECK_CASE(test_cluster_file_and_task), CHECK_CASE(test_frame_checks)};
  return CHECK_MAIN(argc, argv, cases);
}
