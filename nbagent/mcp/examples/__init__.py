"""Small MCP servers that ship with nbagent, for examples and notebooks (``python -m ...``).

Each needs the ``mcp`` extra (``pip install "nbagent[mcp]"``); nothing here is imported by
nbagent itself.
"""
