"""Built-in passes, registered through the ``onnxsurgery.passes`` entry points like any plugin's.

A pass is one module (``cleanup``, ``infer_shapes``, ``validate``) or, when it needs more, one
package holding its own machinery (``symbolize/``, ``concat_outputs/``, ``fold_constants/``).
Passes import the engine (``onnxsurgery``); the engine never imports a pass.
"""
