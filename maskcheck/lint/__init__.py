"""The torch-free source linter: rules MC501-MC525 over the standard library `ast`."""
