"""The server side of the actor layer: the context actor and what runs inside it.

The context actor, its host (the open context, the inbox and the audit
buffer), the capability guard and the metrics. This side imports the client
side (:mod:`actors.client`) for the names and the reply envelope both speak,
and never the cluster side (:mod:`actors.cluster`).
"""

__all__: list[str] = []
