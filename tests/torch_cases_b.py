"""PyTorch references of Conv1D, DepthwiseConv2D, Embedding,
LayerNormalization and Conv2D (strides, use_bias=False), for the generic
harness (tests/test_torch_layers.py with tests/layer_probe.c): each case is
a Keras layer config as the JSON importer reads it, the per-example input
shapes, and a function of (xs, ws) computing y with torch in float64, where
xs are the inputs [B, *shape] and ws the layer's parameters in Strata's
order and (Keras) layout. The harness compares y, dx and every dw.

Layouts: Keras kernels are [kh, kw, in, out] (Conv1D [k, in, out],
DepthwiseConv2D [kh, kw, in, depth_multiplier] with output channel
in*depth_multiplier + m); torch wants [out, in, kh, kw] and channels first.
'same' padding is TensorFlow's split (the odd cell at the end); 'causal' is
kernel_size - 1 zeros at the start."""
import torch
import torch.nn.functional as F


def _act(name, z):
    if name in (None, "linear"):
        return z
    if name == "relu":
        return torch.relu(z)
    if name == "tanh":
        return torch.tanh(z)
    if name == "sigmoid":
        return torch.sigmoid(z)
    if name == "gelu":  # Strata's gelu is the exact (erf) form
        return F.gelu(z)
    raise ValueError(name)


def _same_pads(n, k, s):
    """(before, after) of TensorFlow's 'same' padding along an axis of n."""
    out = (n + s - 1) // s
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def _conv1d(cfg):
    k, s = cfg["kernel_size"][0], cfg["strides"][0]

    def fn(xs, ws):
        x = xs[0].permute(0, 2, 1)  # [B, C, L]
        if cfg["padding"] == "causal":
            x = F.pad(x, (k - 1, 0))
        elif cfg["padding"] == "same":
            x = F.pad(x, _same_pads(x.shape[2], k, s))
        w = ws[0].permute(2, 1, 0)  # [k, in, out] -> [out, in, k]
        b = ws[1] if cfg.get("use_bias", True) else None
        return _act(cfg.get("activation"), F.conv1d(x, w, b, stride=s)).permute(0, 2, 1)
    return fn


def _conv2d(cfg):
    (kh, kw), (sh, sw) = cfg["kernel_size"], cfg["strides"]

    def fn(xs, ws):
        x = xs[0].permute(0, 3, 1, 2)  # [B, C, H, W]
        if cfg["padding"] == "same":
            t, b_ = _same_pads(x.shape[2], kh, sh)
            l, r = _same_pads(x.shape[3], kw, sw)
            x = F.pad(x, (l, r, t, b_))
        w = ws[0].permute(3, 2, 0, 1)  # [kh, kw, in, out] -> [out, in, kh, kw]
        b = ws[1] if cfg.get("use_bias", True) else None
        return _act(cfg.get("activation"), F.conv2d(x, w, b, stride=(sh, sw))).permute(0, 2, 3, 1)
    return fn


def _depthwise(cfg):
    (kh, kw), (sh, sw) = cfg["kernel_size"], cfg["strides"]
    m = cfg.get("depth_multiplier", 1)

    def fn(xs, ws):
        x = xs[0].permute(0, 3, 1, 2)  # [B, C, H, W]
        c = x.shape[1]
        if cfg["padding"] == "same":
            t, b_ = _same_pads(x.shape[2], kh, sh)
            l, r = _same_pads(x.shape[3], kw, sw)
            x = F.pad(x, (l, r, t, b_))
        # [kh, kw, C, M] -> [C, M, kh, kw] -> [C*M, 1, kh, kw]: out channel c*M + m
        w = ws[0].permute(2, 3, 0, 1).reshape(c * m, 1, kh, kw)
        b = ws[1] if cfg.get("use_bias", True) else None
        y = F.conv2d(x, w, b, stride=(sh, sw), groups=c)
        return _act(cfg.get("activation"), y).permute(0, 2, 3, 1)
    return fn


