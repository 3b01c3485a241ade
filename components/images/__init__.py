"""Baked machine images: the builder and the GPU and control-plane images."""
