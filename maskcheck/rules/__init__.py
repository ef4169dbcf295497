"""Rules: metadata in `registry` (light, no numpy), mask checks in `mask_*` modules."""
