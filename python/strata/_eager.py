"""Model calls outside strategy.run: a plain eager custom training loop.

    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))

The engine's replica functions (st_replica_forward / backward / gradients /
apply_gradients) run only inside st_strategy_run, and a step's forward,
backward and update must share one run (the backward reads the forward's
activations). A Session keeps one run open across those Python statements:
a background thread calls st_strategy_run on the model's strategy, and each
local replica's function serves commands from the main thread (queues) until
the session closes. The thread is the model's (a _Runner, kept across
steps: a new thread per step cost more than the mlp's step under load). The global batch is split over the local replicas as fit
splits it, so under MirroredStrategy the loop computes fit's step; the run
ends after apply_gradients (the engine counts the step then), and before
any other verb of the model (fit, evaluate, predict, weights, compile,
strategy.run: Model._ensure_compiled and compile close it). Several
MultiWorkerMirroredStrategy workers: refused (use strategy.run).
Threads: every function here is called from the user's thread only; the
replicas' functions run on the engine's replica threads."""
import atexit
import queue
import threading
import weakref

import numpy as np

from . import _strata

_open = {}  # id(model) -> its open Session
_END = object()  # a command's result that ends the replica's serve loop
_runners = {}  # id(model) -> its _Runner


class _Runner:
    """One thread per model running its sessions' engine runs one after the
    other; it ends when the model is collected."""

    def __init__(self, model):
        self.jobs = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="strata-eager-%s" % model.name, daemon=True)
        self.thread.start()
        key = id(model)
        weakref.finalize(model, self._end, key)

    def _loop(self):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            job()
            del job  # the session (and its model) must not outlive its run here

    def _end(self, key):
        if _runners.get(key) is self:
            del _runners[key]
        self.jobs.put(None)


def _runner(model):
    r = _runners.get(id(model))
    if r is None:
        r = _runners[id(model)] = _Runner(model)
    return r


