"""Multi-hop sampling of merged requests on one graph part, one path for every graph (a
homogeneous graph is the one-type case): nodes (``sampler``), links (``link``) and time
(``temporal``), and the one batch type they produce (``batch``: ``MiniBatch``, with
``to_pyg()`` a ``Data`` for one type and a ``HeteroData`` for a typed graph).

It knows no ranks: :mod:`mnmg_sampler.distributed` runs these samplers behind the exchange, and
:mod:`mnmg_sampler.loaders` feeds them seeds.
"""
