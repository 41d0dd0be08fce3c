// The C face of Gloo for the Gloo transport (gloo_shim.h says what each call
// does). Every exception Gloo throws becomes -1 (or ST__GLOO_TIMEOUT) and a
// message; nothing escapes into C.
#include "gloo_shim.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

struct st__gloo {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
};

struct st__gloo_buf {
  std::unique_ptr<gloo::transport::UnboundBuffer> buf;
};

namespace {

void say(char *err, size_t errlen, const std::string &what) {
  if (err && errlen) std::snprintf(err, errlen, "%s", what.c_str());
}

// A failed wait of Gloo's: a timeout, or the peer's connection gone.
int failed(const std::exception &e, char *err, size_t errlen) {
  std::string w = e.what();
  say(err, errlen, w);
  return (w.find("imed out") != std::string::npos || w.find("imeout") != std::string::npos)
             ? ST__GLOO_TIMEOUT
             : -1;
}

class Store : public gloo::rendezvous::Store {
 public:
  Store(const st__gloo_store &s, const char *prefix, double timeout_s)
      : s_(s), prefix_(prefix), timeout_s_(timeout_s) {}
  void set(const std::string &key, const std::vector<char> &data) override {
    char err[256] = "";
    std::string k = prefix_ + key;
    if (s_.set(s_.ctx, k.c_str(), data.data(), data.size(), err, sizeof err) != 0)
      throw gloo::IoException(std::string("rendezvous store: ") + err);
  }
  std::vector<char> get(const std::string &key) override {
    char err[256] = "";
    void *val = nullptr;
    size_t n = 0;
    std::string k = prefix_ + key;
    int rc = s_.get(s_.ctx, k.c_str(), timeout_s_, &val, &n, err, sizeof err);
    if (rc != 0) throw gloo::IoException(std::string("rendezvous store: ") + err);
    std::vector<char> out(static_cast<char *>(val), static_cast<char *>(val) + n);
    std::free(val);
    return out;
  }
  void wait(const std::vector<std::string> &keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &) override {
    for (const auto &k : keys) get(k);  // get waits for the key
  }

 private:
  st__gloo_store s_;
  std::string prefix_;
  double timeout_s_;
};

}  // namespace

extern "C" int st__gloo_connect(int rank, int size, const char *host, const st__gloo_store *store,
                                const char *prefix, double timeout_s, st__gloo **out, char *err,
                                size_t errlen) {
  *out = nullptr;
  try {
    gloo::transport::tcp::attr attr(host);
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
    ctx->setTimeout(ms);
    Store s(*store, prefix, timeout_s);
    ctx->connectFullMesh(s, dev);
    *out = new st__gloo{ctx};
    return 0;
  } catch (const std::exception &e) {
    return failed(e, err, errlen);
  }
}

extern "C" void st__gloo_close_pairs(st__gloo *g) {
  if (!g) return;
  try {
    g->ctx->closeConnections();
  } catch (...) {
  }
}

extern "C" void st__gloo_destroy(st__gloo *g) {
  if (!g) return;
  try {
    delete g;
  } catch (...) {
  }
}

extern "C" int st__gloo_buf_create(st__gloo *g, void *ptr, size_t bytes, st__gloo_buf **out,
                                   char *err, size_t errlen) {
  *out = nullptr;
  try {
    *out = new st__gloo_buf{g->ctx->createUnboundBuffer(ptr, bytes)};
    return 0;
  } catch (const std::exception &e) {
    return failed(e, err, errlen);
  }
}

extern "C" void st__gloo_buf_destroy(st__gloo_buf *b) {
  if (!b) return;
  try {
    delete b;
  } catch (...) {
  }
}

extern "C" int st__gloo_send(st__gloo_buf *b, int peer, uint64_t slot, size_t off, size_t n,
                             char *err, size_t errlen) {
  try {
    b->buf->send(peer, slot, off, n);
    return 0;
  } catch (const std::exception &e) {
    return failed(e, err, errlen);
  }
}

extern "C" int st__gloo_recv(st__gloo_buf *b, int peer, uint64_t slot, size_t off, size_t n,
                             char *err, size_t errlen) {
  try {
    b->buf->recv(peer, slot, off, n);
    return 0;
  } catch (const std::exception &e) {
    return failed(e, err, errlen);
  }
}

extern "C" int st__gloo_wait_send(st__gloo_buf *b, int timeout_ms, int *peer, char *err,
                                  size_t errlen) {
  try {
    if (!b->buf->waitSend(peer, std::chrono::milliseconds(timeout_ms))) {
      say(err, errlen, "send aborted");
      return -1;
    }
    return 0;
  } catch (const std::exception &e) {
    return failed(e, err, errlen);
  }
}

extern "C" int st__gloo_wait_recv(st__gloo_buf *b, int timeout_ms, int *peer, char *err,
                                  size_t errlen) {
  try {
    if (!b->buf->waitRecv(peer, std::chrono::milliseconds(timeout_ms))) {
      say(err, errlen, "receive aborted");
      return -1;
    }
    return 0;
  } catch (const std::exception &e) {
    return failed(e, err, errlen);
  }
}
