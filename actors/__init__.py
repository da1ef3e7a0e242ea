"""Ray actors: context actors, agent threads and their client handles (imports Ray lazily)."""

__all__: list[str] = []
