"""Strata's built-in graph models as tf.keras Models (strata.models, not a
TensorFlow name): the engine's own graphs (src/train/builtin_graphs.c),
built under the strategy in scope, uncompiled.

    model = strata.models.resnet20(input_shape=(32, 32, 3))
"""
from . import _strata
from . import distribute as _distribute
from ._util import global_seed
from .keras.functional import Functional


def _builtin(engine_name, input_shape, sync_batchnorm):
    strategy = _distribute._scoped_strategy() or _distribute.get_strategy()
    shape = tuple(int(d) for d in input_shape) if input_shape is not None else None
    cap, _in = _strata.builtin_model(engine_name, global_seed(), strategy._create(),
                                     bool(sync_batchnorm), shape)
    model = Functional(_engine=True)
    return model._from_engine(strategy, cap, None, _strata.model_to_keras_json(cap))


def resnet20(input_shape=(28, 28, 1), sync_batchnorm=False):
    """He et al.'s CIFAR ResNet-20 (0.27M parameters) for [h, w, c] images,
    10 classes (logits); sync_batchnorm: batch statistics over all replicas."""
    return _builtin("resnet20", input_shape, sync_batchnorm)


def mobilenet_tiny(input_shape=(28, 28, 1), sync_batchnorm=False):
    """A few MobileNetV2 inverted-residual blocks (DepthwiseConv2D, ReLU6),
    10 classes (logits)."""
    return _builtin("mobilenet-tiny", input_shape, sync_batchnorm)
