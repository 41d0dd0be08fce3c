"""PyTorch 1.13 references of the merge layers and MultiHeadAttention (issue
28), loaded by tests/test_torch_layers.py with every tests/torch_cases_*.py.

Each case: name, layer (a Keras layer entry as the importer accepts it),
inputs (per-example shapes, one per input), batch, torch=fn(xs, ws) -> y
computed in float64 from xs (list of [batch, *shape] tensors) and ws (the
layer's parameters in Strata's order and layout), rtol (optional). The
harness compares y, every dx and every dw with torch autograd.

MultiHeadAttention's parameters, in Strata's (and Keras's) order: query/kernel
[dq, H, K], query/bias [H, K], key/kernel [dk, H, K], key/bias, value/kernel
[dv, H, V], value/bias [H, V], attention_output/kernel [H, V, out],
attention_output/bias [out] (the biases only with use_bias). Its inputs are
(query, value[, key]) as Keras calls them. "use_causal_mask" in the config is
Strata's own key (Keras passes it when calling the layer)."""
import math

import torch


def _sum(xs, ws):
    y = xs[0]
    for x in xs[1:]:
        y = y + x
    return y


def _sub(xs, ws):
    return xs[0] - xs[1]


def _mul(xs, ws):
    y = xs[0]
    for x in xs[1:]:
        y = y * x
    return y


def _cat(axis):
    def fn(xs, ws):
        return torch.cat(xs, dim=axis)  # Keras and torch count the batch axis alike
    return fn


def _mha(key_dim, causal, bias):
    def fn(xs, ws):
        q, v = xs[0], xs[1]
        k = xs[2] if len(xs) > 2 else v
        if bias:
            wq, bq, wk, bk, wv, bv, wo, bo = ws
        else:
            (wq, wk, wv, wo), bq, bk, bv, bo = ws, None, None, None, None
        Q = torch.einsum("btd,dhk->bhtk", q, wq)
        K = torch.einsum("bsd,dhk->bhsk", k, wk)
        V = torch.einsum("bsd,dhv->bhsv", v, wv)
        if bias:
            Q = Q + bq[None, :, None, :]
            K = K + bk[None, :, None, :]
            V = V + bv[None, :, None, :]
        S = torch.einsum("bhtk,bhsk->bhts", Q, K) / math.sqrt(key_dim)
        if causal:
            tq, tv = S.shape[-2], S.shape[-1]
            keep = torch.ones(tq, tv, dtype=torch.bool).tril()
            S = S.masked_fill(~keep, float("-inf"))
        P = torch.softmax(S, dim=-1)
        O = torch.einsum("bhts,bhsv->bthv", P, V)
        y = torch.einsum("bthv,hvo->bto", O, wo)
        return y + bo if bias else y
    return fn


def _mha_layer(heads, key_dim, value_dim=None, output_shape=None, use_bias=True, causal=False,
               name="mha"):
    cfg = {"name": name, "num_heads": heads, "key_dim": key_dim, "value_dim": value_dim,
           "dropout": 0.0, "use_bias": use_bias, "output_shape": output_shape,
           "attention_axes": None, "use_causal_mask": causal}
    return {"class_name": "MultiHeadAttention", "config": cfg}


CASES = [
    dict(name="add_2", layer={"class_name": "Add", "config": {"name": "add"}},
         inputs=[[3, 4], [3, 4]], batch=2, torch=_sum),
    dict(name="add_3", layer={"class_name": "Add", "config": {"name": "add3"}},
         inputs=[[5], [5], [5]], batch=3, torch=_sum),
    dict(name="subtract", layer={"class_name": "Subtract", "config": {"name": "sub"}},
         inputs=[[2, 3, 2], [2, 3, 2]], batch=2, torch=_sub),
    dict(name="multiply_3", layer={"class_name": "Multiply", "config": {"name": "mul"}},
         inputs=[[4, 2], [4, 2], [4, 2]], batch=2, torch=_mul),
    dict(name="concatenate_last", layer={"class_name": "Concatenate", "config": {"name": "cat", "axis": -1}},
         inputs=[[3, 2], [3, 5], [3, 1]], batch=2, torch=_cat(-1)),
    dict(name="concatenate_axis1", layer={"class_name": "Concatenate", "config": {"name": "cat1", "axis": 1}},
         inputs=[[2, 3, 2], [4, 3, 2]], batch=2, torch=_cat(1)),
    dict(name="concatenate_axis2", layer={"class_name": "Concatenate", "config": {"name": "cat2", "axis": 2}},
         inputs=[[2, 1, 2], [2, 3, 2]], batch=3, torch=_cat(2)),
    dict(name="concatenate_minus2", layer={"class_name": "Concatenate", "config": {"name": "catm2", "axis": -2}},
         inputs=[[2, 1, 2], [2, 3, 2]], batch=2, torch=_cat(-2)),
    dict(name="mha_cross", layer=_mha_layer(2, 4),
         inputs=[[5, 8], [6, 3]], batch=2, torch=_mha(4, False, True)),
    dict(name="mha_causal_self", layer=_mha_layer(4, 3, causal=True),
         inputs=[[6, 8], [6, 8]], batch=2, torch=_mha(3, True, True)),
    dict(name="mha_no_bias", layer=_mha_layer(2, 4, use_bias=False),
         inputs=[[5, 8], [6, 3]], batch=2, torch=_mha(4, False, False)),
    dict(name="mha_no_bias_causal", layer=_mha_layer(3, 2, use_bias=False, causal=True),
         inputs=[[4, 6], [5, 6]], batch=2, torch=_mha(2, True, False)),
    dict(name="mha_key_value_dim_output", layer=_mha_layer(3, 4, value_dim=2, output_shape=7),
         inputs=[[5, 8], [6, 3], [6, 5]], batch=2, torch=_mha(4, False, True)),
    dict(name="mha_key_causal", layer=_mha_layer(2, 3, value_dim=5, causal=True),
         inputs=[[6, 4], [6, 3], [6, 2]], batch=3, torch=_mha(3, True, True)),
]