def _embedding(cfg):
    def fn(xs, ws):
        return ws[0][xs[0].round().long()]
    return fn


def _layernorm(cfg):
    def fn(xs, ws):
        x = xs[0]
        i = 0
        gamma = beta = None
        if cfg.get("scale", True):
            gamma, i = ws[i], i + 1
        if cfg.get("center", True):
            beta = ws[i]
        return F.layer_norm(x, (x.shape[-1],), gamma, beta, cfg.get("epsilon", 1e-3))
    return fn


def _case(name, cls, cfg, shape, batch, make, **extra):
    return dict(name=name, layer={"class_name": cls, "config": cfg}, inputs=[list(shape)],
                batch=batch, torch=make(cfg), **extra)


def _c1(filters, k, s, pad, act="linear", bias=True):
    return {"filters": filters, "kernel_size": [k], "strides": [s], "padding": pad,
            "activation": act, "use_bias": bias}


def _dw(k, s, pad, m, act="linear", bias=True):
    return {"kernel_size": list(k), "strides": list(s), "padding": pad, "depth_multiplier": m,
            "activation": act, "use_bias": bias}


def _c2(filters, k, s, pad, act="linear", bias=True):
    return {"filters": filters, "kernel_size": list(k), "strides": list(s), "padding": pad,
            "activation": act, "use_bias": bias}


CASES = [
    _case("conv1d_valid", "Conv1D", _c1(4, 3, 1, "valid"), (9, 3), 3, _conv1d),
    _case("conv1d_same_s2_tanh", "Conv1D", _c1(5, 4, 2, "same", "tanh"), (10, 2), 2, _conv1d),
    _case("conv1d_causal", "Conv1D", _c1(3, 3, 1, "causal"), (7, 4), 2, _conv1d),
    _case("conv1d_causal_s2_nobias_gelu", "Conv1D", _c1(2, 2, 2, "causal", "gelu", False),
          (9, 3), 2, _conv1d),
    _case("depthwise_valid", "DepthwiseConv2D", _dw((3, 3), (1, 1), "valid", 1), (6, 5, 3), 2,
          _depthwise),
    _case("depthwise_same_c10_relu", "DepthwiseConv2D", _dw((3, 3), (1, 1), "same", 1, "relu"),
          (5, 5, 10), 2, _depthwise),
    _case("depthwise_same_s2_m2", "DepthwiseConv2D", _dw((3, 2), (2, 2), "same", 2, "tanh"),
          (7, 6, 2), 2, _depthwise),
    _case("depthwise_same_m3_nobias", "DepthwiseConv2D", _dw((2, 2), (1, 1), "same", 3,
          "linear", False), (4, 5, 2), 3, _depthwise),
    _case("embedding", "Embedding", {"input_dim": 11, "output_dim": 5}, (6,), 4, _embedding,
          int_inputs={0: 11}),
    _case("embedding_2d_ids", "Embedding", {"input_dim": 7, "output_dim": 3}, (2, 4), 2,
          _embedding, int_inputs={0: 7}),
    _case("layernorm", "LayerNormalization", {"axis": -1, "epsilon": 1e-3}, (16,), 4,
          _layernorm),
    _case("layernorm_rank3", "LayerNormalization", {"axis": -1, "epsilon": 1e-5}, (3, 2, 8), 2,
          _layernorm),
    _case("layernorm_no_center", "LayerNormalization", {"epsilon": 1e-3, "center": False},
          (5, 6), 3, _layernorm),
    _case("layernorm_no_affine", "LayerNormalization", {"epsilon": 1e-3, "center": False,
          "scale": False}, (12,), 3, _layernorm),
    _case("conv2d_s2_same_nobias", "Conv2D", _c2(3, (3, 3), (2, 2), "same", "linear", False),
          (7, 6, 2), 2, _conv2d),
    _case("conv2d_s21_valid_relu", "Conv2D", _c2(4, (2, 3), (2, 1), "valid", "relu"),
          (6, 7, 3), 2, _conv2d),
]
