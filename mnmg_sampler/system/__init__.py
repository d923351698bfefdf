"""What the process runs on: the torchrun environment (``init_distributed``, threads), devices
and optional GPU packages, the memory pool, host limits and the allocator, console output.
"""
