"""Model adapters behind the runtime's one-method model protocol (no Django here).

The SDK-backed adapters (openai, anthropic) import their SDK inside their own
module, so importing this package costs nothing.
"""
