"""The agent runtime: the agent loop, its memory tools, model clients and the scripted model."""
