"""Running attention calls for real: every SDPA backend and MHA path, a float64 reference,
capture files, and the runtime guard. The only package (with the torch loader) that imports
torch at module level."""