class Session:
    """One st_strategy_run of a model kept open across eager statements."""

    def __init__(self, model):
        strategy = model.distribute_strategy
        rank, workers = strategy._workers()
        if workers > 1:
            raise NotImplementedError(
                "a model call outside strategy.run under MultiWorkerMirroredStrategy with %d workers is "
                "not supported by Strata (each worker's batch share is not the whole batch): run the step "
                "with strategy.run(step, args=(...))" % workers)
        self.model, self.n = model, strategy._local_replicas()
        self.n_params = sum(int(np.prod(s)) for _, ws in model._weight_layout() for s, t, _o in ws if t)
        self.cmd = [queue.SimpleQueue() for _ in range(self.n)]
        self.res = queue.SimpleQueue()
        self.error, self.open, self.seq, self.grad_gen = None, True, 0, 0
        self.keep = [None] * self.n  # each replica's forward input (the engine reads it in backward)
        self.done = threading.Event()  # set when the run has ended
        _runner(model).jobs.put(self._run)

    def _run(self):
        try:
            _strata.strategy_run(self.model._cap, self._serve, self.n)
        except BaseException as e:  # noqa: BLE001 (handed to the user's thread)
            self.error = e
        finally:
            self.open = False
            self.res.put(("dead", -1, None))
            self.done.set()

    def _serve(self, rid, handle):
        while True:
            fn = self.cmd[rid].get()
            if fn is None:
                return None
            try:
                r = fn(rid, handle)
                self.res.put(("ok", rid, r))
                if r is _END:  # apply's last command: the run ends here (one hand-off fewer)
                    return None
            except BaseException as e:  # noqa: BLE001
                self.res.put(("err", rid, e))
                return None  # leaving wakes the replicas waiting for this one in a collective

    def do(self, fns):
        """fns[r](replica_id, handle) on every local replica: their results
        in replica order (the first exception raised, after closing)."""
        if not self.open:
            raise RuntimeError("the model's eager run has ended: %s" % (self.error,))
        for q, fn in zip(self.cmd, fns):
            q.put(fn)
        out, err = [None] * self.n, None
        try:
            for _ in range(self.n):
                kind, rid, v = self.res.get()
                if kind == "dead":
                    err = err or self.error or RuntimeError("the model's eager run ended")
                    break
                if kind == "err":
                    err = err or v
                else:
                    out[rid] = v
        except BaseException:  # Ctrl-C while the replicas work: end the run once they are done
            try:
                self.close()
            except Exception:  # noqa: BLE001 (the interrupt is the news)
                pass
            raise
        if err is not None:
            self.close()
            raise err
        return out

    def close(self):
        if not self.done.is_set():
            for q in self.cmd:
                q.put(None)
            self.done.wait()
        self.open = False
        if _open.get(id(self.model)) is self:
            del _open[id(self.model)]
        err, self.error = self.error, None
        if err is not None and not isinstance(err, NotImplementedError):
            raise err

    # ---- the step's pieces ----
    def _parts(self, total):
        return [(total * r // self.n, total * (r + 1) // self.n) for r in range(self.n)]

    def forward(self, x32, training):
        """The model's outputs for x32 [B, ...] (each replica its slice)."""
        cols = int(np.prod(self.model._flat_out()[1:]))
        parts = self._parts(len(x32))
        slices = [np.ascontiguousarray(x32[lo:hi]) for lo, hi in parts]
        self.keep = slices

        def fwd(i):
            return lambda rid, h: _strata.replica_forward(h, slices[i], bool(training), cols)
        outs = self.do([fwd(i) for i in range(self.n)])
        self.seq += 1
        rows = [np.frombuffer(b, dtype=np.float32).reshape(-1, cols) for b in outs]
        return np.concatenate(rows).reshape((len(x32),) + tuple(self.model._flat_out()[1:]))

    def backward(self, dy, dx_cols=0):
        """Gradients of the variables from dy [B, ...], read back in the same
        hand-off: (the input's gradient [B, dx_cols] when dx_cols > 0 else
        None, the replicas' gradients summed in replica order, flat
        [n_params])."""
        dy = np.ascontiguousarray(np.asarray(dy, dtype=np.float32).reshape(len(dy), -1))
        parts = self._parts(len(dy))

        def bwd(i):
            d = np.ascontiguousarray(dy[parts[i][0]:parts[i][1]])
            return lambda rid, h: (_strata.replica_backward(h, d, dx_cols), _strata.replica_grads(h, self.n_params))
        outs = self.do([bwd(i) for i in range(self.n)])
        self.grad_gen += 1
        total = np.frombuffer(outs[0][1], dtype=np.float32).copy()
        for o in outs[1:]:
            total += np.frombuffer(o[1], dtype=np.float32)
        dx = None
        if dx_cols:
            dx = np.concatenate([np.frombuffer(o[0], dtype=np.float32).reshape(-1, dx_cols) for o in outs])
        return dx, total

    def gradients(self):
        """The replicas' gradients summed (replica order), flat [n_params]."""
        outs = self.do([lambda rid, h: _strata.replica_grads(h, self.n_params)] * self.n)
        total = np.frombuffer(outs[0], dtype=np.float32).copy()
        for b in outs[1:]:
            total += np.frombuffer(b, dtype=np.float32)
        return total

    def set_gradients(self, flat):
        flat = np.ascontiguousarray(flat, dtype=np.float32)
        zeros = np.zeros_like(flat)
        self.do([lambda rid, h: _strata.replica_set_grads(h, flat if rid == 0 else zeros)] * self.n)
        self.grad_gen += 1

    def apply(self):
        """Sum the replicas' gradients, apply the compiled optimizer, end the
        run (the engine counts the step): each replica leaves right after."""
        def last(rid, h):
            _strata.replica_apply(h)
            return _END
        self.do([last] * self.n)
        self.close()


def session(model):
    """The model's open session (one is opened when none is)."""
    s = _open.get(id(model))
    if s is None or not s.open:
        close(model)
        model._ensure_compiled("model call")
        s = _open[id(model)] = Session(model)
    return s


def current(model):
    s = _open.get(id(model))
    return s if s is not None and s.open else None


def close(model):
    """End the model's open session, if any (before another verb uses it)."""
    s = _open.get(id(model))
    if s is not None:
        s.close()


def close_strategy(strategy):
    for s in list(_open.values()):
        if s.model.distribute_strategy is strategy:
            s.close()


@atexit.register
def _close_all():
    for s in list(_open.values()):
        try:
            s.close()
        except Exception:  # noqa: BLE001 (exiting)
            pass
