"""The model core: network, layers, losses, the objective base class, partitioning."""
