"""Multi-hop sampling of merged requests on one graph part: nodes, links and time, the batches
they produce (``MiniBatch``, ``HeteroMiniBatch``) and their ``to_pyg()``.

It knows no ranks: :mod:`mnmg_sampler.distributed` runs these samplers behind the exchange, and
:mod:`mnmg_sampler.loaders` feeds them seeds.
"""
