"""Serving the retriever: a named Ray service in front of replicas, clients, batching and HTTP.

Layers, each importing only those below it: ``config`` (:class:`ServingConfig`), ``batching``
(the micro-batcher every server shares), ``routing`` (pure placement, routing, scaling and
versioning rules), ``shared_arrays`` (node-shared memory maps of the KB), ``replica`` (one
replica actor), ``service`` (the named service and its creation), ``clients`` (Ray, HTTP and
in-process clients) and ``http_limits`` / ``http_protocol`` / ``http`` (the HTTP server).
"""
