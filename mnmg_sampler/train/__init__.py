"""Training on sampled minibatches: the GraphSAGE model and the job run by ``mnmg-sampler train``.

The model (:mod:`mnmg_sampler.train.model`) consumes a
:class:`~mnmg_sampler.sampling.batch.MiniBatch`
exactly as PyG's models consume a ``NeighborLoader`` batch: ``model(batch.x, batch.edge_index)``
gives one row per node of ``batch.n_id`` (seeds first), and the loss is taken on the first
``batch.batch_size`` rows. PyG's ``SAGEConv`` is used when ``torch_geometric`` is installed; a
built-in layer with the same math is used otherwise, so training needs no optional dependency.
The trainer and the sampling service share one process per GPU; nothing here touches the
process group except through DDP.
"""
