"""A run compiled by the TPU compiler for a slice, on this machine."""
