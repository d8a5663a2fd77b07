"""Built-in passes, one module each, registered through the ``onnxsurgery.passes`` entry points."""
