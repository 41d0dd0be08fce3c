"""PyTorch comparison cases (tests/test_torch_layers.py says the format):
global pooling, ZeroPadding2D, ReLU / LeakyReLU and the activations relu6,
leaky_relu, gelu_approximate (issue 28, layers-a), and a few existing layers
(Dense, Conv2D with strides and use_bias=False, BatchNormalization in training
mode) that prove the harness. The torch side is written from Keras's
definitions, not from Strata's code."""
import torch
import torch.nn.functional as F


def keras_relu(x, max_value=None, negative_slope=0.0, threshold=0.0):
    """keras.activations.relu as Keras 3 computes it."""
    if negative_slope != 0.0:
        negative_part = F.relu(-x + threshold)
    y = x * (x > threshold).to(x.dtype) if threshold != 0.0 else F.relu(x)
    if max_value is not None:
        y = torch.clamp(y, 0.0, max_value)
    if negative_slope != 0.0:
        y = y - negative_slope * negative_part
    return y


def tf_conv2d(x, kernel, strides, padding, bias=None):
    """Keras Conv2D on NHWC x with kernel [kh, kw, c, f] (TensorFlow's 'same')."""
    xt, kt = x.permute(0, 3, 1, 2), kernel.permute(3, 2, 0, 1)
    if padding == "same":
        pads = []
        for size, k, s in ((x.shape[1], kernel.shape[0], strides[0]),
                           (x.shape[2], kernel.shape[1], strides[1])):
            total = max((-(-size // s) - 1) * s + k - size, 0)
            pads.append((total // 2, total - total // 2))
        xt = F.pad(xt, pads[1] + pads[0])
    return F.conv2d(xt, kt, bias, stride=tuple(strides)).permute(0, 2, 3, 1)


def layer(cls, **config):
    return {"class_name": cls, "config": config}


CASES = [
    # ---- existing layers: the harness's own proof ----
    dict(name="Dense tanh", layer=layer("Dense", units=5, activation="tanh"), inputs=[[7]],
         batch=3, torch=lambda xs, ws: torch.tanh(xs[0] @ ws[0] + ws[1])),
    dict(name="Dense on tokens [T, E] gelu",
         layer=layer("Dense", units=5, activation="gelu"), inputs=[[4, 6]], batch=3,
         torch=lambda xs, ws: F.gelu(xs[0] @ ws[0] + ws[1])),
    dict(name="Dense gelu_approximate",
         layer=layer("Dense", units=4, activation="gelu_approximate"), inputs=[[6]], batch=3,
         torch=lambda xs, ws: F.gelu(xs[0] @ ws[0] + ws[1], approximate="tanh")),
    dict(name="Conv2D same strides 2 no bias",
         layer=layer("Conv2D", filters=4, kernel_size=[3, 3], strides=[2, 2], padding="same",
                     use_bias=False),
         inputs=[[7, 6, 3]], batch=2,
         torch=lambda xs, ws: tf_conv2d(xs[0], ws[0], (2, 2), "same")),
    # 16/32 filters without bias: the cpu backend's direct convolution (stride 1
    # also its direct input gradient; 16 input channels)
    dict(name="Conv2D 16 filters same no bias (direct)",
         layer=layer("Conv2D", filters=16, kernel_size=[3, 3], padding="same", use_bias=False),
         inputs=[[6, 5, 16]], batch=2,
         torch=lambda xs, ws: tf_conv2d(xs[0], ws[0], (1, 1), "same")),
    dict(name="Conv2D 32 filters strides 2 no bias (direct)",
         layer=layer("Conv2D", filters=32, kernel_size=[3, 3], strides=[2, 2], padding="same",
                     use_bias=False),
         inputs=[[7, 6, 3]], batch=2,
         torch=lambda xs, ws: tf_conv2d(xs[0], ws[0], (2, 2), "same")),
    dict(name="Conv2D valid strides (2,1) relu6",
         layer=layer("Conv2D", filters=3, kernel_size=[2, 3], strides=[2, 1], padding="valid",
                     activation="relu6"),
         inputs=[[6, 5, 2]], batch=2, input_range=(-4.0, 4.0),
         torch=lambda xs, ws: F.relu6(tf_conv2d(xs[0], ws[0], (2, 1), "valid", ws[1]))),
    dict(name="Conv2D same gelu_approximate",
         layer=layer("Conv2D", filters=2, kernel_size=3, padding="same",
                     activation="gelu_approximate"),
         inputs=[[5, 4, 3]], batch=2,
         torch=lambda xs, ws: F.gelu(tf_conv2d(xs[0], ws[0], (1, 1), "same", ws[1]),
                                     approximate="tanh")),
    dict(name="BatchNormalization training",
         layer=layer("BatchNormalization", epsilon=0.001), inputs=[[4, 3, 5]], batch=3,
         torch=lambda xs, ws: F.batch_norm(xs[0].reshape(-1, 5), None, None, ws[0], ws[1],
                                           training=True, eps=0.001).reshape(xs[0].shape)),
    # ---- global pooling ----
    dict(name="GlobalAveragePooling2D", layer=layer("GlobalAveragePooling2D"),
         inputs=[[5, 4, 3]], batch=2, torch=lambda xs, ws: xs[0].mean(dim=(1, 2))),
    dict(name="GlobalMaxPooling2D", layer=layer("GlobalMaxPooling2D", keepdims=False),
         inputs=[[5, 4, 3]], batch=2, torch=lambda xs, ws: xs[0].amax(dim=(1, 2))),
    dict(name="GlobalAveragePooling1D", layer=layer("GlobalAveragePooling1D"),
         inputs=[[6, 4]], batch=3, torch=lambda xs, ws: xs[0].mean(dim=1)),
    dict(name="GlobalMaxPooling1D", layer=layer("GlobalMaxPooling1D", data_format="channels_last"),
         inputs=[[6, 4]], batch=3, torch=lambda xs, ws: xs[0].amax(dim=1)),
    # ---- ZeroPadding2D: ((top, bottom), (left, right)), (h, w), n ----
    dict(name="ZeroPadding2D ((1,2),(0,3))", layer=layer("ZeroPadding2D", padding=[[1, 2], [0, 3]]),
         inputs=[[3, 4, 2]], batch=2, torch=lambda xs, ws: F.pad(xs[0], (0, 0, 0, 3, 1, 2))),
    dict(name="ZeroPadding2D (2,1)", layer=layer("ZeroPadding2D", padding=[2, 1]),
         inputs=[[3, 3, 2]], batch=2, torch=lambda xs, ws: F.pad(xs[0], (0, 0, 1, 1, 2, 2))),
    dict(name="ZeroPadding2D 1", layer=layer("ZeroPadding2D", padding=1), inputs=[[2, 3, 1]],
         batch=2, torch=lambda xs, ws: F.pad(xs[0], (0, 0, 1, 1, 1, 1))),
    # ---- ReLU, LeakyReLU ----
    dict(name="ReLU defaults (Activation relu)", layer=layer("ReLU"), inputs=[[4, 5]], batch=2,
         torch=lambda xs, ws: keras_relu(xs[0])),
    dict(name="ReLU max_value 6 (relu6)", layer=layer("ReLU", max_value=6.0), inputs=[[5, 6]],
         batch=3, input_range=(-9.0, 9.0), torch=lambda xs, ws: keras_relu(xs[0], 6.0)),
    dict(name="ReLU max 1.5 slope 0.1 threshold 0.5",
         layer=layer("ReLU", max_value=1.5, negative_slope=0.1, threshold=0.5), inputs=[[4, 6]],
         batch=3, torch=lambda xs, ws: keras_relu(xs[0], 1.5, 0.1, 0.5)),
    dict(name="ReLU slope 0.2 threshold 0.3",
         layer=layer("ReLU", max_value=None, negative_slope=0.2, threshold=0.3), inputs=[[12]],
         batch=3, torch=lambda xs, ws: keras_relu(xs[0], None, 0.2, 0.3)),
    dict(name="ReLU slope 0.2 (leaky kernel)", layer=layer("ReLU", negative_slope=0.2),
         inputs=[[12]], batch=3, torch=lambda xs, ws: keras_relu(xs[0], None, 0.2)),
    dict(name="ReLU threshold 1", layer=layer("ReLU", threshold=1.0), inputs=[[12]], batch=3,
         torch=lambda xs, ws: keras_relu(xs[0], None, 0.0, 1.0)),
    dict(name="LeakyReLU negative_slope 0.3", layer=layer("LeakyReLU", negative_slope=0.3),
         inputs=[[3, 4, 2]], batch=2, torch=lambda xs, ws: F.leaky_relu(xs[0], 0.3)),
    dict(name="LeakyReLU Keras 2 alpha 0.2", layer=layer("LeakyReLU", alpha=0.2), inputs=[[10]],
         batch=3, torch=lambda xs, ws: F.leaky_relu(xs[0], 0.2)),
    dict(name="LeakyReLU default 0.3", layer=layer("LeakyReLU"), inputs=[[10]], batch=3,
         torch=lambda xs, ws: F.leaky_relu(xs[0], 0.3)),
    # ---- activation strings ----
    dict(name="Activation relu6", layer=layer("Activation", activation="relu6"), inputs=[[16]],
         batch=3, input_range=(-9.0, 9.0), torch=lambda xs, ws: F.relu6(xs[0])),
    dict(name="Activation leaky_relu", layer=layer("Activation", activation="leaky_relu"),
         inputs=[[16]], batch=3, torch=lambda xs, ws: F.leaky_relu(xs[0], 0.2)),
    dict(name="Activation gelu", layer=layer("Activation", activation="gelu"), inputs=[[16]],
         batch=3, input_range=(-5.0, 5.0), torch=lambda xs, ws: F.gelu(xs[0])),
    dict(name="Activation gelu_approximate",
         layer=layer("Activation", activation={"module": "keras.activations",
                                               "class_name": "function",
                                               "config": "gelu_approximate",
                                               "registered_name": "function"}),
         inputs=[[16]], batch=3, input_range=(-5.0, 5.0),
         torch=lambda xs, ws: F.gelu(xs[0], approximate="tanh")),
]
