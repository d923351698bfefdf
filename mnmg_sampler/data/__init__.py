"""Embedded datasets, loaded by name through :func:`mnmg_sampler.graph.datasets.load_graph`."""
