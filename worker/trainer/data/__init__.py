"""Built-in datasets. Each builder takes (params, data_root) and returns a torch Dataset of
(input, target) pairs for cross-entropy: a class index, or a sequence of next-sample codes."""
