"""The client side of the actor layer: what a process needs to call a context actor.

The transport (Ray calls, retries, error translation), the handle
(:class:`~actors.client.handle.ContextHandle`), the reply envelope and the
read-modify-write helper. This side never imports the server side
(:mod:`actors.server`) or the cluster side (:mod:`actors.cluster`).
"""

__all__: list[str] = []
