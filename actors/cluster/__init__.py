"""The cluster side of the actor layer: where contexts live and how followers keep up.

The context directory, placement over the nodes, the follower actors, the
primary's shipping to them and the failover supervisor. It builds on the
client side (:mod:`actors.client`) and the server side (:mod:`actors.server`).
"""

__all__: list[str] = []
