"""The torch-free source linter: rules MC501-MC506 over the standard library `ast`."""
