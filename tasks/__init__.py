"""vmsst data pipeline: file readers, preprocessors, and the seqio task registry.

Importing this package registers nothing; call tasks.registry.register_families.
"""
