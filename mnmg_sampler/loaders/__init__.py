"""The loaders a training loop iterates: ``DistNeighborLoader``, ``DistLinkNeighborLoader``.

They split seeds across ranks, keep the epoch's cursor (resume), prefetch, and hand requests to a
sampler or a :class:`~mnmg_sampler.distributed.service.SamplingService`; they never know how
sampling is done (PyG's loader/sampler split).
"""
