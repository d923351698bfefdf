"""Training on sampled minibatches: the GraphSAGE models and the job run by ``mnmg-sampler train``
on any graph (a homogeneous graph is the one-type case: :mod:`.setup`, :mod:`.job`, :mod:`.link`).

The model (:mod:`mnmg_sampler.train.model`) consumes a
:class:`~mnmg_sampler.sampling.batch.MiniBatch` exactly as PyG's models consume a
``NeighborLoader`` batch: ``model(batch.x, batch.edge_index)`` gives one row per node of
``batch.n_id`` (seeds first), and the loss is taken on the first ``batch.batch_size`` rows (a
typed batch's dicts: :class:`~.model.HeteroGraphSAGE`). PyG's ``SAGEConv`` is used when
``torch_geometric`` is installed; a built-in layer with the same math is used otherwise, so
training needs no optional dependency. The trainer and the sampling service share one process
per GPU; nothing here touches the process group except through DDP.
"""
