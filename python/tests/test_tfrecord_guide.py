"""TFRecord written the TensorFlow way (issue 32, point 7), as TensorFlow's
"TFRecord and tf.train.Example" tutorial writes it (only the import
changed, fewer observations): tf.train.Example / Features / Feature /
BytesList / Int64List / FloatList, SerializeToString (the tutorial's bytes,
and the C serializer's), ParseFromString, tf.py_function, writing with
tf.data.experimental.TFRecordWriter and tf.io.TFRecordWriter, reading with
FixedLenFeature(default_value=...)."""
import os

import numpy as np
import pytest

import strata as tf
from strata import _strata


def _bytes_feature(value):
    """Returns a bytes_list from a string / byte."""
    if isinstance(value, type(tf.constant(0))):
        value = value.numpy()  # BytesList won't unpack a string from an EagerTensor.
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _float_feature(value):
    """Returns a float_list from a float / double."""
    return tf.train.Feature(float_list=tf.train.FloatList(value=[value]))


def _int64_feature(value):
    """Returns an int64_list from a bool / enum / int / uint."""
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def serialize_example(feature0, feature1, feature2, feature3):
    feature = {
        'feature0': _int64_feature(feature0),
        'feature1': _int64_feature(feature1),
        'feature2': _bytes_feature(feature2),
        'feature3': _float_feature(feature3),
    }
    example_proto = tf.train.Example(features=tf.train.Features(feature=feature))
    return example_proto.SerializeToString()


def test_feature_bytes_as_the_tutorial_prints_them():
    assert _bytes_feature(b'test_string').SerializeToString() == b'\n\r\n\x0btest_string'
    assert _bytes_feature(u'test_bytes'.encode('utf-8')).SerializeToString() == b'\n\x0c\n\ntest_bytes'
    feature = _float_feature(np.exp(1))
    assert feature.SerializeToString() == b'\x12\x06\n\x04T\xf8-@'
    assert _int64_feature(True).SerializeToString() == b'\x1a\x03\n\x01\x01'
    assert _int64_feature(1).SerializeToString() == b'\x1a\x03\n\x01\x01'
    assert _int64_feature(-1).SerializeToString() == b'\x1a\x0c\n\n' + b'\xff' * 9 + b'\x01'
    with pytest.raises(TypeError, match="expected one of: bytes"):
        tf.train.BytesList(value=['a str'])
    with pytest.raises(TypeError, match="expected one of: int"):
        tf.train.Int64List(value=[1.5])


def test_examples_match_the_c_serializer():
    cases = [
        [("f", 0, np.array([1.5, -2.0, np.pi], "<f4").tobytes(), 3)],
        [("a", 1, np.array([0, 1, -5, 2 ** 40], "<i8").tobytes(), 4), ("raw", 2, b"\x00\x01\xff\x00", 4)],
        [("empty_f", 0, b"", 0), ("empty_i", 1, b"", 0), ("b", 2, b"", 0)],
        [],
    ]
    for case in cases:
        feats = {}
        for name, kind, data, count in case:
            if kind == 0:
                feats[name] = tf.train.Feature(float_list=tf.train.FloatList(value=np.frombuffer(data, "<f4")))
            elif kind == 1:
                feats[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=np.frombuffer(data, "<i8")))
            else:
                feats[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[data]))
        ours = tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()
        assert ours == _strata.example_serialize(list(case)), case
        back = tf.train.Example.FromString(ours)
        assert back == tf.train.Example(features=tf.train.Features(feature=feats))


