"""keras_hub's layers for GPT-2 (issue 31): PositionEmbedding and the tied
output head ReversibleEmbedding, called on KerasTensors of a functional
model. layers.py exports them.

    x = Embedding(V, C)  # wte
    h = x(ids); h = Add()([h, PositionEmbedding(T)(h)]) ... LayerNormalization()(h)
    logits = ReversibleEmbedding(x)(h)   # h . wte^T: one table, both gradients summed

keras_hub's ReversibleEmbedding is one layer called twice (reverse=True for
the head); here the head is its own layer given the Embedding it reads."""
from .layers import Embedding, Layer, _init


class PositionEmbedding(Layer):
    """PositionEmbedding(sequence_length, initializer='glorot_uniform'):
    input (T, d), output (T, d) = embeddings[:T] (the learned position
    vectors; add them to the token embeddings)."""

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if int(sequence_length) <= 0:
            raise ValueError("PositionEmbedding: sequence_length must be positive, got %r" % (sequence_length,))
        self.sequence_length = int(sequence_length)
        self.initializer = _init(initializer, "PositionEmbedding", "initializer")

    def _add(self, m):
        from .. import _strata
        _strata.add_position_embedding(m, self.sequence_length, self.initializer, self._given_name)

    def _weight_shapes(self, s):
        return [((self.sequence_length, s[-1]), True)]


class ReversibleEmbedding(Layer):
    """ReversibleEmbedding(embedding): the logits x . embedding.embeddings^T
    of a language model's head, tied to `embedding` (an Embedding layer of the
    same functional model, called first); no weights of its own."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(embedding, Embedding):
            raise TypeError("ReversibleEmbedding: embedding must be an Embedding layer, got %r" % (embedding,))
        self.embedding = embedding

    def _add(self, m):
        raise NotImplementedError("ReversibleEmbedding: a Sequential cannot hold it; call it on tensors of a "
                                  "functional model after its Embedding")

    def _make(self, h):
        from .. import _strata
        if getattr(self.embedding, "_handle", None) is None:
            raise ValueError("ReversibleEmbedding: call its Embedding on the token ids first")
        _strata.add_reversible_embedding(h, self.embedding._handle)

    def _weight_shapes(self, s):
        return []
