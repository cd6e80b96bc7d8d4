"""Retrieval benchmarks: the retriever's speed, memory and recall, PPR solvers, encoders, fusion."""
