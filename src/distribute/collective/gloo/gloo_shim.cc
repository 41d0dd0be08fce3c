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
#include <gloo/transport/buffer.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

// Members in this order: the buffers (registered with the pairs) go before
// the contexts that own the pairs.
//
// Two meshes, one per direction of the collectives' puts: from a lower rank
// to a higher one on ctx, from a higher to a lower on up. Gloo's pair holds
// its lock while the calling thread writes a put into the socket, and its
// loop thread, told by epoll that the same socket has bytes to read, tries
// that lock, fails and polls again at once: with puts both ways on one
// socket, the loop thread spun ~700 times an operation and shared the core
// with the writer (1 MiB on 2 emulated hosts: 1.3-1.7 ms, the MPI transport
// 0.5 ms). With one direction a socket the reader never waits on the writer
// (0.4-0.5 ms; BENCHMARKS.md). Point to point and the farewell stay on ctx.
struct st__gloo {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::shared_ptr<gloo::rendezvous::Context> up;
  // the mesh that carries puts from rank `from` to rank `to`
  gloo::rendezvous::Context &way(int from, int to) { return from < to || !up ? *ctx : *up; }
  int rank = 0;
  std::vector<char> stage;  // [size][stage_bytes]: what each peer put here
  size_t stage_bytes = 0;
  std::vector<std::unique_ptr<gloo::transport::Buffer>> in;  // [size] over stage
  std::vector<std::unique_ptr<gloo::transport::Buffer>> direct[2];  // [kind-1][size] expected
  std::vector<std::pair<int, std::unique_ptr<gloo::transport::Buffer>>> out;  // posted puts
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

// The bound-buffer slot of `owner`'s staging area (kind 0) or expected
// buffer (kinds 1, 2) for messages from `from`: the two ends of a pair use
// different slots, since a send buffer leaving a pair unregisters whatever
// buffer of its slot that side has.
int slot_of(int kind, int owner, int from) { return 1 + 2 * kind + (owner < from ? 0 : 1); }

// Register the staging areas, then meet every peer once (unbound buffers:
// they wait for the receiver), so no put reaches an unregistered area.
void open_stage(st__gloo &g, size_t bytes, std::chrono::milliseconds timeout) {
  int size = g.ctx->size;
  g.stage_bytes = bytes;
  g.stage.assign(static_cast<size_t>(size) * bytes, 0);
  g.in.resize(static_cast<size_t>(size));
  g.direct[0].resize(static_cast<size_t>(size));
  g.direct[1].resize(static_cast<size_t>(size));
  for (int j = 0; j < size; j++)
    if (j != g.rank)
      g.in[j] = g.way(j, g.rank).getPair(j)->createRecvBuffer(slot_of(0, g.rank, j),
                                                    &g.stage[static_cast<size_t>(j) * bytes], bytes);
  char one = 1;
  std::vector<char> got(static_cast<size_t>(size));
  auto sb = g.ctx->createUnboundBuffer(&one, 1);
  auto rb = g.ctx->createUnboundBuffer(got.data(), got.size());
  const uint64_t slot = uint64_t(1) << 61;
  for (int j = 0; j < size; j++)
    if (j != g.rank) rb->recv(j, slot, static_cast<size_t>(j), 1), sb->send(j, slot, 0, 1);
  for (int j = 0; j < size; j++)
    if (j != g.rank) rb->waitRecv(nullptr, timeout), sb->waitSend(nullptr, timeout);
}

}  // namespace

extern "C" int st__gloo_connect(int rank, int size, const char *host, const st__gloo_store *store,
                                const char *prefix, double timeout_s, size_t stage_bytes,
                                st__gloo **out, char *err, size_t errlen) {
  *out = nullptr;
  st__gloo *g = nullptr;
  try {
    gloo::transport::tcp::attr attr(host);
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
    ctx->setTimeout(ms);
    Store s(*store, prefix, timeout_s);
    ctx->connectFullMesh(s, dev);
    g = new st__gloo;
    g->ctx = ctx;
    g->rank = rank;
    if (stage_bytes) {  // the collectives' second direction (st__gloo's comment)
      auto up = std::make_shared<gloo::rendezvous::Context>(rank, size);
      up->setTimeout(ms);
      Store su(*store, (std::string(prefix) + "up/").c_str(), timeout_s);
      up->connectFullMesh(su, dev);
      g->up = up;
      open_stage(*g, stage_bytes, ms);
    }
    *out = g;
    return 0;
  } catch (const std::exception &e) {
    st__gloo_close_pairs(g);
    st__gloo_destroy(g);
    return failed(e, err, errlen);
  }
}

