"""Strata's built-in graph models as tf.keras Models (strata.models, not a
TensorFlow name): the engine's own graphs (src/train/builtin_graphs.c),
built under the strategy in scope, uncompiled.

    model = strata.models.resnet20(input_shape=(32, 32, 3))
"""
from . import _strata
from . import distribute as _distribute
from ._util import global_seed, next_init_seed
from .keras.functional import Functional


def _builtin(engine_name, input_shape, sync_batchnorm):
    strategy = _distribute._scoped_strategy() or _distribute.get_strategy()
    shape = tuple(int(d) for d in input_shape) if input_shape is not None else None
    cap, _in = _strata.builtin_model(engine_name, global_seed(), strategy._create(),
                                     bool(sync_batchnorm), shape)
    seed = next_init_seed()
    _strata.model_init_seed(cap, seed)
    model = Functional(_engine=True)
    model._init_seed = seed
    return model._from_engine(strategy, cap, None, _strata.model_to_keras_json(cap))


def resnet20(input_shape=(28, 28, 1), sync_batchnorm=False):
    """He et al.'s CIFAR ResNet-20 (0.27M parameters) for [h, w, c] images,
    10 classes (logits); sync_batchnorm: batch statistics over all replicas."""
    return _builtin("resnet20", input_shape, sync_batchnorm)


def mobilenet_tiny(input_shape=(28, 28, 1), sync_batchnorm=False):
    """A few MobileNetV2 inverted-residual blocks (DepthwiseConv2D, ReLU6),
    10 classes (logits)."""
    return _builtin("mobilenet-tiny", input_shape, sync_batchnorm)


_GPT_PRESETS = {"small": (4, 4, 128, 64, 256), "gpt2-124m": (12, 12, 768, 1024, 50257)}


class GPT2:
    """What strata.models.gpt2 returns beside the model: its config and the
    weight files of GPT-2 (llm.c's checkpoint, Hugging Face's safetensors)."""

    def __init__(self, model, config):
        self.model, self.config = model, config

    def _op(self, op, arg):
        if self.model._cap is None or not self.model._compiled:
            raise ValueError("gpt2: compile the model first (the weights exist once compiled)")
        _strata.gpt_weights(self.model._cap, op, self.config, arg)

    def init_weights(self, seed=0):
        """GPT-2's initialisation (normal 0.02, residual projections 0.02/sqrt(2L), LN 1/0, biases 0)."""
        self._op("init", int(seed))

    def load_llmc(self, path):
        self._op("load_llmc", str(path))

    def save_llmc(self, path):
        self._op("save_llmc", str(path))

    def load_hf(self, path):
        self._op("load_hf", str(path))

    def save_hf(self, path):
        self._op("save_hf", str(path))


def gpt2(preset="small", layers=None, heads=None, width=None, seq_len=None, vocab=None):
    """GPT-2 as a functional tf.keras Model of Keras layers (the model of
    `strata train --model gpt`, the same layer names): ids (T,) -> wte
    Embedding + wpe PositionEmbedding -> pre-LayerNorm blocks (causal
    MultiHeadAttention, Dense 4C gelu_approximate, Dense C, residual Adds) ->
    ln_f -> lm_head ReversibleEmbedding tied to wte: logits (T, vocab).
    preset "small" (4, 4, 128, T 64, vocab 256) or "gpt2-124m" (12, 12, 768,
    T 1024, vocab 50257); the arguments override it. Returns a GPT2 holder:
    .model (compile it with SparseCategoricalCrossentropy(from_logits=True);
    labels (n, T)), then .init_weights(seed), .load_llmc/.save_llmc(path),
    .load_hf/.save_hf(path)."""
    from .keras import layers as L
    from .keras import Input
    if preset not in _GPT_PRESETS:
        raise ValueError("gpt2: unknown preset %r (presets: %s)" % (preset, ", ".join(_GPT_PRESETS)))
    cfg = list(_GPT_PRESETS[preset])
    for i, v in enumerate((layers, heads, width, seq_len, vocab)):
        if v is not None:
            cfg[i] = int(v)
    n_layer, n_head, C, T, V = cfg
    if min(cfg) < 1 or C % n_head:
        raise ValueError("gpt2: layers, heads, width, seq_len, vocab must be positive and the width a "
                         "multiple of the heads, got %r" % (tuple(cfg),))
    ids = Input(shape=(T,), name="tokens")
    wte = L.Embedding(V, C, name="wte")
    tok = wte(ids)
    x = L.Add()([tok, L.PositionEmbedding(T, name="wpe")(tok)])
    for i in range(n_layer):
        h = L.LayerNormalization(epsilon=1e-5, name="h%d_ln_1" % i)(x)
        att = L.MultiHeadAttention(n_head, C // n_head, name="h%d_attn" % i)
        att.use_causal_mask = True
        x = L.Add()([x, att(h, h)])
        h = L.LayerNormalization(epsilon=1e-5, name="h%d_ln_2" % i)(x)
        h = L.Dense(4 * C, activation="gelu_approximate", name="h%d_mlp_fc" % i)(h)
        x = L.Add()([x, L.Dense(C, name="h%d_mlp_proj" % i)(h)])
    x = L.LayerNormalization(epsilon=1e-5, name="ln_f")(x)
    logits = L.ReversibleEmbedding(wte, name="lm_head")(x)
    from .keras.functional import Functional
    return GPT2(Functional(ids, logits, name="gpt"), tuple(cfg))
