"""``python -m onnxsurgery.cli``: the ``onnxsurgery`` executable."""

from onnxsurgery.cli import script

script()