extern "C" void st__gloo_close_pairs(st__gloo *g) {
  if (!g) return;
  try {
    g->ctx->closeConnections();
    if (g->up) g->up->closeConnections();
  } catch (...) {
  }
  g->out.clear();  // the pairs are closed: nothing reads or writes them any more
  for (auto &kind : g->direct)
    for (auto &d : kind) d.reset();
}

extern "C" void st__gloo_farewell(st__gloo *g, double timeout_s) {
  // a buffer each way per peer: a failed pair fails only its own buffers
  int size = g->ctx->size;
  std::vector<char> got(static_cast<size_t>(size)), one(static_cast<size_t>(size));
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> rb(got.size()), sb(got.size());
  const uint64_t slot = (uint64_t(1) << 61) + 1;
  auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  for (int j = 0; j < size; j++) {
    if (j == g->rank) continue;
    try {
      rb[j] = g->ctx->createUnboundBuffer(&got[j], 1);
      sb[j] = g->ctx->createUnboundBuffer(&one[j], 1);
      rb[j]->recv(j, slot, 0, 1);
      sb[j]->send(j, slot, 0, 1);
    } catch (...) {  // this peer is gone: nothing to wait for
      rb[j].reset(), sb[j].reset();
    }
  }
  for (int j = 0; j < size; j++) {
    try {
      if (rb[j]) rb[j]->waitRecv(nullptr, ms), sb[j]->waitSend(nullptr, ms);
    } catch (...) {  // gone or late: the soft close that follows is all
    }
  }
}

extern "C" const void *st__gloo_stage(st__gloo *g, int peer) {
  return &g->stage[static_cast<size_t>(peer) * g->stage_bytes];
}

extern "C" int st__gloo_expect(st__gloo *g, int peer, int kind, void *dst, size_t n, char *err,
                               size_t errlen) {
  try {
    auto &d = g->direct[kind - 1][static_cast<size_t>(peer)];
    d.reset();
    d = g->way(peer, g->rank).getPair(peer)->createRecvBuffer(slot_of(kind, g->rank, peer), dst, n);
    return 0;
  } catch (const std::exception &e) {
    return failed(e, err, errlen);
  }
}

extern "C" int st__gloo_put(st__gloo *g, int peer, int kind, const void *src, size_t n,
                            size_t roff, char *err, size_t errlen) {
  try {
    auto b = g->way(g->rank, peer).getPair(peer)->createSendBuffer(slot_of(kind, peer, g->rank),
                                                     const_cast<void *>(src), n);
    b->send(0, n, roff);
    g->out.emplace_back(peer, std::move(b));
    return 0;
  } catch (const std::exception &e) {
    return failed(e, err, errlen);
  }
}

extern "C" int st__gloo_puts_wait(st__gloo *g, int *peer, char *err, size_t errlen) {
  int rc = 0;
  for (auto &p : g->out) {
    try {
      p.second->waitSend();
    } catch (const std::exception &e) {
      *peer = p.first;
      rc = failed(e, err, errlen);
      break;
    }
  }
  if (rc != 0) st__gloo_close_pairs(g);  // a put may still be under way
  g->out.clear();
  return rc;
}

extern "C" int st__gloo_take(st__gloo *g, int peer, int kind, char *err, size_t errlen) {
  try {
    size_t j = static_cast<size_t>(peer);
    if (!kind) g->in[j]->waitRecv();
    if (kind) g->direct[kind - 1][j]->waitRecv();
    return 0;
  } catch (const std::exception &e) {
    return failed(e, err, errlen);
  }
}

extern "C" void st__gloo_forget(st__gloo *g) {
  for (auto &kind : g->direct)
    for (auto &d : kind) d.reset();
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
