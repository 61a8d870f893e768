"""Distillation teachers and their vectors cached on disk."""
