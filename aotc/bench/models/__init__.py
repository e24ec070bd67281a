"""Model builders shared by the tests and the benchmarks: real architectures as ONNX, random weights, no downloads.

builders.py  ModelBuilder (nodes, seeded weights, the checker) and batch_norm
small.py     MODELS (mlp, cnn, transformer block) and a small ResNet bottleneck and BERT encoder: seconds on the cpu device
real.py      REAL_MODELS: ResNet-50, MobileNetV2, BERT-base, GPT-2 small, ViT-B/16 at their real sizes
zoo.py       ZOO_MODELS: EfficientNet, UNet, YOLO head, Llama, Whisper encoder, T5, LSTM tagger, as exporters write them

A builder returns (onnx.ModelProto, {input name: array}); a zoo builder
returns (onnx.ModelProto, make_feeds) where make_feeds(rng) draws the inputs.
The dicts map a name to a builder called with no arguments.
"""
from aotc.bench.models.real import REAL_MODELS
from aotc.bench.models.small import MODELS
from aotc.bench.models.zoo import ZOO_MODELS

__all__ = ["MODELS", "REAL_MODELS", "ZOO_MODELS"]