def test_tfrecord_tutorial(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    n_observations = 100
    np.random.seed(0)
    feature0 = np.random.choice([False, True], n_observations)
    feature1 = np.random.randint(0, 5, n_observations)
    strings = np.array([b'cat', b'dog', b'chicken', b'horse', b'goat'])
    feature2 = strings[feature1]
    feature3 = np.random.randn(n_observations)

    serialized_example = serialize_example(False, 4, b'goat', 0.9876)
    example_proto = tf.train.Example.FromString(serialized_example)
    assert example_proto.features.feature['feature2'].bytes_list.value == [b'goat']
    assert example_proto.features.feature['feature1'].int64_list.value == [4]
    assert example_proto.features.feature['feature3'].float_list.value[0] == pytest.approx(0.9876, rel=1e-6)
    text = str(example_proto)
    assert 'key: "feature2"' in text and 'value: "goat"' in text and text.startswith("features {")

    features_dataset = tf.data.Dataset.from_tensor_slices((feature0, feature1, feature2, feature3))
    for f0, f1, f2, f3 in features_dataset.take(1):
        assert (bool(f0), int(f1), f2.numpy()) == (bool(feature0[0]), int(feature1[0]), feature2[0])

    def tf_serialize_example(f0, f1, f2, f3):
        tf_string = tf.py_function(serialize_example, (f0, f1, f2, f3), tf.string)
        return tf.reshape(tf_string, ())
    assert isinstance(tf_serialize_example(f0, f1, f2, f3), (bytes, np.ndarray))

    def generator():
        for features in features_dataset:
            yield serialize_example(*features)
    serialized_features_dataset = tf.data.Dataset.from_generator(generator, output_types=tf.string, output_shapes=())
    filename = 'test.tfrecord'
    writer = tf.data.experimental.TFRecordWriter(filename)
    writer.write(serialized_features_dataset)

    filenames = [filename]
    raw_dataset = tf.data.TFRecordDataset(filenames)
    records = [r.numpy() for r in raw_dataset]
    assert len(records) == n_observations and records[0] == serialize_example(
        feature0[0], feature1[0], feature2[0], feature3[0])

    feature_description = {
        'feature0': tf.io.FixedLenFeature([], tf.int64, default_value=0),
        'feature1': tf.io.FixedLenFeature([], tf.int64, default_value=0),
        'feature2': tf.io.FixedLenFeature([], tf.string, default_value=''),
        'feature3': tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
        'missing': tf.io.FixedLenFeature([2], tf.float32, default_value=-1.0),
    }

    def _parse_function(example_proto):
        return tf.io.parse_single_example(example_proto, feature_description)
    parsed_dataset = raw_dataset.map(_parse_function)
    parsed = list(parsed_dataset.take(10))
    for i, rec in enumerate(parsed):
        assert rec['feature0'].numpy() == feature0[i] and rec['feature1'].numpy() == feature1[i]
        assert rec['feature2'].numpy() == feature2[i]
        assert rec['feature3'].numpy() == np.float32(feature3[i])
        np.testing.assert_array_equal(rec['missing'], [-1.0, -1.0])

    with tf.io.TFRecordWriter(filename) as writer:  # the tutorial's second way
        for i in range(n_observations):
            example = serialize_example(feature0[i], feature1[i], feature2[i], feature3[i])
            writer.write(example)
    assert [r.numpy() for r in tf.data.TFRecordDataset(filename)] == records

    for raw_record in raw_dataset.take(1):
        example = tf.train.Example()
        example.ParseFromString(raw_record.numpy())
    result = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof('kind')
        result[key] = np.array(getattr(feature, kind).value)
    assert result['feature2'].tolist() == [feature2[0]] and result['feature1'].tolist() == [feature1[0]]
    assert os.path.getsize(filename) > 0


def test_default_value_checks():
    with pytest.raises(ValueError, match="default_value"):
        tf.io.FixedLenFeature([3], tf.float32, default_value=[1.0, 2.0])
    f = tf.io.FixedLenFeature([2], tf.int64, default_value=[4, 5])
    rec = tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0]))})).SerializeToString()
    out = tf.io.parse_single_example(rec, {"x": tf.io.FixedLenFeature([], tf.float32), "y": f})
    np.testing.assert_array_equal(out["y"], [4, 5])
    with pytest.raises(ValueError, match="'z' is missing"):
        tf.io.parse_single_example(rec, {"z": tf.io.FixedLenFeature([], tf.float32)})
