"""Training on sampled minibatches: one GraphSAGE (:mod:`.model`) and the job run by
``mnmg-sampler train`` on any graph (:mod:`.setup`, :mod:`.job`, :mod:`.link`).

The model consumes a :class:`~mnmg_sampler.sampling.batch.MiniBatch` as PyG's models consume a
``NeighborLoader`` batch: ``model(batch.x, batch.edge_index)`` gives one row per node of
``batch.n_id`` (seeds first; a typed batch's dicts likewise), and the loss is taken on the first
``batch.batch_size`` rows. PyG is optional: a built-in layer has the same math.
"""
