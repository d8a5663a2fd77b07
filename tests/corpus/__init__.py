"""The symbolize corpus: real architectures from ``transformers`` configs and the harness that checks them."""
